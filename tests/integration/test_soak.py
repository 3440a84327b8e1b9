"""Seeded soak over a fake network: real workers reach a real coordinator through a proxy that
drops, delays, duplicates and cuts; the run must converge with every result acknowledged kept,
and the coordinator's recovered state must satisfy the simulation's invariants."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from coordinator.recovery import recover
from coordinator.core.invariants import check
from coordinator.store import Store
from tests.integration.fakenet import FakeNet
from tests.integration.harness import Cluster, intbench_spec
from tests.integration.test_daemon import acked_accepted, check_expected

# CI runs this bounded slice; FLEET_SOAK_SEEDS="1-20" runs a longer soak.
SOAK_SEEDS = os.environ.get("FLEET_SOAK_SEEDS", "7")
FAULT_WINDOW_S = float(os.environ.get("FLEET_SOAK_FAULT_WINDOW_S", "12"))


def seeds() -> list[int]:
    lo, _, hi = SOAK_SEEDS.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


@pytest.mark.soak
@pytest.mark.parametrize("seed", seeds())
def test_run_converges_over_a_faulty_network(tmp_path: Path, seed: int) -> None:
    cluster = Cluster(tmp_path)
    net = None
    try:
        cluster.start_coordinator()
        net = FakeNet(cluster.address, seed)
        proxy = net.start()
        for wid in ("w1", "w2", "w3"):
            cluster.start_worker(wid, slots=2, address=proxy, extra=("--log-level", "debug"))
        subjects = ("good", "bad", "slow")
        run_id = cluster.submit(intbench_spec(30, subjects, cap=6))
        started = time.monotonic()
        while time.monotonic() - started < FAULT_WINDOW_S:
            if cluster.results(run_id)["summary"]["state"] in ("complete", "incomplete"):
                break
            time.sleep(0.2)
        net.enabled = False  # faults stop; the run must now settle
        results = cluster.wait_settled(run_id, 120)
        assert results["summary"]["state"] == "complete", (seed, results["summary"], net.stats)
        check_expected(results, subjects)
        selected = {c["attempt_id"] for c in results["cells"]}
        lost = [a for a in acked_accepted(cluster) if a not in selected]
        assert not lost, f"seed {seed}: acknowledged results missing: {lost}"
        assert not cluster.status()["dead_letters"], f"seed {seed}: a worker gave up on a report"
        assert net.stats["streams"] > 3, net.stats
        faults = net.stats["drops_up"] + net.stats["drops_down"] + net.stats["duplicates"] + net.stats["cuts"]
        assert faults > 0, f"seed {seed} injected no fault: {net.stats}"
        print(f"seed {seed}: {net.stats}")
    finally:
        cluster.stop_all()
        if net is not None:
            net.stop()
    store = Store.open(cluster.data_dir)
    try:
        state, _ = recover(store)
    finally:
        store.close()
    assert check(state) == [], f"seed {seed}: invariants broken in the recovered state"
