"""A full disk makes the worker's outbox wait, not fail: a group commit that fails for want of
room changed nothing and is applied again once there is room, its callers resumed only after
that commit; an I/O error on a file system with no room is a full disk; and a worker stopping
meanwhile is not held up (its callers get the error)."""
from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

import pytest

from common.ids import AssignmentId, AttemptId
from worker import outbox
from worker.outbox import OutboxStorageError, WorkerState

A1, G1 = AttemptId("run-x:t/r0/s:a1"), AssignmentId("run-x:t/r0:g1")


def _failing_commits(state: WorkerState, times: int, monkeypatch) -> list[int]:
    real = WorkerState._commit_group
    calls = [0]

    def commit(self, ops):
        calls[0] += 1
        if calls[0] <= times:
            err = outbox._storage_error(self._db_path, "record a report", OSError(errno.ENOSPC, "No space left on device"))
            return [(False, err) for _ in ops]
        return real(self, ops)

    monkeypatch.setattr(WorkerState, "_commit_group", commit)
    monkeypatch.setattr(outbox, "DISK_FULL_RETRY_S", 0.01)
    return calls


def test_a_commit_that_failed_for_a_full_disk_is_applied_once_there_is_room(tmp_path: Path, monkeypatch) -> None:
    with WorkerState.open(tmp_path / "state") as s:
        calls = _failing_commits(s, 3, monkeypatch)
        seen: list[str] = []

        async def main():
            task = asyncio.ensure_future(s.put_report_async(A1, G1, b"r", []))
            while not s.disk_full:
                await asyncio.sleep(0.001)
            seen.append(s.disk_full)
            return await task

        entry = asyncio.run(main())
        assert calls[0] == 4 and s.pending() == [entry] and s.disk_full == ""
        assert "disk is full" in seen[0]


def test_a_stopping_worker_is_not_held_up_by_a_full_disk(tmp_path: Path, monkeypatch) -> None:
    s = WorkerState.open(tmp_path / "state")
    _failing_commits(s, 10 ** 9, monkeypatch)
    failed: list[BaseException] = []

    async def main():
        try:
            await s.put_report_async(A1, G1, b"r", [])
        except OutboxStorageError as e:
            failed.append(e)

    t = threading.Thread(target=lambda: asyncio.run(main()))
    t.start()
    while not s.disk_full:
        pass
    s.close()
    t.join(timeout=10)
    assert not t.is_alive() and failed and failed[0].disk_full


@pytest.mark.parametrize(("exc", "full"), [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (OSError(errno.EACCES, "Permission denied"), False),
])
def test_which_errors_are_a_full_disk(tmp_path: Path, exc: OSError, full: bool) -> None:
    assert outbox._storage_error(tmp_path, "write", exc).disk_full is full


def test_an_io_error_on_a_file_system_with_no_room_is_a_full_disk(tmp_path: Path, monkeypatch) -> None:
    eio = OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(outbox, "free_bytes", lambda path: 1000)
    assert outbox._storage_error(tmp_path, "write", eio).disk_full
    monkeypatch.setattr(outbox, "free_bytes", lambda path: 10 << 30)
    err = outbox._storage_error(tmp_path, "write", eio)
    assert not err.disk_full and "check the disk" in str(err)
