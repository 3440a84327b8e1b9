"""A coordinator killed with -9 while its snapshot process encodes takes the process with it:
an orphan would hold a reader slot of the store and a core for as long as its encode took
(24 s at a million cells). Method: a real process runs a Store and an Actor whose snapshot
process sleeps a minute first, commits past the snapshot interval, reports the snapshot
process's pid; the test kills the parent -9 and checks that the child is gone and the data dir
opens again at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from coordinator.errors import StoreLocked
from coordinator.store import Store
from tests.integration.harness import REPO

SCRIPT = r"""
import os, sys, threading, time
from pathlib import Path
import coordinator.actor as actor_mod
from coordinator.actor import Actor, Request
from coordinator.core import commands as c, new_state
from coordinator.store import Store
from common.ids import WorkerId

actor_mod.SNAPSHOTTER_MODULE = "tests.integration.snapshotter_slow"  # sleeps a minute first
store = Store.open(Path(sys.argv[1]), snapshot_every=5)
done = threading.Semaphore(0)
actor = Actor(store, new_state(), 0, deliver=lambda b: [f(v) for f, v in b.completions], tick_ms=0)
actor.start()
for i in range(8):
    actor.submit(Request(make=lambda now, i=i: c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 1, "env"),
                         done=lambda t: done.release()))
    done.acquire()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    found = [p for t in Path(f"/proc/{os.getpid()}/task").iterdir()
             for p in (t / "children").read_text().split()]
    if found:
        print("child", found[0], flush=True)
        break
    time.sleep(0.01)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_snapshot_child_dies_with_its_killed_coordinator(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line.startswith("child "), (line, proc.stderr.read() if proc.poll() is not None else "")
        child = int(line.split()[1])
        assert alive(child)
        try:
            Store.open(tmp_path).close()
            raise AssertionError("the data dir opened while its coordinator lives")
        except StoreLocked:
            pass  # locked, as it must be
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while alive(child):
            assert time.monotonic() < deadline, "the snapshot child outlived its killed parent"
            time.sleep(0.02)
        Store.open(tmp_path).close()  # the lock went with them
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
