"""The snapshot process: the state at one log index, folded from the store by a process of its
own, encoded, and written to its fd 3 as it is pickled for the coordinator to store in parts.

    python -m coordinator.snapshotter DATA_DIR INDEX PARENT_PID

The actor spawns it (posix_spawn) instead of forking itself. A fork copies the coordinator's
page tables while the actor holds the GIL (54 ms at a million cells), and while the child
lives every page that either process writes is copied at its first write: about 4.2 us a
fault on the 2-core VM of docs/benchmarks.md, and the parent writes to most of its heap within
a second (every object it touches has its refcount written). At 10,000 sessions that second
held slot refill at p99 100-170 ms. This process shares no memory with the coordinator: it
opens its own read-only view of the store, folds the newest snapshot at or below INDEX and
the records after it exactly as recovery does, so what it encodes is the log's fold to INDEX,
and exits. It runs at a lower priority (SNAPSHOT_CHILD_NICE) and dies with its parent.
Exit status: 0 when every byte was written, 2 when the store cannot give the state at INDEX.
"""
from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from common.limits import SNAPSHOT_CHILD_NICE, SNAPSHOT_CHILD_OOM_SCORE_ADJ, SNAPSHOT_PART_BYTES

OUT_FD = 3  # the pipe to the coordinator, placed here by the spawn's file actions
FOLD_ATTEMPTS = 3


def _libc_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PR_SET_PDEATHSIG = 1


def prepare(parent: int) -> None:
    """Be killed with the coordinator (an orphan would hold a reader slot of the store and a
    core for as long as its encode took: 24 s at a million cells); yield the cores to it; be
    the OOM killer's first choice (this process holds a second copy of the state: under a 2 GB
    limit at a million cells the kernel otherwise took the coordinator, the larger of the two,
    and a restarted coordinator snapshots again); and run without the cyclic collector (the
    process builds one state and exits)."""
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)
    try:
        os.nice(SNAPSHOT_CHILD_NICE)
    except OSError as e:  # setpriority filtered out (the shipped unit's SystemCallFilter=~@resources)
        print(f"fleet snapshotter: runs at the coordinator's priority ({e})", file=sys.stderr, flush=True)
    try:
        Path("/proc/self/oom_score_adj").write_text(f"{SNAPSHOT_CHILD_OOM_SCORE_ADJ}\n")
    except OSError as e:  # not Linux, or /proc read-only: the kernel chooses by size alone
        print(f"fleet snapshotter: not marked first for the OOM killer ({e})", file=sys.stderr, flush=True)
    gc.disable()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m coordinator.snapshotter DATA_DIR INDEX PARENT_PID", file=sys.stderr)
        return 2
    data_dir, index, parent = Path(args[0]), int(args[1]), int(args[2])
    prepare(parent)
    # Imported after prepare: the coordinator's modules are a second of work at this priority.
    from coordinator.errors import StoreIOError
    from coordinator.recovery import fold_to
    from coordinator.snapshot import write_state
    from coordinator.store import Store

    for attempt in range(FOLD_ATTEMPTS):
        try:
            with Store.open_reader(data_dir) as store:
                state, at = fold_to(store, index)
            break
        except StoreIOError:
            # The coordinator grows the map now and then; a reader that began before sees
            # MDB_MAP_RESIZED and reads again from a fresh view.
            if attempt + 1 == FOLD_ATTEMPTS:
                raise
    if at != index:
        print(f"fleet snapshotter: the store holds records to {at}, not to {index}", file=sys.stderr)
        return 2
    with os.fdopen(OUT_FD, "wb", buffering=SNAPSHOT_PART_BYTES) as out:
        write_state(out, state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
