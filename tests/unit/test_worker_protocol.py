"""The worker's sans-I/O protocol (worker/protocol.py), event by event: each test feeds facts and
checks the actions that come back, in order, with no shell, no outbox and no clock."""
from __future__ import annotations

from common.ids import AssignmentId, AttemptId
from worker import protocol as wp

A = AssignmentId("run-1:t00/r1:g1")
T1, T2 = AttemptId("run-1:t00/r1/s0:a1"), AttemptId("run-1:t00/r1/s1:a1")


def started(p: wp.WorkerProtocol, aid: AssignmentId = A, attempts: tuple[AttemptId, ...] = (T1, T2)) -> None:
    assert p.handle(wp.PushReceived(aid, "run-1", attempts)) == [wp.RecordAssignment(aid)]
    assert p.handle(wp.AssignmentRecorded(aid, fresh=True)) == [wp.StartGroup(aid)]


def stored(p: wp.WorkerProtocol, *attempts: AttemptId, aid: AssignmentId = A) -> None:
    for t in attempts:
        assert p.handle(wp.CellFinished(aid, t)) == [wp.StoreReport(aid, t)]
        assert p.handle(wp.ReportStored(aid, t)) == [wp.DeliverReport(aid, t)]


def opened(p: wp.WorkerProtocol, *, by_reports: bool = False) -> list[wp.Action]:
    return p.handle(wp.StreamOpened(0, completion_by_reports=by_reports, heartbeat_interval_ms=1_000,
                                    idle_heartbeat_ms=30_000))


def ran(*, by_reports: bool = True, attempts: tuple[AttemptId, ...] = (T1, T2)) -> wp.WorkerProtocol:
    """A protocol with a stream open and group A run: every cell's report stored, none acked."""
    p = wp.WorkerProtocol()
    opened(p, by_reports=by_reports)
    started(p, attempts=attempts)
    stored(p, *attempts)
    p.handle(wp.GroupRan(A))
    return p


def test_a_group_finishes_after_every_report_settled_and_its_group_finished_was_answered() -> None:
    p = wp.WorkerProtocol()
    opened(p)
    started(p)
    stored(p, T1, T2)
    assert p.handle(wp.GroupRan(A)) == [], "two reports still unsettled"
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED)) == [wp.CommitAck(A, T1)]
    assert p.handle(wp.AckCommitted(A, T1)) == []
    assert p.handle(wp.ReportAcked(A, T2, wp.AckKind.LATE)) == [wp.CommitAck(A, T2)]
    assert p.handle(wp.AckCommitted(A, T2)) == [wp.SendGroupFinished(A, "completed")]
    assert p.handle(wp.AckCommitted(A, T2)) == [], "a GroupFinished is asked for once"
    assert p.handle(wp.GroupFinishedAnswered(A)) == [wp.FinishAssignment(A, wp.FinishBy.ANSWER)]
    assert p.owned() == (A,)
    assert p.handle(wp.AssignmentFinished(A)) == []
    assert p.held == {} and p.owned() == ()


def test_protocol_5_finishes_in_the_commit_of_the_last_ack_without_group_finished() -> None:
    p = ran()
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED)) == [wp.CommitAck(A, T1)]
    assert p.handle(wp.ReportAcked(A, T2, wp.AckKind.DUPLICATE)) == [
        wp.CommitAck(A, T2), wp.FinishAssignment(A, wp.FinishBy.REPORTS)]
    assert p.handle(wp.AckCommitted(A, T1)) == [] and p.handle(wp.AckCommitted(A, T2)) == []
    p.handle(wp.AssignmentFinished(A))
    assert p.held == {}


def test_an_ack_that_comes_twice_counts_its_cell_once() -> None:
    p = ran()
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED)) == [wp.CommitAck(A, T1)]
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.DUPLICATE)) == [wp.CommitAck(A, T1)], \
        "T2 is not acknowledged: the group is not complete"
    assert p.held[A].finishing.name == "NO"


def test_protocol_5_still_sends_group_finished_when_a_cell_was_late() -> None:
    p = ran(attempts=(T1,))
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.LATE)) == [wp.CommitAck(A, T1)]
    assert p.handle(wp.AckCommitted(A, T1)) == [wp.SendGroupFinished(A, "completed")]


def test_a_group_done_while_no_stream_is_open_finishes_on_the_next_and_again_after_a_cut() -> None:
    p = wp.WorkerProtocol()
    started(p, attempts=(T1,))
    stored(p, T1)
    p.handle(wp.GroupRan(A))
    p.handle(wp.ReportAcked(A, T1, wp.AckKind.LATE))
    assert p.handle(wp.AckCommitted(A, T1)) == [], "no stream: nothing is sent"
    assert opened(p) == [wp.SendGroupFinished(A, "completed")]
    assert p.handle(wp.StreamClosed()) == []
    assert opened(p) == [wp.SendGroupFinished(A, "completed")], "it died with the stream"


def test_a_revoked_group_is_cancelled_then_finished_locally_once_nothing_runs_it() -> None:
    p = wp.WorkerProtocol()
    opened(p)
    started(p)
    assert p.handle(wp.RevokeReceived(A)) == [wp.CancelGroup(A)]
    assert p.owned() == () and p.hello_owned() == ()
    stored(p, T1, T2)  # the cancelled cells' outcomes are stored: delivered as late evidence
    assert p.handle(wp.GroupRan(A)) == [wp.FinishAssignment(A, wp.FinishBy.REVOKE)]
    assert p.handle(wp.AckCommitted(A, T1)) == []
    p.handle(wp.AssignmentFinished(A))
    assert p.held == {}


def test_a_revoke_of_a_group_that_no_longer_runs_finishes_it_at_once() -> None:
    p = wp.WorkerProtocol()
    started(p, attempts=(T1,))
    stored(p, T1)
    p.handle(wp.GroupRan(A))
    assert p.handle(wp.RevokeReceived(A)) == [wp.CancelGroup(A), wp.FinishAssignment(A, wp.FinishBy.REVOKE)]
    assert p.handle(wp.RevokeReceived(A)) == [wp.CancelGroup(A)], "finished once"
    assert p.handle(wp.RevokeReceived(AssignmentId("other"))) == []


def test_pushes_held_or_not_fresh_are_ignored_and_a_push_during_drain_is_handed_back() -> None:
    p = wp.WorkerProtocol()
    opened(p)
    started(p)
    assert p.handle(wp.PushReceived(A, "run-1", (T1, T2))) == [], "held"
    b = AssignmentId("run-1:t01/r1:g1")
    assert p.handle(wp.PushReceived(b, "run-1", (T1,))) == [wp.RecordAssignment(b)]
    assert p.handle(wp.PushReceived(b, "run-1", (T1,))) == [], "recording"
    assert p.handle(wp.AssignmentRecorded(b, fresh=False)) == [] and b not in p.held
    p.handle(wp.DrainStarted())
    assert p.handle(wp.PushReceived(b, "run-1", (T1,))) == [wp.RecordAssignment(b)]
    # Not started: the coordinator counts its attempts for nothing (an orphan's may have run).
    assert p.handle(wp.AssignmentRecorded(b, fresh=True)) == [wp.SendGroupFinished(b, "not_started")]
    assert p.running() == [A]


def test_an_orphan_is_handed_back_once_its_buffered_reports_settle() -> None:
    p = wp.WorkerProtocol()
    assert p.handle(wp.OrphanAdopted(A, "run-1", (T1,))) == []
    assert p.hello_owned() == () and p.owned() == (A,)
    assert opened(p) == []
    p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED))
    assert p.handle(wp.AckCommitted(A, T1)) == [wp.SendGroupFinished(A, "handed_back")], \
        "an orphan's acks never complete it by reports"


def test_a_dead_letter_settles_and_hands_the_group_back() -> None:
    p = ran(attempts=(T1,))
    assert p.handle(wp.ReportDeadLettered(A, T1)) == [wp.SendGroupFinished(A, "handed_back")]


def test_a_finish_whose_commit_failed_is_asked_for_again_by_the_next_event() -> None:
    p = ran(attempts=(T1,))
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED))[-1] == wp.FinishAssignment(A, wp.FinishBy.REPORTS)
    assert p.handle(wp.AssignmentFinished(A, done=False)) == []
    assert p.handle(wp.AckCommitted(A, T1)) == [wp.FinishAssignment(A, wp.FinishBy.REPORTS)]


def test_heartbeats_every_interval_while_holding_groups_and_when_idle_only_on_change() -> None:
    p = wp.WorkerProtocol()
    assert p.handle(wp.HeartbeatDue(1_000)) == [], "no stream"
    opened(p)
    assert p.handle(wp.HeartbeatDue(1_000)) == [wp.SendHeartbeat(())], "the first says what it holds"
    assert p.handle(wp.HeartbeatDue(2_000)) == [], "idle, nothing changed"
    assert p.handle(wp.HeartbeatDue(3_000, degraded="disk full")) == [wp.SendHeartbeat(())]
    assert p.handle(wp.HeartbeatDue(31_000, degraded="disk full")) == []
    assert p.handle(wp.HeartbeatDue(33_000, degraded="disk full")) == [wp.SendHeartbeat(())], "the idle interval"
    started(p)
    assert p.handle(wp.HeartbeatDue(34_000)) == [wp.SendHeartbeat((A,))]
    assert p.handle(wp.HeartbeatDue(35_000)) == [wp.SendHeartbeat((A,))], "holding a group: every interval"
    every = wp.WorkerProtocol()
    every.handle(wp.StreamOpened(0, heartbeat_interval_ms=1_000))
    assert every.handle(wp.HeartbeatDue(1_000)) == every.handle(wp.HeartbeatDue(2_000)) == [wp.SendHeartbeat(())]


def test_after_a_restore_the_reports_offered_again_must_be_acked_again_before_the_group_finishes() -> None:
    """`--seed 2 --faults restore` found it: T1 acked in the old epoch, T2's ack lost with the
    restore; T2 acked after it must not finish the group while T1's offer is unanswered."""
    p = ran()
    p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED))
    p.handle(wp.AckCommitted(A, T1))
    p.handle(wp.StreamClosed())
    assert p.handle(wp.ReportsOffered(((A, T1),))) == []
    assert opened(p, by_reports=True) == []
    assert p.handle(wp.ReportAcked(A, T2, wp.AckKind.DUPLICATE)) == [wp.CommitAck(A, T2)], "T1 is unanswered"
    assert p.handle(wp.AckCommitted(A, T2)) == []
    assert p.handle(wp.ReportAcked(A, T1, wp.AckKind.ACCEPTED)) == [
        wp.CommitAck(A, T1), wp.FinishAssignment(A, wp.FinishBy.REPORTS)]
