"""Storage errors of the coordinator (kind 3: the environment's fault) and their fail-stop exit.

Every failure of the write-ahead store or the artifact store is a `StorageError` that names
what failed, the path it failed on and what an operator should do. The daemon does not
carry on after one: it calls `fail_stop`, which prints one line to stderr and exits with the
code from `EXIT_CODES` (sysexits.h numbers, so systemd and shell scripts can tell a corrupt
store from a full disk). Restarting recovers from what is on disk.
"""
from __future__ import annotations

import errno as errno_mod
import os
import sys
from pathlib import Path
from typing import NoReturn


class StorageError(Exception):
    """Base of every storage failure: `what` failed on `path`; `advice` says what to do."""

    advice_default = "check the data directory and restart the coordinator"

    def __init__(self, what: str, path: Path | str, *, advice: str | None = None) -> None:
        self.what = what
        self.path = Path(path)
        self.advice = advice if advice is not None else self.advice_default
        super().__init__(f"{what}: {self.path}")


class StoreLocked(StorageError):
    """Another live process holds the data directory's kernel lock."""

    def __init__(self, path: Path | str, pid: int | None) -> None:
        self.pid = pid
        owner = f"pid {pid}" if pid is not None else "a process whose pid is not yet written"
        super().__init__(
            f"data directory is locked by {owner}",
            path,
            advice=(f"stop the running coordinator ({owner}) or use another --data-dir; "
                    "a crashed owner's lock is released by the kernel, never delete the file"),
        )


class StoreCorrupt(StorageError):
    """Bytes on disk fail verification; `index` is the log position (or snapshot index)."""

    advice_default = ("the coordinator will not start on state it cannot verify: restore the "
                      "data directory from a backup, or move it aside and resubmit the run")

    def __init__(self, what: str, path: Path | str, *, index: int | None = None) -> None:
        self.index = index
        super().__init__(what, path)


class StoreFull(StorageError):
    """The LMDB map reached its ceiling; the write was not applied."""


class StoreIOError(StorageError):
    """The operating system refused an I/O (disk full, I/O error); the write was not applied."""

    def __init__(self, what: str, path: Path | str, *, errno: int | None = None) -> None:
        self.errno = errno
        # A write error on a file system with no room left is a full disk, whatever errno LMDB
        # passed on (EIO as often as ENOSPC): say so, rather than send the operator after a
        # hardware fault that is not there.
        self.disk_full = errno == errno_mod.ENOSPC or (errno in (errno_mod.EIO, None) and disk_nearly_full(path))
        if self.disk_full:
            advice = ("the disk is full: free space on the data directory's filesystem; the "
                      "coordinator serves reads meanwhile and writes again once there is room")
        else:
            advice = "check the disk (dmesg, SMART) and restart the coordinator"
        super().__init__(what, path, advice=advice)


DISK_FULL_FREE_BYTES = 1 << 20  # less free than this on the data dir's file system: it is full
DISK_ROOM_BYTES = 8 << 20  # free again: the coordinator writes again (above, so that it does not flap)


def disk_nearly_full(path: Path | str, free_below: int = DISK_FULL_FREE_BYTES) -> bool:
    """Whether the file system holding `path` (or its nearest existing parent) has less than
    `free_below` bytes free for unprivileged writers."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < free_below


class ArtifactCorrupt(StorageError):
    """A stored artifact's bytes no longer hash to its digest."""

    advice_default = ("the artifact file was altered on disk: restore it from a backup or "
                      "treat the artifact as unavailable")

    def __init__(self, what: str, path: Path | str, *, digest: str) -> None:
        self.digest = digest
        super().__init__(what, path)


# The one table from environment failure to exit code (sysexits.h). Most specific first.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (StoreLocked, 75),  # EX_TEMPFAIL: another coordinator runs; trying later may succeed
    (StoreCorrupt, 70),  # EX_SOFTWARE
    (ArtifactCorrupt, 70),  # EX_SOFTWARE
    (StoreFull, 73),  # EX_CANTCREAT
    (StoreIOError, 74),  # EX_IOERR
    (OSError, 74),  # EX_IOERR: an OS error that escaped wrapping is still an I/O failure
)
EXIT_CODE_OTHER = 70  # EX_SOFTWARE


def exit_code_for(err: BaseException) -> int:
    for kind, code in EXIT_CODES:
        if isinstance(err, kind):
            return code
    return EXIT_CODE_OTHER


def fail_stop_line(err: BaseException) -> str:
    if isinstance(err, StorageError):
        return f"fleet-coordinator: fail-stop: {err.what}: {err.path}: {err.advice}"
    return f"fleet-coordinator: fail-stop: {type(err).__name__}: {err}"


def fail_stop(err: BaseException) -> NoReturn:
    """Print one line and end the process now, from any thread.

    `os._exit`, not `sys.exit`: SystemExit raised on the actor thread would end only that
    thread, and no cleanup may run on state that is not on disk. What was committed is.
    """
    try:
        sys.stdout.flush()
    finally:
        sys.stderr.write(fail_stop_line(err) + "\n")
        sys.stderr.flush()
        os._exit(exit_code_for(err))
