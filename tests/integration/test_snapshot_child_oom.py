"""On a host short of memory the kernel's OOM killer takes the snapshot process, never the
coordinator: the process holds a second copy of the state (at a million cells, under a 2 GB
limit, the kernel otherwise killed the coordinator, the larger of the two, during every
snapshot). Method: a real process runs a Store and an Actor inside a memory cgroup of its own
(root, cgroup v1) and holds a ballast larger than the snapshot process will have grown to when
the limit is reached; its snapshot process (the real `prepare`, then memory until it is
killed) is started three times, each time OOM-killed, after which the actor encodes its
snapshots itself. The coordinator must live through it, commit every command it was given and
stop cleanly with a snapshot."""
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
store = Store.open(Path(sys.argv[1]), snapshot_every=4)
done = threading.Semaphore(0)
actor = Actor(store, new_state(), 0, deliver=lambda b: [f(v) for f, v in b.completions], tick_ms=0)
actor.start()
for i in range(int(sys.argv[3])):
    actor.submit(Request(make=lambda now, i=i: c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 1, "env"),
                         done=lambda t: done.release()))
    done.acquire()
    if i % 4 == 3:  # let the snapshot process of this commit be started and meet the limit
        import time; time.sleep(1.0)
actor.stop()
store.close()
print("committed", int(sys.argv[3]), flush=True)
"""


@pytest.mark.timeout(120)
def test_the_oom_killer_takes_the_snapshot_process_not_the_coordinator(tmp_path: Path) -> None:
    try:
        limit = MemoryLimit(LIMIT_MB)
    except MemoryLimitUnavailable as e:
        pytest.skip(f"needs a memory cgroup of its own (root, cgroup v1): {e}")
    try:
        done = subprocess.run(limit.wrap([sys.executable, "-c", SCRIPT, str(tmp_path / "data"), str(BALLAST_MB),
                                          str(WORKERS)]),
                              capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=100)
        kills = limit.oom_kills()
    finally:
        left = limit.close()
    assert left is None, left
    assert done.returncode == 0, (f"the coordinator died ({done.returncode}) with its snapshot process's memory",
                                  done.stdout[-3000:], done.stderr[-3000:])
    assert kills >= 3, (kills, done.stdout[-3000:], done.stderr[-3000:])  # the limit was met, each time
    assert f"committed {WORKERS}" in done.stdout
    assert done.stdout.count("snapshot_child_failed") == 3 and "OOM killer" in done.stdout, done.stdout[-3000:]
    assert "in_child=False" in done.stdout, done.stdout[-3000:]  # then: snapshots on the actor thread
    with Store.open(tmp_path / "data") as store:
        state, index = recover(store)
        assert store.snapshot_indexes and store.snapshot_indexes[-1] == index
    assert sorted(state.workers) == sorted(f"w{i}" for i in range(WORKERS))
