"""Effects: imperatives for the shell, produced by `step` and carried out after the commit.

An effect names its recipient by id; the shell maps ids to sessions. `Transition` bundles
what one command produced: the outcome for whoever sent it, the effects, and the durable
commands the log must record for it (empty when nothing durable changed).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from common.fastinit import fast_init_all
from common.ids import AssignmentId, AttemptId, CellId, GroupId, RunId, SubjectId, TaskId, WorkerId
from common.rejections import Rejection


class OutcomeKind(enum.IntEnum):
    UNSPECIFIED = 0
    ACCEPTED = 1
    DUPLICATE = 2  # already applied; acknowledged again, nothing changed
    LATE = 3  # kept as evidence of a superseded assignment, never selected
    REJECTED = 4


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    rejection: Rejection = Rejection.UNSPECIFIED
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind != OutcomeKind.REJECTED


ACCEPTED = Outcome(OutcomeKind.ACCEPTED)
DUPLICATE = Outcome(OutcomeKind.DUPLICATE)
LATE = Outcome(OutcomeKind.LATE)


def rejected(reason: Rejection, detail: str) -> Outcome:
    return Outcome(OutcomeKind.REJECTED, reason, detail)


@dataclass(frozen=True, slots=True)
class CellDispatch:
    cell_id: CellId
    attempt_id: AttemptId
    task_id: TaskId
    repetition: int
    subject_id: SubjectId
    dispatch_order: int  # the run's global order of dispatches, from 1


@dataclass(frozen=True, slots=True)
class PushAssignment:
    worker_id: WorkerId
    run_id: RunId
    assignment_id: AssignmentId
    generation: int
    group_id: GroupId
    cells: tuple[CellDispatch, ...]
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class RevokeAssignment:
    worker_id: WorkerId
    assignment_id: AssignmentId
    reason: str


@dataclass(frozen=True, slots=True)
class RequestDrain:
    """Ask a worker to drain itself and exit (an operator's `fleetctl drain`)."""

    worker_id: WorkerId
    reason: str


@dataclass(frozen=True, slots=True)
class NotifyRunState:
    """Tell every connected worker that a run's dispatch is paused, blocked or resumed."""

    run_id: RunId
    paused: bool
    blocked_reason: str


@dataclass(frozen=True, slots=True)
class Emit:
    """A notable event for logs and `fleetctl watch`: cell_selected, cell_exhausted,
    run_blocked, run_settled, worker_expired, assignment_superseded, ..."""

    event: str
    run_id: RunId | None = None
    subject: str = ""  # the id the event is about: a cell, a worker, an assignment
    detail: str = ""


@dataclass(frozen=True, slots=True)
class EndSession:
    """The worker's session must end (it is expired, gone or unknown here): it reconnects and
    says hello. Carried out by whoever asked (the servicer owns the sessions), not routed."""

    worker_id: WorkerId
    reason: str


@dataclass(frozen=True, slots=True)
class OfferRun:
    """Ask a worker to measure these keys of a run from its own bench root."""

    worker_id: WorkerId
    run_id: RunId
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RefuseRun:
    """Tell a worker it may not serve a run, and why (for its log and exit code)."""

    worker_id: WorkerId
    run_id: RunId
    reason: str
    differences: tuple[tuple[str, str, str], ...]  # (key, run's value, worker's value)


Effect = PushAssignment | RevokeAssignment | RequestDrain | NotifyRunState | Emit | OfferRun | RefuseRun


@dataclass(frozen=True, slots=True)
class Transition:
    outcome: Outcome
    effects: tuple[Effect, ...] = ()
    durable: tuple[object, ...] = ()  # commands to append to the log, in order


fast_init_all(globals())  # records made once or more per cell: common/fastinit.py
