"""The coordinator's state: what the log folds into.

Rules. The records here are owned by the core alone: `step` is their only writer, and it
validates a command completely before it changes anything, so a rejected command leaves the
state exactly as it was. Records are mutable slotted classes rather than frozen values
because a step must cost in proportion to what it changes, not to the size of the run
(copying a 100,000-cell map per command would not); everything that leaves the core
(commands, effects, reports, summaries) is frozen.

Containers are dicts (insertion-ordered, hence deterministic) and heaps of tuples; never a
set of strings, whose iteration order changes between processes. `soft` holds liveness,
which is not part of the durable state and is excluded from `durable_fingerprint`.
"""
from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field

from common.evidence import Report
from common.fastpickle import fast_pickle
from common.ids import AssignmentId, AttemptId, CellId, Digest, GroupId, RunId, SubjectId, WorkerId
from common.policy import Policy
from common.spec import ExperimentSpec
from coordinator.core.reportpack import Glance, glance as glance_report, pack as pack_report, unpack as unpack_report


class WorkerStatus(enum.IntEnum):
    ACTIVE = 1  # may receive work
    SUSPECTED = 2  # heartbeats missing: no new work, assignments kept
    EXPIRED = 3  # assignments superseded; may come back by registering again
    GONE = 4  # left for good; assignments superseded
    RECONCILING = 5  # after a coordinator restart, until the worker says hello again


class GroupStatus(enum.IntEnum):
    WAITING = 1  # has cells to run; in the ready heap or the backoff heap
    ASSIGNED = 2  # held by one authoritative assignment
    SETTLED = 3  # every cell selected or out of attempts


@fast_pickle
@dataclass(slots=True)
class CellState:
    cell_id: CellId
    group_index: int
    subject_id: SubjectId
    attempts: list[AttemptId] = field(default_factory=list)
    selected: AttemptId | None = None
    grants: int = 0  # extra attempts granted by an operator (`fleetctl retry`)
    throttled: int = 0  # attempts the provider throttled: not counted against maxAttemptsPerCell
    # Attempts not counted either: a quarantined worker burned them (issue 23), a restore's offer
    # brought them, or they were handed back before they started (a group pushed during a drain).
    forgiven: int = 0


@fast_pickle
@dataclass(slots=True)
class ProviderState:
    """A model provider (or one key of it), shared by every run on the coordinator that names it
    (coordinator/core/providers.py has the rules). Derived from the log: each field changes only
    in the step of a durable command, so replay rebuilds it exactly."""

    name: str
    # Cells allowed to run at once against it now, adapted on throttling; 0: no limit yet (the
    # unnamed "default" provider, until it throttles).
    effective: int
    declared: int = 0  # the smallest maxConcurrentCells of the unsettled runs that declare it; 0: none
    running: int = 0  # cells of authoritative assignments dispatched against it and not yet reported
    peak_running: int = 0
    throttled: int = 0  # throttled attempts, ever
    retry_after_ms_total: int = 0  # the retry-after those attempts waited, summed
    slow_start: bool = True  # no throttling seen yet: the limit doubles its way up
    credit: int = 0  # attempts not throttled since the limit last moved
    last_throttled_ms: int = 0
    last_throttled: str = ""  # what the provider said, the last time it throttled


@fast_pickle
@dataclass(slots=True)
class GroupState:
    index: int
    group_id: GroupId
    cells: tuple[CellId, ...]
    status: GroupStatus = GroupStatus.WAITING
    generation: int = 0
    assignment: AssignmentId | None = None
    eligible_ms: int = 0  # earliest dispatch time (retry backoff)


@fast_pickle
@dataclass(slots=True)
class AttemptState:
    attempt_id: AttemptId
    run_id: RunId
    cell_id: CellId
    assignment_id: AssignmentId
    generation: int
    worker_id: WorkerId
    dispatch_order: int
    dispatched_ms: int
    # Its report packed (coordinator/core/reportpack.py): a third of the memory of the Report
    # and its records. Read and set as `report`; `reported` asks whether it has one.
    packed_report: bytes | None = None
    reported_ms: int = 0
    late: bool = False  # reported after its assignment was superseded: evidence only
    lost: bool = False  # its assignment ended without a report
    # Issued by the coordinator before a restore and lost with its log's tail; offered again
    # by the worker that kept its result (`ResultOffered`), which is its provenance.
    recovered: bool = False

    @property
    def report(self) -> Report | None:
        """Its report, unpacked anew at each read (about 2 us): a caller that reads one field
        several times keeps the Report it got."""
        packed = self.packed_report
        return None if packed is None else unpack_report(packed)

    @report.setter
    def report(self, report: Report | None) -> None:
        self.packed_report = None if report is None else pack_report(report)

    @property
    def glance(self) -> Glance | None:
        """The few fields of its report that a walk over many cells reads (about 0.6 us)."""
        packed = self.packed_report
        return None if packed is None else glance_report(packed)

    @property
    def reported(self) -> bool:
        return self.packed_report is not None


@fast_pickle
@dataclass(slots=True)
class AssignmentState:
    assignment_id: AssignmentId
    run_id: RunId
    group_index: int
    generation: int
    worker_id: WorkerId
    attempts: tuple[AttemptId, ...]
    dispatched_ms: int
    deadline_ms: int
    authoritative: bool = True
    unreported: int = 0
    ended_ms: int = 0
    ended_reason: str = ""


# One way a worker's measurement differs from what a run requires: (key, run's value,
# worker's value); a key the worker did not measure has the value NOT_MEASURED.
Difference = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class RunFit:
    """What a worker measured for one run, judged against the run's reference manifest."""

    components: tuple[tuple[str, str], ...]  # its pin: Hello environment + worker-measured keys
    differences: tuple[Difference, ...]  # from the reference; empty when the reference matches


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a worker may not serve a run, kept (the last one per worker) for operators."""

    run_id: RunId
    reason: str
    differences: tuple[Difference, ...]
    at_ms: int


@fast_pickle
@dataclass(slots=True)
class WorkerState:
    worker_id: WorkerId
    incarnation: int
    slots: int
    environment_id: str
    cpu_millis: int
    memory_mb: int
    status: WorkerStatus
    registered_ms: int
    cell_environment_id: str = ""
    draining: bool = False  # finishes what it holds, receives nothing new
    # Authoritative assignments held by this worker (dict as an ordered set).
    assignments: dict[AssignmentId, None] = field(default_factory=dict)
    environment: tuple[tuple[str, str], ...] = ()  # the Hello's spec-independent components
    # Runs this worker measured since it last registered; only these may be dispatched to it.
    fits: dict[RunId, RunFit] = field(default_factory=dict)
    refusal: Refusal | None = None  # the last time a run refused this worker, and why
    left_ms: int = 0  # when it expired or left; 0 while registered
    # Quarantine of a worker whose attempts fail where others' succeed (machine.py `_quarantine`):
    # its infrastructure failures in a row (since its last selectable report), when they began,
    # when it last produced a selectable report, and while quarantined: until when and why.
    streak: list[AttemptId] = field(default_factory=list)
    streak_started_ms: int = 0
    last_selected_ms: int = -1  # -1: never
    quarantined_until_ms: int = 0  # 0: not quarantined; receives no work before it
    quarantine_reason: str = ""
    quarantines: int = 0  # in a row, without a selectable report between: the backoff doubles
    probation: bool = False  # probed after a quarantine: one more failure quarantines it again
    # Why it starts no new cell (its heartbeat said: its state dir's disk is full); it gets no work.
    degraded: str = ""

    @property
    def free(self) -> bool:
        """Whether it belongs on the free list (`State.free_workers`): active, not draining, not
        quarantined, not degraded, with a slot open. The one definition the core and both
        invariant checkers use."""
        return (self.status == WorkerStatus.ACTIVE and not self.draining and not self.quarantined_until_ms
                and not self.degraded and len(self.assignments) < self.slots)


@dataclass(slots=True)
class RunState:
    run_id: RunId
    spec: ExperimentSpec
    policy: Policy
    submitted_ms: int
    group_deadline_ms: int
    groups: list[GroupState]
    cells: dict[CellId, CellState]
    group_by_id: dict[GroupId, int]
    ready: list[int] = field(default_factory=list)  # heap of group indexes, dispatchable now
    backoff: list[tuple[int, int]] = field(default_factory=list)  # heap of (eligible_ms, index)
    paused: bool = False
    blocked_reason: str = ""
    active: int = 0  # authoritative assignments
    settled_groups: int = 0
    dispatches: int = 0  # the run's dispatch order counter
    peak_active: int = 0
    peak_slots_offered: int = 0
    late_reports: int = 0
    recovered_ms: int | None = None  # last `recover`; deadlines wait out its grace
    # The submitter's measurement (key -> value): every worker must measure the same.
    manifest: dict[str, str] = field(default_factory=dict)
    worker_keys: tuple[str, ...] = ()  # measured by workers only; part of the pin
    # The worker-measured environment the run's cells run in, fixed at the first dispatch so
    # environments never mix in one run; released when its worker is gone and nothing selected
    # or running depends on it.
    pin: tuple[tuple[str, str], ...] | None = None
    pinned_by: WorkerId = WorkerId("")
    pinned_ms: int = 0
    selected_cells: int = 0
    # Dispatch order, frozen at submit (coordinator/core/order.py): group indexes, first
    # dispatched first; empty means spec order. `ready` then holds each waiting group's rank
    # (its position in `order`) instead of its index, so the heap pops the next in order.
    order: tuple[int, ...] = ()
    rank: tuple[int, ...] = ()  # rank[index]: the inverse of `order`
    # The provider of each subject, by the subject's index in the spec (from the spec's
    # `subjects[].provider`, else the policy's mapping, else "default"); () for a run recovered
    # from a snapshot written before providers: no provider accounting.
    subject_providers: tuple[str, ...] = ()
    provider_names: tuple[str, ...] = ()  # the distinct ones, in order (derived at submit)
    provider_by_subject: dict[SubjectId, str] = field(default_factory=dict)  # the same, by subject id
    observed_cost_usd: float = 0.0  # the known cost of every report, late and throttled ones too
    cost_cap_usd: float = 0.0  # policy maxObservedCostUsd, or the cap a recover set; 0: none
    pause_reason: str = ""  # why the run is paused: empty for an operator's pause
    # When each subject last had a cell selected (derived from the selections): a worker's
    # failure is its own only where the same subject succeeds elsewhere (machine.py quarantine).
    subject_selected_ms: dict[SubjectId, int] = field(default_factory=dict)
    # Failures quarantined workers burned of subjects that had not succeeded anywhere: counted
    # (a broken subject's are the run's) until the subject first succeeds, then given back.
    withheld: dict[SubjectId, list[AttemptId]] = field(default_factory=dict)

    def ready_key(self, index: int) -> int:
        return self.rank[index] if self.order else index

    def ready_group(self, key: int) -> int:
        return self.order[key] if self.order else key

    @property
    def settled(self) -> bool:
        return self.settled_groups == len(self.groups)

    def max_attempts(self, cell: CellState) -> int:
        return self.policy.max_attempts_per_cell + cell.grants

    def max_throttled(self, cell: CellState) -> int:
        return self.policy.max_throttled_attempts_per_cell + cell.grants

    def attempts_left(self, cell: CellState) -> bool:
        """Whether the cell may be dispatched again: a throttled attempt is not an attempt (it
        counts against the bound of throttled attempts alone), nor is one a quarantined worker
        burned."""
        return (counted_attempts(cell) < self.max_attempts(cell)
                and cell.throttled < self.max_throttled(cell))


def counted_attempts(cell: CellState) -> int:
    """The attempts that count against maxAttemptsPerCell."""
    return len(cell.attempts) - cell.throttled - cell.forgiven


@dataclass(slots=True)
class CellCounts:
    """Counts of a run's cells, kept as they change (machine.py), so that status and metrics
    need no walk of every cell (1.2 s at a million, on the actor). Derived from durable state:
    `summary.cell_counts` builds it when absent, and the invariant check compares it with a walk."""

    tried: int = 0  # cells with at least one attempt (run.dispatches - tried: the retries)
    running: int = 0  # unselected cells of assigned groups
    exhausted: int = 0  # unselected cells of settled groups


@dataclass(slots=True)
class Soft:
    """Liveness, and an index of durable state: rebuilt after a restart, never logged."""

    last_heard_ms: dict[WorkerId, int] = field(default_factory=dict)  # liveness (recovery shifts it)
    contact_ms: dict[WorkerId, int] = field(default_factory=dict)  # the last frame really heard
    # Workers whose stream their side ended while they were live: when it ended. A new hello
    # clears it; `stream_end_grace_ms` after it, the worker is lost (a logged decision).
    stream_ended_ms: dict[WorkerId, int] = field(default_factory=dict)
    # An index derived from durable state, so that picking a worker for a run does not walk
    # every free worker that cannot serve it (machine.py `_pick_worker`): each free worker's
    # stamp, ascending in `free_workers` order, and per run a heap of (stamp, worker) holding
    # at least every free worker that serves the run. Rebuilt from durable state when absent.
    free_stamp: dict[WorkerId, int] = field(default_factory=dict)
    free_stamp_next: int = 0
    serving: dict[RunId, list[tuple[int, WorkerId]]] = field(default_factory=dict)
    cell_counts: dict[RunId, CellCounts] = field(default_factory=dict)
    # The clock tick's walk of every worker (machine.py `_clock_ticked`) is skipped while no
    # liveness decision can be due: before `tick_due_ms`, the earliest time one could be, as of
    # the last walk. Whatever can make a decision due earlier sets it to 0, forcing the next
    # walk (`_liveness_moved`): a worker's status or registration, a stream's end, a run's
    # submit, pause, resume or settling (the timing and the expiry freeze), a stamp that moves
    # a worker's liveness back. Decisions are those of a walk at every tick.
    tick_due_ms: int = 0
    # Workers whose failure streak reached the policy's bound, or who are quarantined: each tick
    # looks at them (machine.py `_quarantine_watch`). None: rebuilt from durable state.
    quarantine_watch: dict[WorkerId, None] | None = None
    # Until when a stream that ends is silence, not a worker that left: a CoordinatorStalled's
    # grace (machine.py `_stream_ended`).
    stall_grace_until_ms: int = 0

    def __setstate__(self, state: object) -> None:
        """As pickle and copy restore a slotted object, but a field this build no longer has is
        skipped and one it added keeps its default: a snapshot written by an older build carries
        that build's Soft (its slots were `tick_version` too), and must still decode."""
        dict_state, slot_state = state if isinstance(state, tuple) else (state, None)
        fresh = Soft()
        for name in Soft.__slots__:
            setattr(self, name, getattr(fresh, name))
        for values in (dict_state, slot_state):
            for name, value in (values or {}).items():
                if name in Soft.__slots__:
                    setattr(self, name, value)


@dataclass(slots=True)
class State:
    runs: dict[RunId, RunState] = field(default_factory=dict)
    workers: dict[WorkerId, WorkerState] = field(default_factory=dict)
    assignments: dict[AssignmentId, AssignmentState] = field(default_factory=dict)
    attempts: dict[AttemptId, AttemptState] = field(default_factory=dict)
    artifacts: dict[Digest, int] = field(default_factory=dict)  # digest -> size in bytes
    # Workers that may take a group now: ACTIVE with a free slot. Ordered; the first is picked
    # and moved to the end (round robin), so the order is part of the durable state.
    free_workers: dict[WorkerId, None] = field(default_factory=dict)
    deadlines: list[tuple[int, AssignmentId]] = field(default_factory=list)  # heap
    slots_active: int = 0  # slots of ACTIVE workers: what the fleet offers now
    recovered_ms: int = 0
    recovery_grace_ms: int = 0
    providers: dict[str, ProviderState] = field(default_factory=dict)
    # The restore epoch: "" until the first restore from a backup, then the epoch drawn at the
    # latest; every assignment and attempt id issued carries it (common/ids.py).
    epoch: str = ""
    restored_backups: list[str] = field(default_factory=list)  # BACKUP.json ids taken up, in order
    # After a restore (at `restored_ms`), dispatch waits until then for the workers to offer
    # what they kept.
    restored_ms: int = 0
    restore_hold_until_ms: int = 0
    version: int = 0  # bumped by every durable change; tells `step` whether to log
    soft: Soft = field(default_factory=Soft)


_REPORT_ADDED_DEFAULTS = ", throttled='', retry_after_ms=0)"


def durable_fingerprint(state: State) -> str:
    """SHA-256 over a canonical rendering of everything durable. For tests and replay checks:
    it costs in proportion to the whole state."""
    return hashlib.sha256(json.dumps(durable_view(state), sort_keys=True, default=str).encode()).hexdigest()


def durable_view(state: State) -> dict:
    def report_view(r: Report | None):
        if r is None:
            return None
        # Fields added later are left out at their defaults, so that the fingerprints of logs
        # recorded before them (tests/golden) stay what they were.
        text = repr(r)
        return text.removesuffix(_REPORT_ADDED_DEFAULTS) + ")" if text.endswith(_REPORT_ADDED_DEFAULTS) else text

    runs = {}
    for run_id, run in state.runs.items():
        runs[run_id] = {
            "spec": run.spec.canonical,
            "policy": run.policy.canonical(),
            "submitted_ms": run.submitted_ms,
            "environment": [sorted(run.manifest.items()), list(run.worker_keys), run.pin, run.pinned_by,
                            run.pinned_ms, run.selected_cells],
            "groups": [[g.status, g.generation, g.assignment, g.eligible_ms] for g in run.groups],
            "cells": {c.cell_id: [c.attempts, c.selected, c.grants,
                                  *([c.throttled, c.forgiven] if c.throttled or c.forgiven else [])]
                      for c in run.cells.values()},
            # Only when set, so that the fingerprints of runs without them stay what they were.
            **({"spend": [run.cost_cap_usd, run.pause_reason]} if run.cost_cap_usd or run.pause_reason else {}),
            **({"providers": list(run.subject_providers)}
               if any(p != "default" for p in run.subject_providers) else {}),
            "ready": sorted(run.ready),
            # Only when set, so that the fingerprints of runs in spec order stay what they were.
            **({"order": list(run.order)} if run.order else {}),
            **({"withheld": sorted(run.withheld.items())} if run.withheld else {}),
            "backoff": sorted(run.backoff),
            "flags": [run.paused, run.blocked_reason, run.active, run.settled_groups, run.dispatches,
                      run.peak_active, run.peak_slots_offered, run.late_reports, run.recovered_ms],
        }
    return {
        "runs": runs,
        "workers": {w.worker_id: [w.incarnation, w.slots, w.environment_id, w.cpu_millis, w.memory_mb,
                                  int(w.status), w.registered_ms, w.cell_environment_id, w.draining,
                                  list(w.assignments), w.environment,
                                  {r: [f.components, f.differences] for r, f in w.fits.items()}, w.left_ms,
                                  None if w.refusal is None else [w.refusal.run_id, w.refusal.reason,
                                                                  w.refusal.differences, w.refusal.at_ms],
                                  # Only when set: fingerprints from before quarantines stay the same.
                                  *([w.streak, w.streak_started_ms, w.quarantined_until_ms, w.quarantine_reason,
                                     w.quarantines, w.probation]
                                    if w.streak or w.quarantines or w.quarantined_until_ms or w.probation else []),
                                  *([w.degraded] if w.degraded else [])]
                    for w in state.workers.values()},
        "assignments": {a.assignment_id: [a.run_id, a.group_index, a.generation, a.worker_id, list(a.attempts),
                                          a.dispatched_ms, a.deadline_ms, a.authoritative, a.unreported,
                                          a.ended_ms, a.ended_reason]
                        for a in state.assignments.values()},
        "attempts": {t.attempt_id: [t.run_id, t.cell_id, t.assignment_id, t.generation, t.worker_id,
                                    t.dispatch_order, t.dispatched_ms, report_view(t.report), t.reported_ms,
                                    t.late, t.lost, *([True] if t.recovered else [])]
                     for t in state.attempts.values()},
        "artifacts": dict(state.artifacts),
        "free_workers": list(state.free_workers),
        # The deadline heap is derived (each authoritative assignment's deadline_ms); stale
        # entries are popped lazily by ticks that are not logged, so they are left out.
        "slots_active": state.slots_active,
        "recovered": [state.recovered_ms, state.recovery_grace_ms],
        # Only once restored: fingerprints of logs from before restores stay what they were.
        **({"restored": [state.epoch, list(state.restored_backups), state.restored_ms, state.restore_hold_until_ms]}
           if state.restored_backups else {}),
        # Providers that are named or have throttled; the unnamed default before any throttling
        # is left out, so that the fingerprints of logs from before providers stay what they were.
        **({"providers": {p.name: [p.effective, p.declared, p.running, p.peak_running, p.throttled,
                                   p.retry_after_ms_total, p.slow_start, p.credit, p.last_throttled_ms,
                                   p.last_throttled] for p in state.providers.values()}}
           if any(p.name != "default" or p.throttled for p in state.providers.values()) else {}),
    }
