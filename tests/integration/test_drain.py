"""Graceful drain of real worker processes: `fleetctl drain` and SIGTERM both let running groups
settle (or hand them back past the drain deadline for immediate redispatch), flush, exit 0."""
from __future__ import annotations

import json
import time
from pathlib import Path

from common.fleetpb import admin_pb2
from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec


def test_fleetctl_drain_finishes_running_groups_and_exits_zero(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_coordinator()
        w1 = cluster.start_worker("w1", slots=1)
        log = tmp_path / "executions.log"
        spec = intbench_spec(6, ("slow",), cap=2)
        spec["subjects"][0]["args"].append(str(log))
        run_id = cluster.submit(spec)
        deadline = time.monotonic() + 30
        while not (log.exists() and "start" in log.read_text()):  # a group is really running
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.05)
        admin = cluster.admin()
        try:
            resp = admin.call("DrainWorker", admin_pb2.DrainWorkerRequest(worker_id="w1"))
        finally:
            admin.close()
        assert resp.outcome == 1, resp  # accepted
        assert w1.popen.wait(30) == 0, w1.tail()
        results = cluster.results(run_id)
        done = [c for c in results["cells"] if c["state"] == "selected"]
        assert 1 <= len(done) < 6, "the running group finished, nothing new was taken"
        assert all(c["attempts"] == 1 for c in done), "the drained group was not cut short"
        cluster.start_worker("w2", slots=2)
        results = cluster.wait_settled(run_id, 60)
        assert results["summary"]["state"] == "complete"
    finally:
        cluster.stop_all()


def test_sigterm_past_the_drain_deadline_hands_groups_back_for_immediate_redispatch(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    policy = dict(FAST_POLICY, suspectAfterMs=20_000, expireAfterMs=60_000, recoveryGraceMs=60_000)
    try:
        cluster.start_coordinator()
        w1 = cluster.start_worker("w1", slots=1, extra=("--drain-timeout-s", "1", "--log-level", "debug"))  # "outcome buffered" is debug
        log = tmp_path / "executions.log"
        spec = intbench_spec(1, ("hang",), cap=1)
        spec["subjects"][0]["args"].append(str(log))  # the subject writes "start" when it runs
        run_id = cluster.submit(spec, policy)
        deadline = time.monotonic() + 30
        # Wait for the subject itself, not the coordinator's view: the group must be running.
        while not (log.exists() and "start" in log.read_text()):
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.05)
        cluster.start_worker("w2", slots=1)
        stopped = time.monotonic()
        assert w1.term(30) == 0, w1.tail()
        results = cluster.wait_settled(run_id, 30)
        took = time.monotonic() - stopped
        cell = results["cells"][0]
        assert cell["state"] == "selected" and cell["worker_id"] == "w2" and cell["attempts"] == 2, cell
        # Expiry would have taken 60 s; the hand-back made the redispatch immediate.
        assert took < 30, f"redispatch took {took:.1f}s"
        log = cluster.workers["w1"].log_path.read_text()
        assert "drain timeout: cancelling running groups" in log, "the worker gave the group up at its deadline"
        # It reported the cut-short attempt (execution unknown) rather than leaving it to expiry.
        assert '"status": "INDETERMINATE"' in log
    finally:
        cluster.stop_all()
