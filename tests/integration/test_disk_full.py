"""A full disk degrades, it does not stop (issue 23): real processes on 127.0.0.1, the
coordinator's data dir on a 48 MiB tmpfs of the test's own. Mid-run another program fills the
file system. The coordinator stays up serving reads (status and results answer throughout),
refuses writes with STORAGE_FULL (a submit, the workers' reports: they keep them in their
outboxes), reports NOT_SERVING on its health service, and once the filler is removed it
writes again by itself: the run completes without a restart, every result acknowledged before
the fill is still selected as it was, and nothing is selected twice."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from common.fleetpb import admin_pb2
from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec
from tools.fleetctl.client import CtlError

pytestmark = pytest.mark.timeout(180)
GROUPS = 30
DISK_MB = 48


@pytest.fixture
def small_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs of its own")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb") as f:
        block = b"\0" * (1 << 20)
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError:
            pass
    return filler


def health(cluster: Cluster) -> str:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(cluster.address) as channel:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def selected(results: dict) -> dict[str, str]:
    return {c["cell_id"]: c["attempt_id"] for c in results["cells"] if c["state"] == "selected"}


def test_a_full_coordinator_disk_serves_reads_refuses_writes_and_writes_again_when_space_returns(
        tmp_path: Path, small_disk: Path) -> None:
    # Only the data dir is on the small disk: the daemons' logs (the journal, under systemd) are not.
    cluster = Cluster(tmp_path / "cluster")
    cluster.root.mkdir()
    (small_disk / "coordinator").mkdir()
    (cluster.root / "coordinator").symlink_to(small_disk / "coordinator")
    try:
        cluster.start_coordinator()
        pid = cluster.coordinator.pid
        for w in ("w1", "w2"):
            cluster.start_worker(w, slots=2, extra=("--state-dir", str(tmp_path / f"state-{w}")))
        run_id = cluster.submit(intbench_spec(GROUPS, subjects=("medium",)), FAST_POLICY)
        deadline = time.monotonic() + 60
        while len(selected(cluster.results(run_id))) < 6:
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.05)
        filler = fill(small_disk)
        before = selected(cluster.results(run_id))  # acknowledged before the disk filled
        # A large submit needs new pages of the log (small commits may still fit in LMDB's free
        # ones): it is refused, and the coordinator turns read-only.
        big = intbench_spec(20_000, subjects=("good",))
        admin = cluster.admin()
        try:
            with pytest.raises(CtlError) as refused:
                admin.call("SubmitRun", admin_pb2.SubmitRunRequest(spec_json=json.dumps(big), policy_json="{}"))
            assert "STORAGE_FULL" in str(refused.value), refused.value
        finally:
            admin.close()
        log = cluster.coordinator.log_path
        assert "storage_full_read_only" in log.read_text(), cluster.tails()
        for _ in range(10):  # reads answer throughout; the process stays up
            assert cluster.coordinator.alive(), cluster.tails()
            results = cluster.results(run_id)
            assert set(before) <= set(selected(results))
            assert cluster.status()["runs"]
            time.sleep(0.2)
        assert health(cluster) == "NOT_SERVING"
        stuck = selected(cluster.results(run_id))
        time.sleep(1.0)
        assert selected(cluster.results(run_id)) == stuck, "nothing is committed while the disk is full"
        filler.unlink()  # space is back: no restart
        final = cluster.wait_settled(run_id, timeout_s=120)
        assert cluster.coordinator.pid == pid and cluster.coordinator.alive(), "never restarted"
        assert final["summary"]["state"] == "complete" and final["summary"]["selected"] == GROUPS, cluster.tails()
        after = selected(final)
        assert all(after[cid] == tid for cid, tid in before.items()), "an acknowledged result changed"
        assert health(cluster) == "SERVING"
        assert "storage_writable_again" in cluster.coordinator.log_path.read_text()
    finally:
        cluster.stop_all()


WORKER_DISK_TASKS = 30


def test_a_worker_whose_disk_fills_starts_nothing_it_could_not_keep_and_goes_on_when_space_returns(
        tmp_path: Path, small_disk: Path) -> None:
    """The issue's case: one worker (2 slots), its state dir (and so its scratch) on the small
    disk, filled by another program after 6 cells were selected and freed 8 s later. The worker
    stays up, says why in its heartbeat (fleetctl status shows it), starts no cell meanwhile, and
    the run completes with no cell out of attempts (before: 32 of 60)."""
    cluster = Cluster(tmp_path / "cluster")
    (cluster.root / "workers").mkdir(parents=True)
    (small_disk / "w1").mkdir()
    (cluster.root / "workers" / "w1").symlink_to(small_disk / "w1")
    try:
        cluster.start_coordinator()
        worker = cluster.start_worker("w1", slots=2, extra=("--min-free-mb", "4"))
        pid = worker.pid
        run_id = cluster.submit(intbench_spec(WORKER_DISK_TASKS, subjects=("medium", "good")), FAST_POLICY)
        deadline = time.monotonic() + 60
        while len(selected(cluster.results(run_id))) < 6:
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.05)
        filler = fill(small_disk)
        said = ""
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            assert worker.alive(), cluster.tails()
            for w in cluster.status()["workers"]:
                said = said or (w.get("degraded") or "")
            time.sleep(0.2)
        stuck = len(selected(cluster.results(run_id)))
        filler.unlink()
        final = cluster.wait_settled(run_id, timeout_s=120)
        assert "MiB free" in said or "disk is full" in said, f"status never said why: {said!r}\n" + cluster.tails()
        assert worker.pid == pid and worker.alive(), "the worker stayed up"
        assert final["summary"]["state"] == "complete", cluster.tails()
        assert final["summary"]["selected"] == 2 * WORKER_DISK_TASKS and stuck < 2 * WORKER_DISK_TASKS
        assert not [c for c in final["cells"] if c["state"] != "selected"], "a cell ran out of attempts"
        assert "no new cell starts" in worker.log_path.read_text()
    finally:
        cluster.stop_all()


def test_a_worker_that_starts_with_its_disk_full_says_so_in_its_hello_and_gets_nothing(
        tmp_path: Path, small_disk: Path) -> None:
    """A worker whose disk is short at its hello says so there: the registration dispatches it
    nothing (before, the first group came with the registration, before the first heartbeat
    said the disk was full, and waited on that worker for room; a coordinator restored from a
    backup older than the full disk did the same). Once there is room it takes work."""
    cluster = Cluster(tmp_path / "cluster")
    (cluster.root / "workers").mkdir(parents=True)
    (small_disk / "w1").mkdir()
    (cluster.root / "workers" / "w1").symlink_to(small_disk / "w1")
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * ((DISK_MB - 36) << 20))  # 36 MiB left, under the worker's 40
    try:
        cluster.start_coordinator()
        run_id = cluster.submit(intbench_spec(4, subjects=("good",)), FAST_POLICY)
        worker = cluster.start_worker("w1", slots=2, extra=("--min-free-mb", "40"))
        seen = []
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert worker.alive(), cluster.tails()
            seen += [(w.get("degraded") or "", w.get("busy_slots", 0)) for w in cluster.status()["workers"]]
            time.sleep(0.05)
        assert seen and seen[0][0], f"its registration did not say the disk was short: {seen[:3]}\n" + cluster.tails()
        assert all(busy == 0 for _, busy in seen), f"a group went to the worker whose disk is full: {seen}"
        filler.unlink()
        final = cluster.wait_settled(run_id, timeout_s=60)
        assert final["summary"]["state"] == "complete" and final["summary"]["selected"] == 4, cluster.tails()
    finally:
        cluster.stop_all()
