"""The coordinator's own stall is its outage, not the workers' (issue 23): real processes on
127.0.0.1. The coordinator is frozen with SIGSTOP for longer than the expiry while its workers
run their cells into their outboxes, then thawed with SIGCONT. Counted from the subjects' own
side (each execution appends a line), every cell is executed exactly once and selected once,
and the coordinator logged a CoordinatorStalled instead of expiring anyone.

The CI test freezes for twice the fast policy's expiry; the `crash`-marked one freezes for
20 s at the default policy (expiry 15 s), the case measured in the issue."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec

GROUPS = 12


def executions(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "start":
            counts[parts[1]] = counts.get(parts[1], 0) + 1
    return counts


def events(cluster: Cluster, name: str) -> list[dict]:
    return [json.loads(line) for line in cluster.coordinator.log_path.read_text().splitlines()
            if f'"{name}"' in line and line.startswith("{")]


def freeze_mid_run(tmp_path: Path, policy: dict, freeze_s: float) -> None:
    log = tmp_path / "executions.log"
    spec = intbench_spec(GROUPS, subjects=("slow",), cap=GROUPS)
    spec["subjects"][0]["args"].append(str(log))
    cluster = Cluster(tmp_path / "cluster")
    try:
        cluster.start_coordinator()
        for w in ("w1", "w2"):
            cluster.start_worker(w, slots=2)
        run_id = cluster.submit(spec, policy)
        deadline = time.monotonic() + 60
        while sum(executions(log).values()) < 4:  # both workers busy with their first groups
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.05)
        os.kill(cluster.coordinator.pid, signal.SIGSTOP)
        try:
            time.sleep(freeze_s)  # the workers finish their cells meanwhile, into their outboxes
        finally:
            os.kill(cluster.coordinator.pid, signal.SIGCONT)
        final = cluster.wait_settled(run_id, timeout_s=120)
        assert final["summary"]["state"] == "complete", cluster.tails()
        assert final["summary"]["selected"] == GROUPS
        executed = executions(log)
        twice = {cell: n for cell, n in executed.items() if n != 1}
        assert len(executed) == GROUPS and twice == {}, f"cells executed more than once: {twice}\n{cluster.tails()}"
        stalls = events(cluster, "coordinator_stalled")
        assert stalls and stalls[0]["stalled_ms"] >= freeze_s * 1000 * 0.9, cluster.tails()
        expired = [e for e in events(cluster, "worker_expired")] + [e for e in events(cluster, "worker_lost")]
        assert expired == [], f"a worker was expired for the coordinator's own silence: {expired}"
        assert all(p.alive() for p in cluster.workers.values()), "the workers kept going"
    finally:
        cluster.stop_all()


def test_a_coordinator_frozen_past_the_expiry_expires_nobody_and_executes_each_cell_once(tmp_path: Path) -> None:
    freeze_mid_run(tmp_path, FAST_POLICY, freeze_s=2 * FAST_POLICY["expireAfterMs"] / 1000)


@pytest.mark.crash
@pytest.mark.skipif(not os.environ.get("FLEET_LONG_TESTS"),
                    reason="the issue's 20 s freeze at the default policy (25 s): FLEET_LONG_TESTS=1 runs it; "
                           "the freeze past the fast policy's expiry above runs every time")
def test_a_20_s_freeze_at_the_default_policy_executes_each_cell_once(tmp_path: Path) -> None:
    freeze_mid_run(tmp_path, {"maxAttemptsPerCell": 3}, freeze_s=20)
