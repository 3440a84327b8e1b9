"""A worker that is gone, not silent: real processes on 127.0.0.1. kill -9 of a worker (its
kernel closes the socket) hands its group to another worker at the end of the short stream-end
grace, long before expiry; a worker frozen with SIGSTOP (its stream open, silent) is left to
suspicion and expiry, and finishes its own group when it thaws."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.harness import FAST_POLICY, Cluster, intbench_spec

GRACE_MS = 1_000
EXPIRE_MS = 30_000


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def _policy() -> dict:
    return dict(FAST_POLICY, suspectAfterMs=10_000, expireAfterMs=EXPIRE_MS, recoveryGraceMs=EXPIRE_MS,
                streamEndGraceMs=GRACE_MS)


def _starts(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [(p[1], p[2]) for p in (line.split() for line in log.read_text().splitlines())
            if len(p) == 3 and p[0] == "start"]


def _events(cluster: Cluster, name: str) -> list[dict]:
    return [json.loads(line) for line in cluster.coordinator.log_path.read_text().splitlines()
            if f'"{name}"' in line]


def _one_hanging_group(cluster: Cluster, tmp_path: Path) -> tuple[str, Path]:
    log = tmp_path / "executions.log"
    spec = intbench_spec(1, ("hang",), cap=1)
    spec["subjects"][0]["args"].append(str(log))
    cluster.start_coordinator()
    cluster.start_worker("w1", slots=1)
    run_id = cluster.submit(spec, _policy())
    deadline = time.monotonic() + 30
    while not _starts(log):
        assert time.monotonic() < deadline, cluster.tails()
        time.sleep(0.02)
    cluster.start_worker("w2", slots=1)
    deadline = time.monotonic() + 30
    while not any(w["worker_id"] == "w2" and w["status"] == "active" for w in cluster.status()["workers"]):
        assert time.monotonic() < deadline, cluster.tails()
        time.sleep(0.05)
    return run_id, log


def test_a_killed_worker_s_group_goes_back_after_the_grace_not_the_expiry(cluster: Cluster, tmp_path: Path) -> None:
    run_id, log = _one_hanging_group(cluster, tmp_path)
    killed = time.monotonic()
    cluster.workers["w1"].kill9()
    results = cluster.wait_settled(run_id, 25)
    took_s = time.monotonic() - killed
    assert results["summary"]["state"] == "complete", results["summary"]
    [cell] = results["cells"]
    assert cell["worker_id"] == "w2" and cell["attempt_id"].endswith(":a2"), cell
    # The grace (1 s) and the 3 s cell again, far inside the 30 s expiry.
    assert took_s < EXPIRE_MS / 1000 / 2, f"settled {took_s:.1f} s after the kill"
    assert len(_events(cluster, "worker_lost")) == 1
    assert _events(cluster, "worker_expired") == []
    assert [a for _, a in _starts(log)] == [cell["attempt_id"].replace(":a2", ":a1"), cell["attempt_id"]]


def test_a_silent_worker_is_not_a_stream_end(cluster: Cluster, tmp_path: Path) -> None:
    run_id, log = _one_hanging_group(cluster, tmp_path)
    w1 = cluster.workers["w1"]
    os.kill(w1.pid, signal.SIGSTOP)  # silent, its stream still open
    try:
        time.sleep(4 * GRACE_MS / 1000)
        assert _events(cluster, "worker_lost") == [], "silence is not a stream end"
    finally:
        os.kill(w1.pid, signal.SIGCONT)
    results = cluster.wait_settled(run_id, 25)
    [cell] = results["cells"]
    assert cell["worker_id"] == "w1" and cell["attempt_id"].endswith(":a1"), cell
    assert len(_starts(log)) == 1, "nothing ran twice"
