"""A broken worker is quarantined, not fed (issue 23): real processes on 127.0.0.1. Beside a
healthy worker, a worker whose every attempt fails at once (its bench root is empty: the
subject's script is missing, as with a full disk or a missing tool) would free its slot,
claim the next group and burn the run's attempts. With quarantine it is stopped after
`quarantineAfterFailures` failures in a row, the attempts it burned are given back, and the
run completes on the healthy worker with no cell exhausted; the broken worker stays up."""
from __future__ import annotations

import json
import time
from pathlib import Path

from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec

GROUPS = 16


def events(cluster: Cluster, name: str) -> list[dict]:
    return [json.loads(line) for line in cluster.coordinator.log_path.read_text().splitlines()
            if f'"{name}"' in line and line.startswith("{")]


def run_beside_a_black_hole(tmp_path: Path, policy: dict) -> tuple[dict, Cluster]:
    empty = tmp_path / "empty-bench"
    empty.mkdir()
    cluster = Cluster(tmp_path / "cluster")
    cluster.start_coordinator()
    cluster.start_worker("good", slots=2)
    run_id = cluster.submit(intbench_spec(GROUPS, subjects=("medium",)), policy)
    deadline = time.monotonic() + 60
    while not cluster.results(run_id)["summary"]["selected"]:  # the healthy worker has succeeded
        assert time.monotonic() < deadline, cluster.tails()
        time.sleep(0.05)
    cluster.start_worker("bad", slots=2, bench_root=empty)
    return cluster.wait_settled(run_id, timeout_s=120), cluster


def test_a_worker_failing_every_attempt_is_quarantined_and_the_run_completes_on_the_healthy_one(tmp_path):
    final, cluster = run_beside_a_black_hole(tmp_path, dict(FAST_POLICY, quarantineAfterFailures=3))
    try:
        assert final["summary"]["state"] == "complete", cluster.tails()
        assert final["summary"]["selected"] == GROUPS and final["summary"]["incomplete"] == 0
        quarantined = events(cluster, "worker_quarantined")
        assert [e["subject"] for e in quarantined][:1] == ["bad"], cluster.tails()
        assert all(c["worker_id"] == "good" for c in final["cells"] if c["state"] == "selected")
        assert cluster.workers["bad"].alive(), "the broken worker stays up"
    finally:
        cluster.stop_all()


def test_without_quarantine_the_broken_worker_exhausts_cells(tmp_path):
    """The measured case the quarantine answers (and the check above can fail): off, the
    broken worker's failures exhaust cells that the healthy worker would have run."""
    final, cluster = run_beside_a_black_hole(tmp_path, dict(FAST_POLICY, quarantineAfterFailures=0))
    try:
        assert final["summary"]["incomplete"] > 0, "with quarantine off, the black hole burns cells"
        assert events(cluster, "worker_quarantined") == []
    finally:
        cluster.stop_all()
