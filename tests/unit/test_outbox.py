"""Goal: the worker state directory keeps every promise of worker/outbox.py; method: drive a
real WorkerState over real LMDB and files in a temp dir, reopen it to check durability, and
inject failures (a second process, a full map, a failing fsync, leftover files) by hand."""
from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import worker.outbox as outbox_mod
from common.ids import AssignmentId, AttemptId, WorkerId
from worker.outbox import (
    ArtifactTooLarge,
    AssignmentConflict,
    Keeping,
    OutboxConflict,
    OutboxFull,
    OutboxStorageError,
    StateDirLocked,
    WorkerIdMismatch,
    WorkerState,
)

NOTHING_KEPT = Keeping(0, 0, 0)
REPO = Path(__file__).resolve().parents[2]
A1, A2, A3 = AttemptId("run-x:t/r0/s:a1"), AttemptId("run-x:t/r0/s:a2"), AttemptId("run-x:t/r1/s:a1")
G1 = AssignmentId("run-x:t/r0:g1")


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def state(state_dir: Path):
    s = WorkerState.open(state_dir, keeping=NOTHING_KEPT)  # an ack removes (test_outbox_kept.py keeps)
    yield s
    s.close()


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / "src" / name
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(data)
    return p


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def stored_files(state_dir: Path) -> list[Path]:
    return sorted(p for p in (state_dir / "artifacts").rglob("*") if p.is_file())


def test_roundtrip_survives_reopen(state_dir: Path, tmp_path: Path) -> None:
    log = write(tmp_path, "log.txt", b"hello log")
    big = write(tmp_path, "big.bin", os.urandom(3 * (1 << 20) + 7))  # several copy chunks
    with WorkerState.open(state_dir) as s:
        e = s.put_report(A1, G1, b"\x00report\xff", [("log", log), ("big", big)])
        assert e.payload == b"\x00report\xff" and e.attempt_id == A1 and e.assignment_id == G1
        assert [(a.name, a.digest, a.size_bytes) for a in e.artifacts] == [
            ("log", sha(b"hello log"), 9), ("big", sha(big.read_bytes()), big.stat().st_size)]
        assert s.get(A1) == e and s.pending() == [e] and s.depth == 1
    log.unlink()  # the outbox holds its own copy
    with WorkerState.open(state_dir) as s:
        (e2,) = s.pending()
        assert e2 == e
        assert s.artifact_path(e2.artifacts[0].digest).read_bytes() == b"hello log"
        assert s.artifact_path(e2.artifacts[1].digest).read_bytes() == big.read_bytes()
        assert s.check(rehash=True) == []
        assert list((state_dir / "artifacts" / "tmp").iterdir()) == []


def test_pending_is_in_put_order_and_seqs_are_never_reused(state: WorkerState) -> None:
    ids = [AttemptId(f"run-x:t{i}/r0/s:a1") for i in range(6)]
    for i, a in enumerate(ids):
        state.put_report(a, G1, f"r{i}".encode(), [])
    assert [e.attempt_id for e in state.pending()] == ids
    state.ack(ids[2])
    state.ack(ids[5])
    assert [e.attempt_id for e in state.pending()] == ids[:2] + ids[3:5]
    late = state.put_report(AttemptId("run-x:late:a1"), G1, b"late", [])
    assert late.seq == 7 and state.pending()[-1] == late


def test_pending_pages_by_seq(state: WorkerState) -> None:
    ids = [AttemptId(f"run-x:t{i}/r0/s:a1") for i in range(5)]
    for a in ids:
        state.put_report(a, G1, b"r", [])
    state.ack(ids[1])
    first = state.pending(limit=2)
    assert [e.attempt_id for e in first] == [ids[0], ids[2]]
    rest = state.pending(after_seq=first[-1].seq)
    assert [e.attempt_id for e in rest] == ids[3:]
    assert state.pending(after_seq=rest[-1].seq) == []


def test_concurrent_puts_and_acks_keep_shared_files(state: WorkerState, tmp_path: Path) -> None:
    """Threads sharing digests: an ack's collection must never remove a file a put in
    another thread is about to reference."""
    import threading

    blobs = [write(tmp_path, f"blob{i}", f"shared {i}".encode()) for i in range(3)]
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(60):
                a = AttemptId(f"run-x:t{t}-{i}/r0/s:a1")
                e = state.put_report(a, G1, b"r", [("log", blobs[i % 3])])
                # Acking everything drives each digest's count through zero again and again.
                path = state.artifact_path(e.artifacts[0].digest)
                assert path.read_bytes() == blobs[i % 3].read_bytes(), f"{path} lost after put"
                if i % 10:
                    state.ack(a)
        except BaseException as exc:  # surfaced below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert state.depth == 4 * 6 and state.check(rehash=True) == []


def test_same_attempt_same_content_is_a_noop(state: WorkerState, tmp_path: Path) -> None:
    f = write(tmp_path, "a", b"artifact")
    first = state.put_report(A1, G1, b"r", [("log", f)])
    again = state.put_report(A1, G1, b"r", [("log", write(tmp_path, "copy", b"artifact"))])
    assert again == first and state.depth == 1


@pytest.mark.parametrize("change", ["payload", "assignment", "file content", "file name", "no files"])
def test_same_attempt_different_content_conflicts(state: WorkerState, state_dir: Path,
                                                  tmp_path: Path, change: str) -> None:
    f = write(tmp_path, "a", b"artifact")
    first = state.put_report(A1, G1, b"r", [("log", f)])
    args = {"payload": b"r", "assignment_id": G1, "files": [("log", f)]}
    if change == "payload":
        args["payload"] = b"other"
    elif change == "assignment":
        args["assignment_id"] = AssignmentId("run-x:t/r0:g2")
    elif change == "file content":
        args["files"] = [("log", write(tmp_path, "b", b"different"))]
    elif change == "file name":
        args["files"] = [("stdout", f)]
    else:
        args["files"] = []
    before = stored_files(state_dir)
    with pytest.raises(OutboxConflict, match="different content"):
        state.put_report(A1, **args)
    assert state.pending() == [first]
    assert stored_files(state_dir) == before  # the conflicting copy was not kept
    assert state.check(rehash=True) == []


def test_ack_collects_files_shared_digests_survive_until_last_ack(state: WorkerState,
                                                                 tmp_path: Path) -> None:
    shared = write(tmp_path, "shared", b"same bytes")
    own = write(tmp_path, "own", b"only one")
    e1 = state.put_report(A1, G1, b"1", [("log", shared), ("extra", own)])
    e2 = state.put_report(A2, G1, b"2", [("log", write(tmp_path, "shared2", b"same bytes"))])
    shared_path = state.artifact_path(e1.artifacts[0].digest)
    own_path = state.artifact_path(e1.artifacts[1].digest)
    assert e2.artifacts[0].digest == e1.artifacts[0].digest

    assert state.ack(A1) is True
    assert state.get(A1) is None and state.pending() == [e2]
    assert shared_path.exists() and not own_path.exists()
    assert state.check(rehash=True) == []

    assert state.ack(A1) is False  # a repeated acknowledgement is harmless
    assert state.ack(A2) is True
    assert not shared_path.exists() and state.depth == 0
    assert state.check() == []


def test_same_digest_twice_in_one_report(state: WorkerState, tmp_path: Path) -> None:
    f = write(tmp_path, "a", b"twice")
    e = state.put_report(A1, G1, b"r", [("one", f), ("two", f)])
    assert state.check(rehash=True) == []
    state.ack(A1)
    assert not state.artifact_path(e.artifacts[0].digest).exists()
    assert state.check() == []


def test_dead_letters_are_kept_aside_with_reason_and_files(state_dir: Path, tmp_path: Path) -> None:
    f = write(tmp_path, "a", b"evidence")
    with WorkerState.open(state_dir) as s:
        e1 = s.put_report(A1, G1, b"1", [("log", f)])
        e2 = s.put_report(A2, G1, b"2", [])
        assert s.dead_letter(A1, "coordinator: INVALID_EVIDENCE", now_ms=1234) is True
        assert s.dead_letter(A1, "again") is False
        assert s.pending() == [e2] and s.get(A1) is None and s.ack(A1) is False
        # The identical report put again stays dead; different content still conflicts.
        assert s.put_report(A1, G1, b"1", [("log", f)]) == e1 and s.depth == 1
        with pytest.raises(OutboxConflict):
            s.put_report(A1, G1, b"changed", [])
    with WorkerState.open(state_dir) as s:
        (d,) = s.dead_letters()
        assert (d.entry, d.reason, d.dead_at_ms) == (e1, "coordinator: INVALID_EVIDENCE", 1234)
        assert s.artifact_path(e1.artifacts[0].digest).read_bytes() == b"evidence"
        assert s.check(rehash=True) == []


def test_oldest_dead_letters_are_dropped_past_the_bound(state: WorkerState, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox_mod, "DEAD_LETTERS_MAX", 2)
    ids = [AttemptId(f"run-x:t{i}/r0/s:a1") for i in range(3)]
    entries = [state.put_report(a, G1, b"r", [("log", write(tmp_path, str(i), str(i).encode()))])
               for i, a in enumerate(ids)]
    for a in ids:
        state.dead_letter(a, "rejected")
    assert [d.entry.attempt_id for d in state.dead_letters()] == ids[1:]
    assert not state.artifact_path(entries[0].artifacts[0].digest).exists()
    assert state.check() == []


def test_incarnation_counts_every_open(state_dir: Path) -> None:
    for expected in (1, 2, 3):
        with WorkerState.open(state_dir) as s:
            assert s.incarnation == expected


def test_worker_id_is_bound_once(state_dir: Path) -> None:
    with WorkerState.open(state_dir) as s:
        assert s.worker_id is None
        s.bind_worker_id(WorkerId("vm-17"))
        s.bind_worker_id(WorkerId("vm-17"))
        with pytest.raises(WorkerIdMismatch, match="vm-17"):
            s.bind_worker_id(WorkerId("vm-18"))
    with WorkerState.open(state_dir, worker_id=WorkerId("vm-17")) as s:
        assert s.worker_id == "vm-17"
    with pytest.raises(WorkerIdMismatch, match="belongs to worker id 'vm-17', not 'vm-18'"):
        WorkerState.open(state_dir, worker_id=WorkerId("vm-18"))
    with WorkerState.open(state_dir) as s:  # a refused open released the lock
        assert s.worker_id == "vm-17"


HOLDER = """
import sys
from pathlib import Path
from worker.outbox import WorkerState
s = WorkerState.open(Path(sys.argv[1]))
print("ready", flush=True)
sys.stdin.read()
"""


def test_second_process_is_refused_with_the_owner_pid(state_dir: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(state_dir)], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        with pytest.raises(StateDirLocked, match=f"in use by pid {child.pid}") as info:
            WorkerState.open(state_dir)
        assert info.value.pid == child.pid
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with WorkerState.open(state_dir) as s:  # the kernel released the dead owner's lock
        assert s.incarnation == 2
        assert (state_dir / "LOCK").read_text().strip() == str(os.getpid())


def test_second_open_in_one_process_is_refused(state: WorkerState, state_dir: Path) -> None:
    with pytest.raises(StateDirLocked, match=f"pid {os.getpid()}"):
        WorkerState.open(state_dir)


def test_credential_is_private_and_atomic(state: WorkerState, state_dir: Path) -> None:
    assert state.load_credential() is None
    state.save_credential("tok-1")
    state.save_credential("tok-2-secret")
    path = state_dir / "credential"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert state.load_credential() == "tok-2-secret"
    assert [p.name for p in state_dir.iterdir() if p.name.startswith(".credential")] == []
    assert "tok-2" not in repr(state)


def test_torn_temp_files_and_unreferenced_artifacts_are_swept_on_open(state_dir: Path,
                                                                     tmp_path: Path) -> None:
    with WorkerState.open(state_dir, keeping=NOTHING_KEPT) as s:
        kept = s.put_report(A1, G1, b"r", [("log", write(tmp_path, "a", b"kept"))])
        gone = s.put_report(A2, G1, b"r", [("log", write(tmp_path, "b", b"gone"))])
        gone_path = s.artifact_path(gone.artifacts[0].digest)
        gone_bytes = gone_path.read_bytes()
        s.ack(A2)
    # What a crash leaves: a half-written copy, a file placed whose entry never committed
    # (or whose ack committed before the delete), a credential temporary.
    torn = state_dir / "artifacts" / "tmp" / "tmpabc.part"
    torn.write_bytes(b"half a fi")
    gone_path.parent.mkdir(parents=True, exist_ok=True)
    gone_path.write_bytes(gone_bytes)
    cred_tmp = state_dir / ".credential.x1.tmp"
    cred_tmp.write_text("partial")
    with WorkerState.open(state_dir, keeping=NOTHING_KEPT) as s:
        assert not torn.exists() and not gone_path.exists() and not cred_tmp.exists()
        assert s.pending() == [kept] and s.check(rehash=True) == []


def test_full_outbox_refuses_and_writes_nothing(state_dir: Path, tmp_path: Path) -> None:
    with WorkerState.open(state_dir, entries_max=2) as s:
        s.put_report(A1, G1, b"1", [])
        s.put_report(A2, G1, b"2", [])
        before = stored_files(state_dir)
        with pytest.raises(OutboxFull, match="OUTBOX_ENTRIES_MAX"):
            s.put_report(A3, G1, b"3", [("log", write(tmp_path, "a", b"x"))])
        assert s.depth == 2 and stored_files(state_dir) == before
        assert s.put_report(A1, G1, b"1", []).seq == 1  # a replayed put is still a no-op
        s.ack(A1)
        s.put_report(A3, G1, b"3", [])
        assert [e.attempt_id for e in s.pending()] == [A2, A3]


def test_map_full_is_a_storage_error_and_leaves_nothing(state_dir: Path, tmp_path: Path) -> None:
    with WorkerState.open(state_dir, map_bytes=1 << 20) as s:
        s.put_report(A1, G1, b"small", [])
        with pytest.raises(OutboxStorageError, match=r"state database map is full") as info:
            s.put_report(A2, G1, os.urandom(2 << 20), [("log", write(tmp_path, "a", b"x"))])
        assert str(state_dir / "db") in str(info.value)
        assert [e.attempt_id for e in s.pending()] == [A1]
        assert stored_files(state_dir) == [] and s.check() == []
        s.put_report(A3, G1, b"small", [])  # the environment is still usable
        assert s.depth == 2


def test_disk_full_while_storing_an_artifact(state: WorkerState, state_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outbox_mod.os, "fsync", no_space)
    with pytest.raises(OutboxStorageError, match=r"artifacts/sha256/.*disk is full"):
        state.put_report(A1, G1, b"r", [("log", write(tmp_path, "a", b"x"))])
    monkeypatch.undo()
    assert state.depth == 0 and stored_files(state_dir) == []


def test_input_errors_write_nothing(state: WorkerState, state_dir: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ok = write(tmp_path, "ok", b"fine")
    with pytest.raises(FileNotFoundError):
        state.put_report(A1, G1, b"r", [("ok", ok), ("missing", tmp_path / "nope")])
    with pytest.raises(ValueError, match="distinct"):
        state.put_report(A1, G1, b"r", [("log", ok), ("log", ok)])
    monkeypatch.setattr(outbox_mod, "ARTIFACT_BYTES_MAX", 3)
    with pytest.raises(ArtifactTooLarge, match="'ok'"):
        state.put_report(A1, G1, b"r", [("ok", ok)])
    assert state.depth == 0 and stored_files(state_dir) == []


def test_assignments_are_durable_ordered_and_finished_ids_remembered(state_dir: Path) -> None:
    g = [AssignmentId(f"run-x:t{i}/r0:g1") for i in range(4)]
    with WorkerState.open(state_dir) as s:
        assert s.record_assignment(g[2], b"two") is True
        assert s.record_assignment(g[0], b"zero") is True
        assert s.record_assignment(g[1], b"one") is True
        assert s.record_assignment(g[0], b"zero") is False  # a duplicate push
        with pytest.raises(AssignmentConflict):
            s.record_assignment(g[0], b"changed")
    with WorkerState.open(state_dir) as s:
        assert s.assignments() == [(g[2], b"two"), (g[0], b"zero"), (g[1], b"one")]
        s.finish_assignment(g[0])
        s.drop_assignment(g[1])
        s.drop_assignment(g[3])  # unknown: nothing to do
        assert s.assignments() == [(g[2], b"two")]
        assert s.was_finished(g[0]) and not s.was_finished(g[1]) and not s.was_finished(g[2])
        assert s.record_assignment(g[0], b"zero") is False  # an old assignment pushed again
        assert s.record_assignment(g[1], b"one") is True  # dropped, not finished
    with WorkerState.open(state_dir) as s:
        assert s.was_finished(g[0]) and s.assignments() == [(g[2], b"two"), (g[1], b"one")]


def test_finished_ids_are_bounded(state: WorkerState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox_mod, "FINISHED_ASSIGNMENTS_KEPT_MAX", 3)
    g = [AssignmentId(f"run-x:t{i}/r0:g1") for i in range(5)]
    for a in g:
        state.record_assignment(a, b"p")
        state.finish_assignment(a)
    state.finish_assignment(g[4])  # idempotent
    assert [state.was_finished(a) for a in g] == [False, False, True, True, True]
    assert state.assignments() == []


def test_long_ids_fit(state: WorkerState) -> None:
    long_attempt = AttemptId("run-x:" + "t" * 600 + "/r0/" + "s" * 600 + ":a1")
    e = state.put_report(long_attempt, AssignmentId("g" * 900), b"r", [])
    assert state.get(long_attempt) == e
    assert state.record_assignment(AssignmentId("g" * 900), b"p") is True


# ---- group commit -------------------------------------------------------------------------


def test_group_commit_puts_and_acks_many_operations_in_few_transactions(state: WorkerState, state_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrent async operations share transactions; each returns only after its commit,
    and what they wrote survives a reopen exactly as the synchronous methods' writes do."""
    import asyncio

    commits = []
    real = WorkerState._commit_group

    def counting(self: WorkerState, ops: list) -> list:
        commits.append(len(ops))
        return real(self, ops)

    monkeypatch.setattr(WorkerState, "_commit_group", counting)
    ids = [AttemptId(f"run-x:t{i}/r0/s:a1") for i in range(60)]

    async def main() -> None:
        fresh = await asyncio.gather(*(state.record_assignment_async(AssignmentId(f"g{i}"), b"push")
                                       for i in range(20)))
        assert all(fresh)
        assert not await state.record_assignment_async(AssignmentId("g0"), b"push")  # a repeat
        entries = await asyncio.gather(*(state.put_report_async(a, G1, a.encode(), []) for a in ids))
        assert [e.attempt_id for e in entries] == ids
        assert state.depth == len(ids)  # durable before the coroutines resumed
        acked = await asyncio.gather(*(state.ack_async(a) for a in ids[:30]))
        assert all(acked) and not await state.ack_async(ids[0])
        await asyncio.gather(*(state.finish_assignment_async(AssignmentId(f"g{i}")) for i in range(20)))

    asyncio.run(main())
    assert sum(commits) == 20 + 1 + 60 + 30 + 1 + 20
    assert len(commits) < 20, f"expected batches, got {commits}"
    state.close()
    reopened = WorkerState.open(state_dir)
    try:
        assert [e.attempt_id for e in reopened.pending()] == ids[30:]
        assert reopened.assignments() == [] and reopened.was_finished(AssignmentId("g7"))
        assert reopened.check() == []
    finally:
        reopened.close()


def test_an_urgent_operation_ends_the_group_commit_window_and_shares_its_commit(state: WorkerState,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A report that can wait is held for the window (here a minute, so that holding is
    seen); the group's last report, urgent, ends the window at once and both share one
    commit; an assignment's record is urgent on its own (its cells start after it)."""
    import asyncio

    commits: list[int] = []
    real = WorkerState._commit_group

    def counting(self: WorkerState, ops: list) -> list:
        commits.append(len(ops))
        return real(self, ops)

    monkeypatch.setattr(WorkerState, "_commit_group", counting)
    monkeypatch.setattr(outbox_mod, "OUTBOX_GROUP_COMMIT_WAIT_MS", 60_000)
    a1, a2 = AttemptId("run-x:t0/r0/s0:a1"), AttemptId("run-x:t0/r0/s1:a1")

    async def main() -> None:
        first = asyncio.ensure_future(state.put_report_async(a1, G1, b"one", []))
        done, _ = await asyncio.wait([first], timeout=0.3)
        assert not done and commits == [], "a report that can wait is held for the window"
        last = await asyncio.wait_for(state.put_report_async(a2, G1, b"two", [], urgent=True), 20)
        assert (await first).attempt_id == a1 and last.attempt_id == a2
        assert commits == [2]
        assert await asyncio.wait_for(state.record_assignment_async(AssignmentId("g9"), b"push"), 20)
        assert commits == [2, 1]

    asyncio.run(main())
    assert [e.attempt_id for e in state.pending()] == [a1, a2]


def test_queued_operations_are_queued_at_the_call_in_call_order_and_need_no_task(state: WorkerState,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """ack_queued and finish_assignment_queued hand their operation to the writer when called
    (a plain future, no task to start later), so an ack queued before a finish commits first."""
    import asyncio

    order: list[str] = []
    real_ack, real_finish = WorkerState._ack, WorkerState._finish_assignment
    monkeypatch.setattr(WorkerState, "_ack", lambda self, txn, a: (order.append(f"ack {a}"), real_ack(self, txn, a))[1])
    monkeypatch.setattr(WorkerState, "_finish_assignment",
                        lambda self, txn, g: (order.append(f"finish {g}"), real_finish(self, txn, g))[1])
    state.record_assignment(G1, b"push")
    state.put_report(A1, G1, b"one", [])
    state.put_report(A2, G1, b"two", [])

    async def main() -> tuple:
        first = state.ack_queued(A1)
        finish = state.finish_assignment_queued(G1)
        second = state.ack_queued(A2)  # after the finish: still committed, in its place
        assert not isinstance(first, asyncio.Task) and isinstance(first, asyncio.Future)
        return await first, await finish, await second

    assert asyncio.run(main()) == (True, None, True)
    assert order == [f"ack {A1}", f"finish {G1}", f"ack {A2}"]
    assert state.depth == 0 and state.was_finished(G1) and state.assignments() == []


def test_group_commit_a_conflict_fails_only_its_own_operation(state: WorkerState) -> None:
    """A refused operation in a batch aborts its nested transaction only; the others commit."""
    import asyncio

    state.put_report(A1, G1, b"first", [])

    async def main() -> list:
        return await asyncio.gather(state.put_report_async(A2, G1, b"two", []),
                                    state.put_report_async(A1, G1, b"other content", []),
                                    state.put_report_async(A3, G1, b"three", []),
                                    state.record_assignment_async(AssignmentId(""), b"x"),
                                    return_exceptions=True)

    two, conflict, three, bad_id = asyncio.run(main())
    assert isinstance(conflict, OutboxConflict) and isinstance(bad_id, ValueError)
    assert [e.attempt_id for e in state.pending()] == [A1, A2, A3]
    assert two.attempt_id == A2 and three.attempt_id == A3
    assert state.get(A1).payload == b"first"


def test_group_commit_a_storage_error_fails_the_whole_batch(tmp_path: Path) -> None:
    """A full map aborts the batch's one transaction: every operation in it fails with a
    storage error and none of them is visible afterwards."""
    import asyncio

    s = WorkerState.open(tmp_path / "small", map_bytes=256 << 10)
    try:
        big = b"x" * (48 << 10)

        async def main() -> list:
            return await asyncio.gather(*(s.put_report_async(AttemptId(f"r:t{i}/r0/s:a"), G1, big, [])
                                          for i in range(12)), return_exceptions=True)

        results = asyncio.run(main())
        failed = [r for r in results if isinstance(r, OutboxStorageError)]
        assert failed, results
        assert s.depth == len(results) - len(failed)
        assert s.check() == []
    finally:
        s.close()
