"""Goal: an idle protocol-4 session sends no heartbeat yet stays active, and a worker whose
process stops answering (SIGSTOP: its TCP stays open, its HTTP/2 pings go unanswered) is
suspected within the transport's detection time; method: a real coordinator with the default
liveness policy, a raw session client in a child process that registers with protocol 4 and
then only waits, and the coordinator's status read through the admin API."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from common import limits
from tests.integration.harness import Cluster

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import sys, time
    from tests.integration import rawclient as rc
    s = rc.RawSession(sys.argv[1], rc.worker_metadata(sys.argv[2], "idle-1"))
    welcome = s.open(rc.hello("idle-1", protocol_version=4))
    print(welcome.idle_heartbeat_interval_ms, flush=True)
    time.sleep(50)
""")


def worker_status(cl: Cluster, worker_id: str) -> str:
    return next((w["status"] for w in cl.status()["workers"] if w["worker_id"] == worker_id), "")


def test_an_idle_protocol_4_session_stays_active_and_a_stopped_one_is_suspected(tmp_path: Path) -> None:
    cl = Cluster(tmp_path)
    cl.start_coordinator()
    child = None
    try:
        token = (cl.data_dir / "enroll.token").read_text().strip()
        child = subprocess.Popen([sys.executable, "-c", CHILD, cl.address, token], cwd=REPO, stdout=subprocess.PIPE,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
        assert child.stdout is not None
        idle_ms = int(child.stdout.readline())
        assert idle_ms == limits.IDLE_HEARTBEAT_INTERVAL_MS, "the coordinator takes liveness from the transport"
        # Twice the default suspicion window without a single heartbeat: still active.
        time.sleep(2 * limits.SUSPECT_AFTER_MS_DEFAULT / 1000)
        assert worker_status(cl, "idle-1") == "active", cl.status()
        os.kill(child.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        while worker_status(cl, "idle-1") == "active":
            waited = time.monotonic() - stopped
            assert waited < (limits.TRANSPORT_DEAD_AFTER_MS + limits.SUSPECT_AFTER_MS_DEFAULT) / 1000 + 3, \
                f"still active {waited:.1f} s after its process stopped"
            time.sleep(0.1)
        suspected_after = time.monotonic() - stopped
        assert suspected_after >= 0.5, "suspected before its silence could have been noticed"
    finally:
        if child is not None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
        cl.stop_all()
