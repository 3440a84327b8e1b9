"""The worker's protocol with the coordinator, without I/O: what a held group may do next.

`WorkerProtocol.handle(event)` takes one fact (a push received, a cell finished, an outbox
commit done, an ack received, a stream opened or closed, a heartbeat due) and returns the
actions it leads to (record, start, cancel, store, commit an ack, send a GroupFinished, finish an
assignment, send a heartbeat), in the order they must be carried out. It reads no clock (time
arrives in the events), does no I/O, starts no task: worker/session.py is its asyncio shell, and
the simulation (tools/sim/simulation.py) drives this same object against the real core.

Rules (worker/session.py's rules 1, 4 and 5, decided here):
1. A push of an assignment held is ignored before it is recorded; one the outbox did not take as
   fresh (recorded or finished before) is ignored after. A fresh one starts all its cells at
   once, unless the worker drains: then it is handed back without running.
2. A cell's attempt is unsettled from the moment its outcome is about to be stored (so that its
   ack can never come first) until the outbox commits its ack or its dead letter.
3. A held assignment is finished locally (`FinishAssignment`) only
   - after its GroupFinished was answered, sent once nothing runs it, every cell's outcome is
     stored and every one of them settled; or
   - to a coordinator of protocol 5, once every cell of the push was acknowledged ACCEPTED or
     DUPLICATE (the coordinator released it at the commit of the last one): no GroupFinished,
     finished in the outbox commit right behind the last ack (`ReportAcked` returns both); or
   - revoked, once nothing runs it (what it stored is still delivered, as late evidence).
4. Acks are idempotent: an ack that comes twice for one attempt (a report sent again on a later
   stream while its first ack was committing) counts its cell once.
5. A GroupFinished is sent only on an open stream, and dies with it: the next stream sends it
   again. A finish by commit does not depend on a stream.
6. A coordinator restored from a backup (a new epoch) lost what it acknowledged after the
   backup: the reports the outbox puts back as offers (`ReportsOffered`) are unsettled again
   and no longer counted, so a group is not finished on acks of an epoch that is gone.

An event that names an assignment not held changes nothing and returns no action: the shell
logs it if it cares. A bug (an event the protocol's own actions rule out) is an assertion.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from common.ids import AssignmentId, AttemptId

__all__ = [
    "AckKind", "Action", "AckCommitted", "AssignmentFinished", "AssignmentRecorded", "CancelGroup",
    "CellFinished", "CommitAck", "DeliverReport", "DrainStarted", "Event", "FinishAssignment",
    "FinishBy", "GroupFinishedAnswered", "GroupRan", "HeartbeatDue", "Held", "OrphanAdopted",
    "PushReceived", "RecordAssignment", "ReportAcked", "ReportDeadLettered", "ReportStored", "ReportsOffered",
    "RevokeReceived", "SendGroupFinished", "SendHeartbeat", "StartGroup", "StoreReport",
    "StreamClosed", "StreamOpened", "WorkerProtocol",
]


class AckKind(enum.Enum):
    """A report's ack that settles it (a refusal is the shell's: resend, re-upload or dead letter)."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    LATE = "late"


class FinishBy(enum.Enum):
    """Why an assignment is finished locally (rule 3)."""

    ANSWER = "answer"  # its GroupFinished was answered
    REPORTS = "reports"  # every cell acked ACCEPTED or DUPLICATE by a coordinator of protocol 5
    REVOKE = "revoke"  # revoked, and nothing runs it any more


class _Finishing(enum.Enum):
    NO = "no"
    FRAME = "frame"  # a GroupFinished is on the stream, awaiting its answer
    COMMIT = "commit"  # a FinishAssignment is being committed


# ---- events: facts, in the past tense ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PushReceived:
    assignment_id: AssignmentId
    run_id: str
    attempts: tuple[AttemptId, ...]


@dataclass(frozen=True, slots=True)
class AssignmentRecorded:
    """The outbox committed the push's record; `fresh` False: recorded or finished before."""

    assignment_id: AssignmentId
    fresh: bool


@dataclass(frozen=True, slots=True)
class OrphanAdopted:
    """At start: an assignment an earlier process recorded and never finished, with the
    attempts its outbox still holds; nothing runs it now, so it is handed back."""

    assignment_id: AssignmentId
    run_id: str
    buffered: tuple[AttemptId, ...]


@dataclass(frozen=True, slots=True)
class CellFinished:
    """A cell's outcome is known and about to be stored."""

    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class ReportStored:
    """The outbox committed the cell's report."""

    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class GroupRan:
    """Every cell of the group returned (its outcomes stored): nothing runs it any more."""

    assignment_id: AssignmentId


@dataclass(frozen=True, slots=True)
class ReportAcked:
    assignment_id: AssignmentId
    attempt_id: AttemptId
    outcome: AckKind


@dataclass(frozen=True, slots=True)
class AckCommitted:
    """The outbox committed a report's ack: the entry is no longer pending."""

    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class ReportDeadLettered:
    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class ReportsOffered:
    """A new coordinator epoch: the outbox put these acknowledged reports back, to offer again."""

    entries: tuple[tuple[AssignmentId, AttemptId], ...]


@dataclass(frozen=True, slots=True)
class RevokeReceived:
    assignment_id: AssignmentId


@dataclass(frozen=True, slots=True)
class GroupFinishedAnswered:
    """The coordinator answered a GroupFinished (accepted, duplicate, or refused because it
    holds the assignment for this worker no more: there is nothing left to give back)."""

    assignment_id: AssignmentId


@dataclass(frozen=True, slots=True)
class AssignmentFinished:
    """A FinishAssignment's commit ended: `done` False if it was cancelled or failed."""

    assignment_id: AssignmentId
    done: bool = True


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """A stream was welcomed. `heartbeat_interval_ms`, `idle_heartbeat_ms`: the Welcome's
    (idle 0: a heartbeat every interval)."""

    now_ms: int
    completion_by_reports: bool = False
    heartbeat_interval_ms: int = 0
    idle_heartbeat_ms: int = 0


@dataclass(frozen=True, slots=True)
class StreamClosed:
    pass


@dataclass(frozen=True, slots=True)
class DrainStarted:
    pass


@dataclass(frozen=True, slots=True)
class HeartbeatDue:
    """The heartbeat interval passed on an open stream; what else a heartbeat says."""

    now_ms: int
    running_cells: int = 0
    degraded: str = ""


Event = (PushReceived | AssignmentRecorded | OrphanAdopted | CellFinished | ReportStored | GroupRan | ReportAcked
         | AckCommitted | ReportDeadLettered | ReportsOffered | RevokeReceived | GroupFinishedAnswered | AssignmentFinished
         | StreamOpened | StreamClosed | DrainStarted | HeartbeatDue)


# ---- actions: imperatives, for the shell to carry out in order -----------------------------

@dataclass(frozen=True, slots=True)
class RecordAssignment:
    """Record the push durably, then say `AssignmentRecorded`."""

    assignment_id: AssignmentId


@dataclass(frozen=True, slots=True)
class StartGroup:
    """Start every cell of the push together; say `CellFinished`, `ReportStored` per cell, and
    `GroupRan` once all returned."""

    assignment_id: AssignmentId


@dataclass(frozen=True, slots=True)
class CancelGroup:
    assignment_id: AssignmentId


@dataclass(frozen=True, slots=True)
class StoreReport:
    """Put the outcome into the outbox, then say `ReportStored`."""

    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class DeliverReport:
    """A new outbox entry to deliver (after the uploads it references)."""

    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class CommitAck:
    """Commit the entry's ack into the outbox, then say `AckCommitted`."""

    assignment_id: AssignmentId
    attempt_id: AttemptId


@dataclass(frozen=True, slots=True)
class SendGroupFinished:
    """On the open stream; say `GroupFinishedAnswered` when it is answered."""

    assignment_id: AssignmentId
    reason: str  # "completed", "handed_back" or "not_started" (Held.reason)


@dataclass(frozen=True, slots=True)
class FinishAssignment:
    """Commit the assignment finished (queued behind the commits asked before it), then say
    `AssignmentFinished`."""

    assignment_id: AssignmentId
    by: FinishBy


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    owned: tuple[AssignmentId, ...]


Action = (RecordAssignment | StartGroup | CancelGroup | StoreReport | DeliverReport | CommitAck | SendGroupFinished
          | FinishAssignment | SendHeartbeat)


# ---- state ---------------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class Held:
    """An assignment this process holds: running, waiting for its reports to settle, or
    finishing. Attempt collections are dicts (ordered), never sets: the simulation replays."""

    assignment_id: AssignmentId
    run_id: str
    cells: int  # the push's cells (0 for an orphan adopted at start: it is handed back)
    cells_left: int  # cells whose outcome is not yet in the outbox
    unsettled: dict[AttemptId, None] = field(default_factory=dict)  # stored (or storing), not yet acked
    counted: dict[AttemptId, None] = field(default_factory=dict)  # acked ACCEPTED or DUPLICATE
    running: bool = False
    revoked: bool = False
    handed_back: bool = False  # given up without running (an orphan, a push during drain)
    unstarted: bool = False  # a push during drain: handed back before any of its cells started
    dead: int = 0  # entries dead-lettered
    finishing: _Finishing = _Finishing.NO

    def count(self, attempt_id: AttemptId) -> None:
        """An ACCEPTED or DUPLICATE ack of one of its cells (rule 4: once per cell)."""
        self.counted[attempt_id] = None

    def all_counted(self) -> bool:
        return self.cells > 0 and len(self.counted) >= self.cells

    def ready_to_finish(self) -> bool:
        return (not self.revoked and not self.running and self.finishing is _Finishing.NO
                and self.cells_left == 0 and not self.unsettled)

    def completed_by_reports(self) -> bool:
        """Every cell of the push acknowledged ACCEPTED or DUPLICATE: a coordinator of protocol
        5 released the assignment at the commit of the last one, so no GroupFinished is due."""
        return not self.handed_back and not self.dead and self.all_counted()

    @property
    def reason(self) -> str:
        if self.unstarted:
            return "not_started"  # its attempts count against nothing: no cell of it ran
        return "handed_back" if self.handed_back or self.dead else "completed"


class WorkerProtocol:
    """The held groups of one worker process and the stream it is on. Create one per process
    (a crash forgets it; `OrphanAdopted` rebuilds what the outbox recorded)."""

    def __init__(self) -> None:
        self.held: dict[AssignmentId, Held] = {}
        self._recording: dict[AssignmentId, tuple[str, int]] = {}  # pushed, awaiting its record
        self.stream_open = False
        self.completion_by_reports = False
        self.draining = False
        self._interval_ms = 0
        self._idle_ms = 0
        self._said: tuple[object, ...] | None = None  # the last heartbeat's content on this stream
        self._said_ms = 0
        self._handlers = {
            PushReceived: self._push_received,
            AssignmentRecorded: self._assignment_recorded,
            OrphanAdopted: self._orphan_adopted,
            CellFinished: self._cell_finished,
            ReportStored: self._report_stored,
            GroupRan: self._group_ran,
            ReportAcked: self._report_acked,
            AckCommitted: self._ack_committed,
            ReportDeadLettered: self._dead_lettered,
            ReportsOffered: self._reports_offered,
            RevokeReceived: self._revoke_received,
            GroupFinishedAnswered: self._group_finished_answered,
            AssignmentFinished: self._assignment_finished,
            StreamOpened: self._stream_opened,
            StreamClosed: self._stream_closed,
            DrainStarted: self._drain_started,
            HeartbeatDue: self._heartbeat_due,
        }

    def handle(self, event: Event) -> list[Action]:
        return self._handlers[type(event)](event)  # type: ignore[operator]

    # ---- what the shell reads (the Hello, the heartbeat, the status line, the drain) --------

    def owned(self) -> tuple[AssignmentId, ...]:
        """What a heartbeat says the worker owns: every held assignment not revoked."""
        return tuple(sorted(aid for aid, h in self.held.items() if not h.revoked))

    def hello_owned(self) -> tuple[AssignmentId, ...]:
        """What a Hello says the worker still runs."""
        return tuple(sorted(aid for aid, h in self.held.items() if h.running and not h.revoked))

    def running(self) -> list[AssignmentId]:
        return [aid for aid, h in self.held.items() if h.running]

    def holds_groups(self) -> bool:
        return any(not h.revoked for h in self.held.values())

    # ---- handlers ---------------------------------------------------------------------------

    def _push_received(self, e: PushReceived) -> list[Action]:
        if e.assignment_id in self.held or e.assignment_id in self._recording:
            return []
        self._recording[e.assignment_id] = (e.run_id, len(e.attempts))
        return [RecordAssignment(e.assignment_id)]

    def _assignment_recorded(self, e: AssignmentRecorded) -> list[Action]:
        run_id, cells = self._recording.pop(e.assignment_id)
        if not e.fresh:
            return []
        held = self.held[e.assignment_id] = Held(e.assignment_id, run_id, cells=cells, cells_left=cells)
        if self.draining:
            held.cells_left = 0
            held.handed_back = held.unstarted = True
            return self._finish_if_ready(held)
        held.running = True
        return [StartGroup(e.assignment_id)]

    def _orphan_adopted(self, e: OrphanAdopted) -> list[Action]:
        assert e.assignment_id not in self.held, f"orphan {e.assignment_id} adopted twice"
        self.held[e.assignment_id] = Held(e.assignment_id, e.run_id, cells=0, cells_left=0,
                                          unsettled=dict.fromkeys(e.buffered), handed_back=True)
        return self._finish_if_ready(self.held[e.assignment_id])

    def _cell_finished(self, e: CellFinished) -> list[Action]:
        held = self.held.get(e.assignment_id)
        if held is not None:
            held.unsettled[e.attempt_id] = None
        return [StoreReport(e.assignment_id, e.attempt_id)]

    def _report_stored(self, e: ReportStored) -> list[Action]:
        held = self.held.get(e.assignment_id)
        if held is not None:
            assert held.cells_left > 0, f"{e.assignment_id}: more reports stored than cells"
            held.cells_left -= 1
        return [DeliverReport(e.assignment_id, e.attempt_id)]

    def _group_ran(self, e: GroupRan) -> list[Action]:
        held = self.held.get(e.assignment_id)
        if held is None:
            return []
        held.running = False
        if held.revoked:
            return self._finish(held, FinishBy.REVOKE)
        return self._finish_if_ready(held)

    def _report_acked(self, e: ReportAcked) -> list[Action]:
        actions: list[Action] = [CommitAck(e.assignment_id, e.attempt_id)]
        held = self.held.get(e.assignment_id)
        if held is None or e.outcome is AckKind.LATE:
            return actions
        held.count(e.attempt_id)
        # Every cell counted means every report is acked and its ack commit asked for ahead of
        # this finish (the outbox commits in order): the finish commits with them or after them.
        if (self.completion_by_reports and held.completed_by_reports() and not held.revoked
                and not held.running and held.finishing is _Finishing.NO):
            actions += self._finish(held, FinishBy.REPORTS)
        return actions

    def _ack_committed(self, e: AckCommitted) -> list[Action]:
        return self._settle(e.assignment_id, e.attempt_id, dead=False)

    def _dead_lettered(self, e: ReportDeadLettered) -> list[Action]:
        return self._settle(e.assignment_id, e.attempt_id, dead=True)

    def _settle(self, aid: AssignmentId, attempt_id: AttemptId, *, dead: bool) -> list[Action]:
        held = self.held.get(aid)
        if held is None:
            return []
        if attempt_id in held.unsettled:
            del held.unsettled[attempt_id]
        held.dead += dead
        return self._finish_if_ready(held)

    def _reports_offered(self, e: ReportsOffered) -> list[Action]:
        for aid, attempt_id in e.entries:
            held = self.held.get(aid)
            if held is not None and held.finishing is not _Finishing.COMMIT:
                held.counted.pop(attempt_id, None)
                held.unsettled[attempt_id] = None
        return []

    def _revoke_received(self, e: RevokeReceived) -> list[Action]:
        held = self.held.get(e.assignment_id)
        if held is None:
            return []
        held.revoked = True
        actions: list[Action] = [CancelGroup(e.assignment_id)]
        if not held.running:
            # Nothing runs it; what it stored is still delivered (as late evidence).
            actions += self._finish(held, FinishBy.REVOKE)
        return actions

    def _group_finished_answered(self, e: GroupFinishedAnswered) -> list[Action]:
        held = self.held.get(e.assignment_id)
        if held is None or held.finishing is _Finishing.COMMIT:
            return []  # revoked meanwhile: already finishing locally
        return self._finish(held, FinishBy.ANSWER)

    def _assignment_finished(self, e: AssignmentFinished) -> list[Action]:
        held = self.held.get(e.assignment_id)
        if held is None:
            return []
        held.finishing = _Finishing.NO
        if e.done:
            del self.held[e.assignment_id]
        # Not done (cancelled at shutdown, or failed): the next event that may finish it asks
        # again; asking now could spin on a writer that is gone.
        return []

    def _stream_opened(self, e: StreamOpened) -> list[Action]:
        self.stream_open = True
        self.completion_by_reports = e.completion_by_reports
        self._interval_ms, self._idle_ms = e.heartbeat_interval_ms, e.idle_heartbeat_ms
        self._said, self._said_ms = None, e.now_ms
        actions: list[Action] = []
        for held in list(self.held.values()):
            actions += self._finish_if_ready(held)
        return actions

    def _stream_closed(self, e: StreamClosed) -> list[Action]:
        self.stream_open = False
        for held in self.held.values():
            if held.finishing is _Finishing.FRAME:
                held.finishing = _Finishing.NO  # rule 5: the next stream sends it again
        return []

    def _drain_started(self, e: DrainStarted) -> list[Action]:
        self.draining = True
        return []

    def _heartbeat_due(self, e: HeartbeatDue) -> list[Action]:
        """A worker that holds groups beats every interval: a frame this recent is what tells the
        coordinator that its stream's end is a death, not a silence. An idle one, to a
        coordinator whose liveness is the transport's, only when what it would say changed or
        the idle interval passed."""
        if not self.stream_open:
            return []
        owned = self.owned()
        if self._idle_ms > self._interval_ms and not self.holds_groups():
            said = (owned, e.running_cells, e.degraded)
            if said == self._said and e.now_ms - self._said_ms < self._idle_ms:
                return []
            self._said, self._said_ms = said, e.now_ms
        return [SendHeartbeat(owned)]

    # ---- finishing --------------------------------------------------------------------------

    def _finish_if_ready(self, held: Held) -> list[Action]:
        if not self.stream_open or not held.ready_to_finish():
            return []
        if self.completion_by_reports and held.completed_by_reports():
            return self._finish(held, FinishBy.REPORTS)
        held.finishing = _Finishing.FRAME
        return [SendGroupFinished(held.assignment_id, held.reason)]

    def _finish(self, held: Held, by: FinishBy) -> list[Action]:
        if held.finishing is _Finishing.COMMIT:
            return []
        held.finishing = _Finishing.COMMIT
        return [FinishAssignment(held.assignment_id, by)]
