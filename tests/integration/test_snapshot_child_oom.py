"""On a host short of memory a snapshot process (it holds a second copy of the state) is not
started where it cannot fit, and where it is and the memory runs out, the kernel's OOM killer
takes it, never the coordinator (at a million cells under a 2 GB limit the kernel killed the
coordinator, the larger of the two, during every snapshot). Method: a real process runs a Store
and an Actor inside a memory cgroup of its own (root, cgroup v1) with a ballast larger than
what is left under the limit; its snapshot process is the real `prepare`, then memory until it
is killed. Judged by the coordinator (coordinator/headroom.py): no process is started, no OOM
kill, the snapshots are encoded on the actor thread. Judged by the kernel (the headroom blinded):
the process is started three times, each time OOM-killed, then the actor encodes. Either way the
coordinator must live, commit every command it was given and recover to it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.recovery import recover
from coordinator.store import Store
from tests.integration.harness import REPO
from tools.bench.harness import MemoryLimit, MemoryLimitUnavailable, child_env

LIMIT_MB = 320
BALLAST_MB = 200  # the parent's own; the child is killed near LIMIT_MB - BALLAST_MB - the interpreters
WORKERS = 24

SCRIPT = r"""
import sys, threading
from pathlib import Path
import coordinator.actor as actor_mod
from coordinator.actor import Actor, Request
from coordinator.core import commands as c, new_state
from coordinator.store import Store
from common.ids import WorkerId

ballast = b"\x01" * (int(sys.argv[2]) << 20)  # written, so resident
actor_mod.SNAPSHOTTER_MODULE = "tests.integration.snapshotter_hog"
if sys.argv[4] == "kernel":
    actor_mod.headroom.room_bytes = lambda: None  # unknown: the process is tried
store = Store.open(Path(sys.argv[1]), snapshot_every=4)
done = threading.Semaphore(0)
actor = Actor(store, new_state(), 0, deliver=lambda b: [f(v) for f, v in b.completions], tick_ms=0)
actor.start()
for i in range(int(sys.argv[3])):
    actor.submit(Request(make=lambda now, i=i: c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 1, "env"),
                         done=lambda t: done.release()))
    done.acquire()
    if i % 4 == 3:  # let the snapshot process of this commit be started and meet the limit; on
        import time  # a loaded host it may take longer to die (one kill of three, not three)
        time.sleep(1.0)
        for _ in range(300):
            if actor._snapshot_pending is None:
                break
            time.sleep(0.1)
actor.stop()
store.close()
print("committed", int(sys.argv[3]), flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("judge", ["coordinator", "kernel"])
def test_a_snapshot_process_short_of_memory_never_costs_the_coordinator(tmp_path: Path, judge: str) -> None:
    try:
        limit = MemoryLimit(LIMIT_MB)
    except MemoryLimitUnavailable as e:
        pytest.skip(f"needs a memory cgroup of its own (root, cgroup v1): {e}")
    try:
        done = subprocess.run(limit.wrap([sys.executable, "-c", SCRIPT, str(tmp_path / "data"), str(BALLAST_MB),
                                          str(WORKERS), judge]),
                              capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=100)
        kills = limit.oom_kills()
    finally:
        left = limit.close()
    assert left is None, left
    assert done.returncode == 0, (f"the coordinator died ({done.returncode}) with its snapshot process's memory",
                                  done.stdout[-3000:], done.stderr[-3000:])
    assert f"committed {WORKERS}" in done.stdout
    out = done.stdout[-3000:]
    if judge == "kernel":
        assert kills >= 3, (kills, out)  # the limit was met, each time
        assert done.stdout.count("snapshot_child_failed") == 3 and "OOM killer" in done.stdout, out
    else:
        assert kills == 0 and "snapshot_child_failed" not in done.stdout, (kills, out)
        assert done.stdout.count("snapshot_process_skipped") == 1, out  # once, not at every snapshot
    assert "in_child=False" in done.stdout and "in_child=True" not in done.stdout, out  # on the actor thread
    with Store.open(tmp_path / "data") as store:
        state, index = recover(store)
        assert store.snapshot_indexes and store.snapshot_indexes[-1] == index
    assert sorted(state.workers) == sorted(f"w{i}" for i in range(WORKERS))
