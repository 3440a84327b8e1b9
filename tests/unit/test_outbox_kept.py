"""What a worker keeps of its acknowledged reports, for a coordinator restored from a backup:
an ack moves the entry aside with its files instead of deleting it; the oldest kept entries go
past the age, byte and count bounds; a change of the coordinator's epoch puts every kept entry
back in the outbox, in its old place, marked as an offer; and all of it survives a restart."""
from __future__ import annotations

from pathlib import Path

from common.ids import AssignmentId, AttemptId
from worker.outbox import Keeping, WorkerState

G1 = AssignmentId("run-x:t/r0:g1")


def _attempt(i: int) -> AttemptId:
    return AttemptId(f"run-x:t{i}/r0/s:a1")


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / "src" / name
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(data)
    return p


def test_an_ack_keeps_the_entry_and_its_files_and_a_new_epoch_offers_them_again(tmp_path):
    sd = tmp_path / "state"
    with WorkerState.open(sd) as s:
        e1 = s.put_report(_attempt(1), G1, b"one", [("log", _file(tmp_path, "a", b"bytes of a"))])
        e2 = s.put_report(_attempt(2), G1, b"two", [])
        assert s.begin_epoch("") == 0  # the first coordinator, never restored
        assert s.ack(_attempt(1)) and s.ack(_attempt(2))
        assert s.depth == 0 and [e for e, _ in s.kept()] == [e1, e2]
        assert s.artifact_path(e1.artifacts[0].digest).exists()
        assert s.ack(_attempt(1)) is False  # kept is not pending
        assert s.check(rehash=True) == []
        e3 = s.put_report(_attempt(3), G1, b"three", [])
    with WorkerState.open(sd) as s:  # a restart changes nothing of it
        assert [e for e, _ in s.kept()] == [e1, e2] and s.pending() == [e3]
        assert s.begin_epoch("") == 0
        assert s.begin_epoch("ab12") == 2  # restored: both back, in their old places
        assert s.pending() == [e1, e2, e3] and s.kept() == []
        assert s.offer_below_seq == e3.seq + 1  # all three are offers now
        assert s.begin_epoch("ab12") == 0
        e4 = s.put_report(_attempt(4), G1, b"four", [])
        assert e4.seq >= s.offer_below_seq  # reported in the new epoch: no offer
        for a in (1, 2, 3, 4):
            assert s.ack(_attempt(a))
        assert s.check(rehash=True) == []
        assert len(s.kept()) == 4


def test_the_oldest_kept_entries_go_first_past_each_bound(tmp_path):
    with WorkerState.open(tmp_path / "count", keeping=Keeping(entries=2)) as s:
        for i in range(4):
            s.put_report(_attempt(i), G1, b"r", [])
            s.ack(_attempt(i))
        assert [e.attempt_id for e, _ in s.kept()] == [_attempt(2), _attempt(3)]
    with WorkerState.open(tmp_path / "bytes", keeping=Keeping(bytes=250)) as s:
        paths = []
        for i in range(3):
            e = s.put_report(_attempt(i), G1, b"r", [("log", _file(tmp_path, f"f{i}", bytes([i]) * 100))])
            paths.append(s.artifact_path(e.artifacts[0].digest))
            s.ack(_attempt(i))
        assert [e.attempt_id for e, _ in s.kept()] == [_attempt(1), _attempt(2)]
        assert not paths[0].exists() and paths[1].exists()  # its file went with it
        assert s.check(rehash=True) == []
    with WorkerState.open(tmp_path / "age", keeping=Keeping(ms=1)) as s:
        s.put_report(_attempt(0), G1, b"r", [])
        s.ack(_attempt(0))
        import time
        time.sleep(0.01)
        s.put_report(_attempt(1), G1, b"r", [])
        s.ack(_attempt(1))
        assert [e.attempt_id for e, _ in s.kept()] == [_attempt(1)]


def test_nothing_kept_removes_at_ack_and_a_kept_attempt_put_again_is_reported_again(tmp_path):
    with WorkerState.open(tmp_path / "none", keeping=Keeping(0, 0, 0)) as s:
        s.put_report(_attempt(0), G1, b"r", [])
        s.ack(_attempt(0))
        assert s.kept() == [] and s.begin_epoch("e1") == 0
    with WorkerState.open(tmp_path / "again") as s:
        s.put_report(_attempt(0), G1, b"r", [])
        s.ack(_attempt(0))
        again = s.put_report(_attempt(0), G1, b"r", [])
        assert s.pending() == [again] and s.kept() == []
        assert s.check() == []
