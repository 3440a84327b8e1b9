"""The pure transition function of the fleet contract: `step(state, command)`.

Rules, in the order they matter:
1. Validate, then change. Every handler checks the whole command before it writes anything,
   so a rejected command returns a rejection and leaves the state exactly as it was.
2. No I/O, no clock, no randomness: time arrives as `command.now_ms`, ids are derived from
   the log (common.ids). The simulation, the daemon and recovery all drive this one function.
3. Durable decisions depend only on durable state. Liveness (`state.soft`) may trigger a
   decision (suspicion, expiry), but the decision is returned as a durable command of its
   own and that is what the log records and replays; a soft command never changes durable
   state directly.
4. Capacity: a group is dispatched only when its run has fewer authoritative assignments
   than `maxConcurrentTaskGroups` and a worker has a free slot. Dispatch happens inside
   the step that frees capacity or adds work, so the shell never polls.
5. Results: only an authoritative attempt with selectable evidence is selected, at most one
   per cell, and a selection never changes. Everything else is kept as evidence.
6. Cost: a step touches what it changes; nothing here iterates over all cells of a run,
   except submitting the run itself.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import replace

from common import limits
from common.evidence import evidence_problem, expected_status, is_selectable
from common.identity import differences, pin_components
from common.ids import AssignmentId, AttemptId, RunId, WorkerId, assignment_id_for, attempt_id_for, cell_of_attempt, is_digest
from common.policy import COST_USD_MAX, Policy, group_deadline_for
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core import providers
from coordinator.core.order import order_problem, resolve_order
from coordinator.core.effects import (
    ACCEPTED,
    DUPLICATE,
    LATE,
    CellDispatch,
    Effect,
    Emit,
    EndSession,
    NotifyRunState,
    OfferRun,
    Outcome,
    PushAssignment,
    RefuseRun,
    RequestDrain,
    RevokeAssignment,
    Transition,
    rejected,
)
from coordinator.core.state import (
    AssignmentState,
    AttemptState,
    CellCounts,
    CellState,
    GroupState,
    GroupStatus,
    Refusal,
    RunFit,
    RunState,
    Soft,
    State,
    WorkerState,
    WorkerStatus,
    counted_attempts,
)

Fx = list[Effect]
DEFAULT_POLICY = Policy()
# Groups a fill passes over in one run because a provider they use is at its limit, before it
# stops looking (the rest wait for the next fill: a report, a tick).
PROVIDER_PASSES_MAX = 64


def new_state() -> State:
    return State()


def step(state: State, command: object) -> tuple[State, Transition]:
    """Apply one command. Returns the state (the same object, changed in place only when the
    command was accepted) and what the command produced."""
    handler = _HANDLERS.get(type(command))
    assert handler is not None, f"no handler for {type(command).__name__}"
    return state, handler(state, command)


def is_soft(command: object) -> bool:
    return isinstance(command, c.SOFT_COMMANDS)


# --- durable command handlers: each returns an Outcome and appends effects -------------------

def _durable(fn: Callable[[State, object, Fx], Outcome]) -> Callable[[State, object], Transition]:
    def run(state: State, command: object) -> Transition:
        fx: Fx = []
        before = state.version
        outcome = fn(state, command, fx)
        assert outcome.ok or state.version == before, "a rejected command changed the state"
        return Transition(outcome, tuple(fx), (command,) if state.version != before else ())

    return run


def _run_submitted_step(state: State, cmd: c.RunSubmitted) -> Transition:
    """Like `_durable`, except that what the log records is the command with its dispatch
    order resolved (coordinator/core/order.py), never the unresolved one."""
    fx: Fx = []
    before = state.version
    order = cmd.order
    if order is None and cmd.run_id not in state.runs:
        resolved = resolve_order(state, cmd.spec, cmd.policy)
        if isinstance(resolved, Outcome):
            return Transition(resolved)
        order = resolved
    logged = cmd if order is None or order == cmd.order else replace(cmd, order=order)
    outcome = _run_submitted(state, logged, fx)
    assert outcome.ok or state.version == before, "a rejected command changed the state"
    return Transition(outcome, tuple(fx), (logged,) if state.version != before else ())


def _run_submitted(state: State, cmd: c.RunSubmitted, fx: Fx) -> Outcome:
    existing = state.runs.get(cmd.run_id)
    if existing is not None:
        differs = []
        if existing.spec.canonical != cmd.spec.canonical:
            differs.append("spec")
        if not cmd.policy.resumes(existing.policy):
            differs.append("policy (" + ", ".join(cmd.policy.differences(existing.policy)) + ")")
        if tuple(existing.manifest.items()) != cmd.manifest or existing.worker_keys != cmd.worker_keys:
            keys = sorted({k for k, v in existing.manifest.items() if dict(cmd.manifest).get(k) != v}
                          | {k for k, _ in cmd.manifest if k not in existing.manifest}
                          | set(existing.worker_keys).symmetric_difference(cmd.worker_keys))
            differs.append("environment manifest (" + ", ".join(keys[:5]) + (", ..." if len(keys) > 5 else "") + ")")
        if not differs:
            return DUPLICATE  # resumes the run as frozen, policy included
        return rejected(Rejection.SPEC_CONFLICT, f"run {cmd.run_id} is frozen with a different " + " and ".join(differs))
    if list(cmd.manifest) != sorted(dict(cmd.manifest).items()) or len(dict(cmd.manifest)) != len(cmd.manifest):
        return rejected(Rejection.SPEC_INVALID, "the environment manifest is not sorted by key or repeats a key")
    spec = cmd.spec
    order = cmd.order or ()
    problem = order_problem(order, spec.group_count)
    if problem:
        return rejected(Rejection.SPEC_INVALID, problem)
    subject_providers = providers.subject_providers(spec, cmd.policy)
    if isinstance(subject_providers, str):
        return rejected(Rejection.PROVIDERS_INVALID, subject_providers)
    rank = [0] * len(order)
    for position, index in enumerate(order):
        rank[index] = position
    groups: list[GroupState] = []
    cells: dict = {}
    group_by_id: dict = {}
    for index in range(spec.group_count):
        group_id = spec.group_id(index)
        cell_ids = spec.cell_ids(index)
        groups.append(GroupState(index, group_id, cell_ids))
        group_by_id[group_id] = index
        for cell_id, subject in zip(cell_ids, spec.subjects):
            cells[cell_id] = CellState(cell_id, index, subject.id)
    state.runs[cmd.run_id] = RunState(
        run_id=cmd.run_id, spec=spec, policy=cmd.policy, submitted_ms=cmd.now_ms,
        group_deadline_ms=group_deadline_for(spec, cmd.policy),
        groups=groups, cells=cells, group_by_id=group_by_id,
        ready=list(range(len(groups))),  # every rank (or index) once, ascending: a heap
        peak_slots_offered=state.slots_active,
        manifest=dict(cmd.manifest), worker_keys=cmd.worker_keys,
        order=tuple(order), rank=tuple(rank),
        subject_providers=subject_providers, provider_names=tuple(dict.fromkeys(subject_providers)),
        provider_by_subject={s.id: p for s, p in zip(spec.subjects, subject_providers)},
        cost_cap_usd=cmd.policy.max_observed_cost_usd,
    )
    providers.register(state, state.runs[cmd.run_id])
    state.soft.cell_counts[cmd.run_id] = CellCounts()  # nothing tried, running or exhausted yet
    _liveness_moved(state)  # the oldest unsettled run's timing may now be this run's
    state.version += 1
    ordered = f", ordered from {cmd.policy.order_from}" if order else ""
    fx.append(Emit("run_submitted", cmd.run_id, cmd.run_id,
                   f"{spec.group_count} groups, {spec.cell_count} cells, {len(cmd.manifest)} reference keys{ordered}"))
    run = state.runs[cmd.run_id]
    for worker in state.workers.values():
        if worker.status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED):
            fx.append(_offer(run, worker))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _worker_registered(state: State, cmd: c.WorkerRegistered, fx: Fx) -> Outcome:
    if not cmd.worker_id or len(cmd.worker_id) > limits.ID_CHARS_MAX:
        return rejected(Rejection.MALFORMED_FRAME, "worker id is empty or too long")
    if not 1 <= cmd.slots <= limits.SLOTS_PER_WORKER_MAX:
        return rejected(Rejection.CAPACITY_INVALID,
                        f"slots must be between 1 and {limits.SLOTS_PER_WORKER_MAX}, not {cmd.slots}")
    if not cmd.environment_id:
        return rejected(Rejection.ENVIRONMENT_MISMATCH, "the worker sent no environment identity")
    if len(cmd.degraded) > limits.ID_CHARS_MAX:
        return rejected(Rejection.MALFORMED_FRAME, f"a degraded reason of {len(cmd.degraded)} characters")
    existing = state.workers.get(cmd.worker_id)
    if existing is not None and cmd.incarnation < existing.incarnation:
        return rejected(Rejection.INCARNATION_STALE,
                        f"incarnation {cmd.incarnation} is older than the registered {existing.incarnation}")
    problem = _admission_problem(state, cmd)
    if problem is not None:
        return problem

    if existing is None:
        worker = WorkerState(cmd.worker_id, cmd.incarnation, cmd.slots, cmd.environment_id,
                             cmd.cpu_millis, cmd.memory_mb, WorkerStatus.ACTIVE, cmd.now_ms,
                             cell_environment_id=cmd.cell_environment_id, environment=cmd.environment)
        state.workers[cmd.worker_id] = worker
        state.slots_active += worker.slots
        held: dict = {}
    else:
        worker = existing
        held = _reconcile(state, worker, cmd, fx)
        if worker.status == WorkerStatus.ACTIVE:
            state.slots_active -= worker.slots
        if cmd.incarnation != worker.incarnation:
            worker.draining = False  # a drain ends with the process that was drained
        worker.incarnation, worker.slots = cmd.incarnation, cmd.slots
        worker.environment_id, worker.cpu_millis, worker.memory_mb = (
            cmd.environment_id, cmd.cpu_millis, cmd.memory_mb)
        worker.cell_environment_id = cmd.cell_environment_id
        worker.environment = cmd.environment
        worker.fits = {}  # a new stream measures again: the files may have changed meanwhile
        worker.registered_ms = cmd.now_ms
        worker.status = WorkerStatus.ACTIVE
        state.slots_active += worker.slots
    for aid in cmd.owned:
        if aid not in held:
            fx.append(RevokeAssignment(worker.worker_id, aid, _revoke_reason(state, aid, worker.worker_id)))
    state.soft.last_heard_ms[worker.worker_id] = cmd.now_ms
    state.soft.contact_ms[worker.worker_id] = cmd.now_ms
    worker.left_ms = 0
    state.soft.stream_ended_ms.pop(worker.worker_id, None)  # back (within the grace or not)
    if cmd.degraded != worker.degraded:  # its word of its disk, before anything is dispatched to it
        _set_degraded(worker, cmd.degraded, fx)  # (a restored coordinator may not know a full disk)
    _liveness_moved(state)  # a new worker, or one whose status was set above
    state.version += 1
    for run in state.runs.values():
        if run.settled:
            if _to_measure(state, run):
                fx.append(_offer(run, worker))
            continue
        if run.peak_slots_offered < state.slots_active:
            run.peak_slots_offered = state.slots_active
        fx.append(_offer(run, worker))
    _refresh_free(state, worker)
    fx.append(Emit("worker_registered", None, worker.worker_id,
                   f"incarnation {worker.incarnation}, {worker.slots} slots, {worker.environment_id}"))
    if state.restore_hold_until_ms:
        _restore_worker_back(state, cmd.now_ms)
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _admission_problem(state: State, cmd: c.WorkerRegistered) -> Outcome | None:
    """Capacity admission against every run that still has work. The environment is judged
    per run, once the worker has measured what the run uses (`_run_environment_measured`)."""
    open_runs = [r for r in state.runs.values() if not r.settled]
    if not open_runs:
        return None
    for run in open_runs:
        if _fits(run.policy, cmd.slots, cmd.cpu_millis, cmd.memory_mb):
            return None
    p = open_runs[0].policy
    return rejected(Rejection.CAPACITY_INVALID,
                    f"{cmd.slots} slots need {cmd.slots * p.group_cpu_millis} cpu millis and "
                    f"{cmd.slots * p.group_memory_mb} MB; the worker offers {cmd.cpu_millis} and {cmd.memory_mb}")


def _to_measure(state: State, run: RunState) -> bool:
    """Whether a worker is asked to measure `run`: it has work to dispatch, or, after a restore,
    a cell without a result that a result a worker kept could still answer. Its offer is judged
    only once the worker has measured the run: a run that settled before a worker partitioned
    through the restore came back was never offered to it, and its kept result was asked
    again for ever (seed 9066 with ops,stall,blackhole,restore)."""
    return not run.settled or bool(state.epoch) and run.selected_cells < len(run.cells)


def _offer(run: RunState, worker: WorkerState) -> OfferRun:
    return OfferRun(worker.worker_id, run.run_id, tuple(run.manifest) + run.worker_keys)


def _differences(want: tuple[tuple[str, str], ...], got: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str, str], ...]:
    return differences(want, got, every_key=True)


def _refuse(run: RunState, worker: WorkerState, reason: str, differences: tuple, now: int, fx: Fx) -> None:
    worker.refusal = Refusal(run.run_id, reason, differences, now)
    fx.append(RefuseRun(worker.worker_id, run.run_id, reason, differences))
    shown = "; ".join(f"{k}: run {a}, worker {b}" for k, a, b in differences[:3])
    fx.append(Emit("worker_refused", run.run_id, worker.worker_id, f"{reason}" + (f" ({shown})" if shown else "")))


def _pin_refusal(run: RunState, fit: RunFit) -> str:
    return (f"the run's environment was pinned by worker {run.pinned_by} at its first dispatch, "
            f"and this worker's differs in {len(_differences(run.pin or (), fit.components))} keys")


def _run_environment_measured(state: State, cmd: c.RunEnvironmentMeasured, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    run = state.runs.get(cmd.run_id)
    if run is None:
        return _unknown_run(cmd.run_id)
    if cmd.incarnation != worker.incarnation:
        return rejected(Rejection.INCARNATION_STALE,
                        f"a measurement of incarnation {cmd.incarnation}; the worker is at {worker.incarnation}")
    if worker.status in (WorkerStatus.EXPIRED, WorkerStatus.GONE, WorkerStatus.RECONCILING):
        return rejected(Rejection.WORKER_NOT_ACTIVE,
                        f"worker {cmd.worker_id} is {worker.status.name.lower()}: register again")
    measured = dict(cmd.measured)
    if len(measured) != len(cmd.measured):
        return rejected(Rejection.MALFORMED_FRAME, "the measurement repeats a key")
    found = differences(run.manifest, measured)
    required = run.policy.required_environment_id
    if required and worker.environment_id != required:
        found += (("environment_id", required, worker.environment_id),)
    fit = RunFit(pin_components(worker.environment, run.policy.environment_match, measured, run.worker_keys), found)
    if worker.fits.get(run.run_id) == fit:
        return DUPLICATE
    worker.fits[run.run_id] = fit
    state.version += 1
    if found:
        _refuse(run, worker, "the worker's measurement of what the run uses differs from the submitter's",
                found, cmd.now_ms, fx)
        return ACCEPTED
    if run.pin is not None and fit.components != run.pin:
        _refuse(run, worker, _pin_refusal(run, fit), _differences(run.pin, fit.components), cmd.now_ms, fx)
        return ACCEPTED
    fx.append(Emit("worker_fits_run", run.run_id, worker.worker_id))
    stamp = state.soft.free_stamp.get(worker.worker_id)
    if stamp is not None:
        _serving_add(state, worker, stamp)
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _serves(run: RunState, worker: WorkerState) -> bool:
    fit = worker.fits.get(run.run_id)
    return fit is not None and not fit.differences and (run.pin is None or fit.components == run.pin)


def _pin(state: State, run: RunState, worker: WorkerState, now: int, fx: Fx) -> None:
    """The run's first dispatch (since a release) fixes what only workers measure; every
    other worker measured for the run that differs is told so."""
    fit = worker.fits[run.run_id]
    run.pin, run.pinned_by, run.pinned_ms = fit.components, worker.worker_id, now
    fx.append(Emit("run_pinned", run.run_id, worker.worker_id, f"{len(fit.components)} worker-measured keys"))
    for other in state.workers.values():
        theirs = other.fits.get(run.run_id)
        if other is not worker and theirs is not None and not theirs.differences and theirs.components != run.pin:
            _refuse(run, other, _pin_refusal(run, theirs), _differences(run.pin, theirs.components), now, fx)


def _run_pin_released(state: State, cmd: c.RunPinReleased, fx: Fx) -> Outcome:
    run = state.runs.get(cmd.run_id)
    if run is None:
        return _unknown_run(cmd.run_id)
    if run.pin is None or run.pinned_by != cmd.worker_id:
        return DUPLICATE
    problem = _pin_release_problem(state, run)
    if problem:
        return rejected(Rejection.RUN_PIN_HELD, problem)
    run.pin, run.pinned_by, run.pinned_ms = None, WorkerId(""), 0
    state.soft.serving.pop(run.run_id, None)  # workers of other environments may serve it now
    state.version += 1
    fx.append(Emit("run_pin_released", run.run_id, cmd.worker_id,
                   "its worker is gone and no selected result or running group depends on it"))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _pin_release_problem(state: State, run: RunState) -> str:
    worker = state.workers.get(run.pinned_by)
    if worker is not None and worker.status not in (WorkerStatus.EXPIRED, WorkerStatus.GONE):
        return f"worker {run.pinned_by} that pinned the run is {worker.status.name.lower()}"
    if run.selected_cells:
        return f"{run.selected_cells} selected results depend on the pin"
    if run.active:
        return f"{run.active} groups are running in the pinned environment"
    return ""


def _fits(policy: Policy, slots: int, cpu_millis: int, memory_mb: int) -> bool:
    return slots * policy.group_cpu_millis <= cpu_millis and slots * policy.group_memory_mb <= memory_mb


def _reconcile(state: State, worker: WorkerState, cmd: c.WorkerRegistered, fx: Fx) -> dict:
    """Keep the assignments the worker still runs or has buffered reports for; release the rest.
    Returns the kept assignment ids."""
    owned = dict.fromkeys(cmd.owned)
    buffered_in: dict = {}
    for tid in cmd.buffered:
        attempt = state.attempts.get(tid)
        if attempt is not None and attempt.worker_id == worker.worker_id:
            buffered_in[attempt.assignment_id] = None
    kept: dict = {}
    for aid in list(worker.assignments):
        if (aid in owned or aid in buffered_in) and len(kept) < cmd.slots:
            kept[aid] = None
        elif aid in owned or aid in buffered_in:
            # The worker came back with fewer slots than it holds groups: the newest go back.
            _release(state, state.assignments[aid], cmd.now_ms, "more groups than the worker's new slots", fx)
            if aid not in owned:  # owned ones get their revoke from the caller
                fx.append(RevokeAssignment(worker.worker_id, aid, "more groups than the worker's new slots"))
        else:
            _release(state, state.assignments[aid], cmd.now_ms, "not held by the worker when it reconnected", fx)
    return kept


def _revoke_reason(state: State, aid: AssignmentId, worker_id: WorkerId) -> str:
    a = state.assignments.get(aid)
    if a is None:
        return "unknown assignment"
    if a.worker_id != worker_id:
        return "assignment belongs to another worker"
    return f"superseded: {a.ended_reason or 'no longer authoritative'}"


def _cell_reported(state: State, cmd: c.CellReported, fx: Fx) -> Outcome:
    if cmd.worker_id not in state.workers:
        return _unknown_worker(cmd.worker_id)
    attempt = state.attempts.get(cmd.attempt_id)
    if attempt is None and state.epoch:
        # Restored from a backup: an attempt this coordinator never saw was issued before the
        # restore (a cell that was running across it, reported after the worker's welcome):
        # offered, as what the worker kept is.
        return _result_offered(state, c.ResultOffered(cmd.now_ms, cmd.worker_id, cmd.attempt_id, cmd.assignment_id,
                                                      cmd.generation, cmd.report), fx)
    if attempt is None:
        return rejected(Rejection.UNKNOWN_ATTEMPT, f"attempt {cmd.attempt_id} was never dispatched")
    if attempt.worker_id != cmd.worker_id:
        return rejected(Rejection.NOT_OWNER, f"attempt {cmd.attempt_id} belongs to worker {attempt.worker_id}")
    if attempt.assignment_id != cmd.assignment_id or attempt.generation != cmd.generation:
        return rejected(Rejection.GENERATION_MISMATCH,
                        f"attempt {cmd.attempt_id} belongs to {attempt.assignment_id} generation "
                        f"{attempt.generation}, not {cmd.assignment_id} generation {cmd.generation}")
    report = cmd.report
    problem = _evidence_rejection(report)
    if problem is not None:
        return problem
    if attempt.reported:
        if attempt.report == report:
            return LATE if attempt.late else DUPLICATE
        return rejected(Rejection.CONFLICTING_REPORT, f"attempt {cmd.attempt_id} already has a different report")
    problem = _artifacts_rejection(state, report)
    if problem is not None:
        return problem

    attempt.report = report
    attempt.reported_ms = cmd.now_ms
    state.version += 1
    assignment = state.assignments[attempt.assignment_id]
    run = state.runs[attempt.run_id]
    cell = run.cells[attempt.cell_id]
    group = run.groups[cell.group_index]
    if report.cost_usd is not None:
        run.observed_cost_usd += report.cost_usd
        _spend_check(state, run, fx)
    providers.reported(state, run, group, cell, report, assignment.authoritative, cmd.now_ms, fx)
    if not assignment.authoritative:
        attempt.late = True
        run.late_reports += 1
        fx.append(Emit("late_report", run.run_id, attempt.attempt_id, assignment.ended_reason))
        return LATE
    assignment.unreported -= 1
    if report.throttled:
        cell.throttled += 1
    selectable = is_selectable(report)
    _streak(state, state.workers[cmd.worker_id], attempt.attempt_id, cell, report, selectable, cmd.now_ms)
    reopened = False  # a group its subject's first success gave failures back to
    if selectable and cell.selected is None:
        reopened = _select(state, run, cell, attempt.attempt_id, cmd.now_ms, fx, f"score {report.score}")
    elif report.throttled:
        fx.append(Emit("cell_throttled", run.run_id, cell.cell_id,
                       f"{cell.throttled} of {run.max_throttled(cell)} throttled attempts: {report.throttled}"))
    elif not selectable:
        fx.append(Emit("cell_retryable", run.run_id, cell.cell_id, f"{report.status.name}: {report.detail}"))
    if report.environment_failure and not run.blocked_reason:
        run.blocked_reason = report.environment_failure
        fx.append(NotifyRunState(run.run_id, run.paused, run.blocked_reason))
        fx.append(Emit("run_blocked", run.run_id, cell.cell_id, report.environment_failure))
    if assignment.unreported == 0:
        _release(state, assignment, cmd.now_ms, "completed", fx)
        _fill(state, cmd.now_ms, fx)
    elif state.epoch and _revoke_if_answered(state, run, assignment, cmd.now_ms, fx):
        return ACCEPTED  # only offers, after a restore, answer a cell an authoritative assignment runs
    elif reopened or (run.subject_providers and state.providers[run.provider_by_subject[cell.subject_id]].effective):
        _fill(state, cmd.now_ms, fx)  # a reopened group, or the cell's provider has room again
    return ACCEPTED


def _select(state: State, run: RunState, cell: CellState, attempt_id: AttemptId, now: int, fx: Fx,
            detail: str) -> bool:
    """`attempt_id`'s result is the cell's: counted, and out of its group's running (or, adopted
    after a restore into a settled group, exhausted) cells. Its subject's first success gives
    back the failures quarantined workers burned of it; returns whether that reopened a group
    (the caller fills the free slots)."""
    cell.selected = attempt_id
    run.selected_cells += 1
    run.subject_selected_ms[cell.subject_id] = now
    counts = state.soft.cell_counts.get(run.run_id)
    status = run.groups[cell.group_index].status
    if counts is not None and status == GroupStatus.ASSIGNED:
        counts.running -= 1
    elif counts is not None and status == GroupStatus.SETTLED:
        counts.exhausted -= 1  # only an adoption selects in a settled group
    fx.append(Emit("cell_selected", run.run_id, cell.cell_id, detail))
    if not run.withheld:
        return False
    reopened = False
    for tid in run.withheld.pop(cell.subject_id, ()):
        other = run.cells[state.attempts[tid].cell_id]
        if other.selected is None:
            reopened = _give_back(state, run, other, now) or reopened
    return reopened


def _evidence_rejection(report) -> Outcome | None:
    problem = evidence_problem(report)
    if problem:
        return rejected(Rejection.INVALID_EVIDENCE, problem)
    want = expected_status(report)
    if report.status != want:
        return rejected(Rejection.STATUS_CONTRADICTS_EVIDENCE,
                        f"status {report.status.name} but the evidence says {want.name}")
    return None


def _artifacts_rejection(state: State, report) -> Outcome | None:
    for ref in report.artifacts:
        if ref.digest not in state.artifacts:
            return rejected(Rejection.ARTIFACT_MISSING, f"artifact {ref.name} ({ref.digest}) is not stored")
        if state.artifacts[ref.digest] != ref.size_bytes:
            return rejected(Rejection.INVALID_EVIDENCE,
                            f"artifact {ref.name} is {state.artifacts[ref.digest]} bytes, not {ref.size_bytes}")
    return None


# --- restore from a backup ----------------------------------------------------------------------
# A coordinator started on a backup has lost its log's tail: what it dispatched after the backup,
# and the results the workers reported (and it acknowledged) meanwhile. The workers kept those
# results; each that sees the new epoch in its Welcome offers them again. Dispatch waits (the
# hold) until every worker the restored state knows has registered again, and a short window
# more for their offers, or the recovery grace at most: a group whose result is being offered is
# not run again. Ids issued from now on carry the epoch, so none repeats one issued after the
# backup.

def _coordinator_restored(state: State, cmd: c.CoordinatorRestored, fx: Fx) -> Outcome:
    if not cmd.backup_id or len(cmd.backup_id) > limits.ID_CHARS_MAX:
        return rejected(Rejection.MALFORMED_FRAME, "a restore names no backup, or one too long")
    if not cmd.epoch.isalnum() or not cmd.epoch.isascii() or len(cmd.epoch) > limits.EPOCH_CHARS_MAX:
        return rejected(Rejection.MALFORMED_FRAME, f"epoch {cmd.epoch!r} is not 1-{limits.EPOCH_CHARS_MAX} letters or digits")
    if cmd.backup_id in state.restored_backups:
        return DUPLICATE
    if cmd.epoch == state.epoch:
        return rejected(Rejection.MALFORMED_FRAME, f"epoch {cmd.epoch} is the current one")
    state.epoch = cmd.epoch
    state.restored_backups.append(cmd.backup_id)
    state.restored_ms = cmd.now_ms
    waiting = _restore_waits_for(state)
    state.restore_hold_until_ms = cmd.now_ms + (_timing(state).recovery_grace_ms if waiting else
                                                limits.RESTORE_OFFER_WINDOW_MS)
    state.version += 1
    fx.append(Emit("coordinator_restored", None, "",
                   f"restored from backup {cmd.backup_id}: epoch {cmd.epoch}; dispatch waits for "
                   f"{waiting} workers to come back and offer the results they kept"))
    return ACCEPTED


def _restore_waits_for(state: State) -> int:
    """Workers of the restored state not yet registered since the restore (nor expired or gone)."""
    return sum(1 for w in state.workers.values()
               if w.status not in (WorkerStatus.EXPIRED, WorkerStatus.GONE) and w.registered_ms < state.restored_ms)


def _restore_worker_back(state: State, now: int) -> None:
    """A worker registered during the hold: once every one is back, their offers get a window."""
    if now < state.restore_hold_until_ms and not _restore_waits_for(state):
        state.restore_hold_until_ms = min(state.restore_hold_until_ms, now + limits.RESTORE_OFFER_WINDOW_MS)


ISSUED_BEFORE_RESTORE = "issued before a restore"  # the reason of an assignment known only from offers


def _offered_only(state: State, attempt_id: AttemptId) -> bool:
    """Whether the restored state knows this attempt only from a worker's offer (issued after
    the backup): its cell forgave it when it was offered, so it is never given back again."""
    return state.assignments[state.attempts[attempt_id].assignment_id].ended_reason == ISSUED_BEFORE_RESTORE


def _result_offered(state: State, cmd: c.ResultOffered, fx: Fx) -> Outcome:
    attempt = state.attempts.get(cmd.attempt_id)
    if attempt is not None and (attempt.reported or state.assignments[attempt.assignment_id].authoritative):
        # Not lost: an ordinary report (most often a duplicate of one the backup holds).
        return _cell_reported(state, c.CellReported(cmd.now_ms, cmd.worker_id, cmd.attempt_id, cmd.assignment_id,
                                                    cmd.generation, cmd.report), fx)
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    run = state.runs.get(RunId(cmd.attempt_id.partition(":")[0]))
    if run is None:
        return _unknown_run(cmd.attempt_id.partition(":")[0])
    cell_id = cell_of_attempt(run.run_id, cmd.attempt_id)
    cell = run.cells.get(cell_id) if cell_id is not None else None
    if cell is None:
        return rejected(Rejection.UNKNOWN_CELL, f"attempt {cmd.attempt_id} names no cell of run {run.run_id}")
    group = run.groups[cell.group_index]
    if not cmd.assignment_id.startswith(f"{run.run_id}:{group.group_id}:"):
        return rejected(Rejection.GENERATION_MISMATCH,
                        f"attempt {cmd.attempt_id} is not of assignment {cmd.assignment_id}")
    known = state.assignments.get(cmd.assignment_id)
    if known is not None and (known.worker_id != cmd.worker_id or known.generation != cmd.generation):
        return rejected(Rejection.GENERATION_MISMATCH,
                        f"assignment {cmd.assignment_id} is another worker's or generation's")
    if attempt is not None and attempt.assignment_id != cmd.assignment_id:
        return rejected(Rejection.GENERATION_MISMATCH, f"attempt {cmd.attempt_id} is of {attempt.assignment_id}")
    report = cmd.report
    problem = _evidence_rejection(report) or _artifacts_rejection(state, report)
    if problem is not None:
        return problem
    if run.run_id not in worker.fits:  # pinned or not (a pin lost with the log's tail): the offer
        # makes an attempt of this worker, and every attempt's worker has measured the run
        return rejected(Rejection.NOT_YET_MEASURED,
                        f"worker {cmd.worker_id} has not measured run {run.run_id} on this stream yet")
    adopt = cell.selected is None and is_selectable(report) and _serves(run, worker)
    if attempt is None:  # issued after the backup: lost with the log's tail
        run.dispatches += 1
        attempt = state.attempts[cmd.attempt_id] = AttemptState(
            cmd.attempt_id, run.run_id, cell.cell_id, cmd.assignment_id, cmd.generation, worker.worker_id,
            run.dispatches, report.started_ms or cmd.now_ms)
        if known is None:
            state.assignments[cmd.assignment_id] = AssignmentState(
                cmd.assignment_id, run.run_id, group.index, cmd.generation, worker.worker_id, (cmd.attempt_id,),
                report.started_ms or cmd.now_ms, 0, authoritative=False, ended_ms=cmd.now_ms,
                ended_reason=ISSUED_BEFORE_RESTORE)
        else:
            known.attempts += (cmd.attempt_id,)
        if not cell.attempts and (counts := state.soft.cell_counts.get(run.run_id)) is not None:
            counts.tried += 1
        cell.attempts.append(cmd.attempt_id)
        # Counted against nothing: the attempts the restored state counts are its own, and an
        # adopted result ends the cell whatever its count (one out of attempts included).
        cell.forgiven += 1
    # else: dispatched before the backup, its report lost; its assignment was released at the
    # worker's return (not held), so it counted as a lost attempt already.
    attempt.report = report
    attempt.reported_ms = cmd.now_ms
    attempt.lost = False
    attempt.late = not adopt
    attempt.recovered = True
    state.version += 1
    if report.cost_usd is not None:
        run.observed_cost_usd += report.cost_usd
    if _serves(run, worker):  # the worker's streak, lost with the log's tail, is rebuilt from its
        # offers (they come in the order it finished them): a black hole caught before the restore
        # is caught again, and the failures it burned are given back with its quarantine.
        settled = group.status == GroupStatus.SETTLED
        _streak(state, worker, cmd.attempt_id, cell, report, is_selectable(report), cmd.now_ms)
        if settled and group.status == GroupStatus.WAITING:  # a failure given back reopened its
            _fill(state, cmd.now_ms, fx)  # cell, which its loss at the worker's return had exhausted
    if not adopt:
        run.late_reports += 1
        why = ("the cell has a selected result" if cell.selected is not None else
               "the worker does not serve the run's environment" if not _serves(run, worker) else
               f"not selectable ({report.status.name})")
        fx.append(Emit("late_report", run.run_id, cmd.attempt_id, f"offered after a restore, kept as evidence: {why}"))
        return LATE
    if run.pin is None:  # the pin was lost with the log's tail: the adopted result's worker fixes it,
        _pin(state, run, worker, cmd.now_ms, fx)  # as a first dispatch would (a result needs a pin)
    reopened = _select(state, run, cell, cmd.attempt_id, cmd.now_ms, fx,
                       f"score {report.score}; recovered from worker {worker.worker_id} after a restore")
    if group.status == GroupStatus.WAITING and not _pending_cells(run, group):
        _unqueue(run, group.index)
        _settle_or_wait(state, run, group, cmd.now_ms, fx)
    elif group.status == GroupStatus.ASSIGNED:
        _revoke_if_answered(state, run, state.assignments[group.assignment], cmd.now_ms, fx)
    _spend_check(state, run, fx)
    if reopened:
        _fill(state, cmd.now_ms, fx)
    return ACCEPTED


ANSWERED_BY_OFFERS = "every cell it still runs has a result offered after a restore"


def _revoke_if_answered(state: State, run: RunState, assignment: AssignmentState, now: int, fx: Fx) -> bool:
    """An offer adopted after the restore's hold can answer a cell that a new attempt is already
    running (the group was dispatched again before the offer came). Once offers answer every cell
    the assignment still runs (at the offer, or at the report of its last other cell), nothing it
    can report would be selected: it is revoked, so that the worker stops paying for those
    executions, its slot takes the next group, and a cell of it that failed is retried now."""
    attempts, cells = state.attempts, run.cells  # an authoritative assignment runs one at least
    if not all(attempts[t].reported or cells[attempts[t].cell_id].selected is not None for t in assignment.attempts):
        return False
    _release(state, assignment, now, ANSWERED_BY_OFFERS, fx)
    fx.append(RevokeAssignment(assignment.worker_id, assignment.assignment_id, ANSWERED_BY_OFFERS))
    _fill(state, now, fx)
    return True


def _unqueue(run: RunState, index: int) -> None:
    """Take a waiting group out of the ready heap or the backoff heap."""
    for heap in (run.ready, run.backoff):
        kept = [e for e in heap if (run.ready_group(e) if heap is run.ready else e[1]) != index]
        if len(kept) != len(heap):
            heap[:] = kept
            heapq.heapify(heap)


def _spend_check(state: State, run: RunState, fx: Fx) -> None:
    """A run whose known observed cost reached its cap pauses: running groups settle."""
    if not run.cost_cap_usd or run.observed_cost_usd < run.cost_cap_usd or run.paused or run.settled:
        return
    run.paused = True
    run.pause_reason = f"spend cap reached: observed ${run.observed_cost_usd:.4f} of ${run.cost_cap_usd:.4f}"
    _liveness_moved(state)
    fx.append(NotifyRunState(run.run_id, True, run.blocked_reason))
    fx.append(Emit("run_paused", run.run_id, run.run_id, run.pause_reason))


def _artifact_stored(state: State, cmd: c.ArtifactStored, fx: Fx) -> Outcome:
    if not is_digest(cmd.digest) or cmd.size_bytes < 0:
        return rejected(Rejection.MALFORMED_FRAME, f"malformed digest or size: {cmd.digest!r} {cmd.size_bytes}")
    if cmd.digest in state.artifacts:
        return DUPLICATE
    state.artifacts[cmd.digest] = cmd.size_bytes
    state.version += 1
    return ACCEPTED


def _group_finished(state: State, cmd: c.GroupFinished, fx: Fx) -> Outcome:
    if cmd.worker_id not in state.workers:
        return _unknown_worker(cmd.worker_id)
    assignment = state.assignments.get(cmd.assignment_id)
    if assignment is None:
        return rejected(Rejection.UNKNOWN_ASSIGNMENT, f"assignment {cmd.assignment_id} does not exist")
    if assignment.worker_id != cmd.worker_id:
        return rejected(Rejection.NOT_OWNER, f"assignment {cmd.assignment_id} belongs to {assignment.worker_id}")
    if not assignment.authoritative:
        return DUPLICATE
    if cmd.unstarted and not any(state.attempts[tid].reported for tid in assignment.attempts):
        # Handed back before any of its cells started (pushed while the worker drained): nothing
        # ran, nothing was paid for, so its attempts count against nothing (a report of one would
        # say a cell ran: then the word is not taken).
        run = state.runs[assignment.run_id]
        for tid in assignment.attempts:
            run.cells[state.attempts[tid].cell_id].forgiven += 1
    _release(state, assignment, cmd.now_ms, "finished by the worker", fx)
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _run_paused(state: State, cmd: c.RunPaused, fx: Fx) -> Outcome:
    run = state.runs.get(cmd.run_id)
    if run is None:
        return _unknown_run(cmd.run_id)
    if run.paused:
        return DUPLICATE
    run.paused = True
    run.pause_reason = ""
    _liveness_moved(state)  # expiry freezes
    state.version += 1
    fx.append(NotifyRunState(run.run_id, True, run.blocked_reason))
    fx.append(Emit("run_paused", run.run_id, run.run_id))
    return ACCEPTED


def _run_recovered(state: State, cmd: c.RunRecovered, fx: Fx) -> Outcome:
    run = state.runs.get(cmd.run_id)
    if run is None:
        return _unknown_run(cmd.run_id)
    if not run.paused:
        return rejected(Rejection.RUN_NOT_PAUSED, f"run {cmd.run_id} is not paused")
    cap = run.cost_cap_usd if cmd.max_observed_cost_usd is None else cmd.max_observed_cost_usd
    if not (0 <= cap <= COST_USD_MAX):  # NaN too
        return rejected(Rejection.SPEC_INVALID, f"a spend cap must be between 0 and {COST_USD_MAX:g} dollars, not {cap}")
    if cap and run.observed_cost_usd >= cap:
        return rejected(Rejection.SPEND_CAP_REACHED,
                        f"run {cmd.run_id} has observed ${run.observed_cost_usd:.4f}, at or over the cap of "
                        f"${cap:.4f}: recover with a higher cap (fleetctl recover RUN --max-cost DOLLARS, 0: none)")
    run.cost_cap_usd = cap
    run.pause_reason = ""
    run.paused = False
    run.recovered_ms = cmd.now_ms
    _liveness_moved(state)  # expiry thaws
    state.version += 1
    # The pause froze expiry; a fresh liveness window keeps the outage from expiring everyone.
    for wid in state.workers:
        state.soft.last_heard_ms[wid] = max(state.soft.last_heard_ms.get(wid, 0), cmd.now_ms)
    fx.append(NotifyRunState(run.run_id, False, run.blocked_reason))
    fx.append(Emit("run_recovered", run.run_id, run.run_id))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _run_repaired(state: State, cmd: c.RunRepaired, fx: Fx) -> Outcome:
    run = state.runs.get(cmd.run_id)
    if run is None:
        return _unknown_run(cmd.run_id)
    if not run.blocked_reason:
        return rejected(Rejection.RUN_NOT_BLOCKED, f"run {cmd.run_id} is not blocked")
    if cmd.reason != run.blocked_reason:
        return rejected(Rejection.REPAIR_REASON_MISMATCH,
                        f"run {cmd.run_id} is blocked by {run.blocked_reason!r}, not {cmd.reason!r}")
    run.blocked_reason = ""
    state.version += 1
    fx.append(NotifyRunState(run.run_id, run.paused, ""))
    fx.append(Emit("run_repaired", run.run_id, run.run_id, cmd.reason))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _cell_retry_granted(state: State, cmd: c.CellRetryGranted, fx: Fx) -> Outcome:
    run = state.runs.get(cmd.run_id)
    if run is None:
        return _unknown_run(cmd.run_id)
    cell = run.cells.get(cmd.cell_id)
    if cell is None:
        return rejected(Rejection.UNKNOWN_CELL, f"run {cmd.run_id} has no cell {cmd.cell_id}")
    group = run.groups[cell.group_index]
    if cell.selected is not None:
        return rejected(Rejection.CELL_NOT_INCOMPLETE, f"cell {cmd.cell_id} already has a selected result")
    if group.status == GroupStatus.ASSIGNED and any(
            state.attempts[tid].cell_id == cell.cell_id for tid in state.assignments[group.assignment].attempts):
        return rejected(Rejection.CELL_NOT_INCOMPLETE, f"cell {cmd.cell_id} is running")
    # A cell out of attempts in a group that runs others (a bulk retry granted one of them first)
    # is granted too: the group waits again for it when this dispatch ends.
    if run.attempts_left(cell):
        return rejected(Rejection.CELL_NOT_INCOMPLETE, f"cell {cmd.cell_id} still has attempts left")
    cell.grants += 1
    state.version += 1
    if group.status == GroupStatus.SETTLED:
        _unsettle(state, run, group, cmd.now_ms)
    fx.append(Emit("cell_retry_granted", run.run_id, cell.cell_id))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _unsettle(state: State, run: RunState, group: GroupState, now: int) -> None:
    """A settled group has a cell to run again (a grant, attempts given back): it waits, ready."""
    was_settled = run.settled
    if was_settled:
        _liveness_moved(state)  # unsettled again: its timing and pause count once more
    _count_group(state, run, group, exhausted=-1)
    run.settled_groups -= 1
    if was_settled:
        providers.refresh_declared(state)  # its declared limits count again
    group.status = GroupStatus.WAITING
    group.eligible_ms = now
    heapq.heappush(run.ready, run.ready_key(group.index))


# --- quarantine of a broken worker ------------------------------------------------------------
# A worker that fails every attempt fast (a full disk, a missing tool, a broken container
# runtime) frees its slot at once and claims the next group: it would exhaust the whole queue.
# Its infrastructure failures in a row (not selectable, not throttled, no environment failure:
# that one blocks the run) are its streak; a selectable report ends it. A streak at the policy's
# bound while another worker has produced a selectable report since it began means the worker,
# not the run, is broken: the next tick quarantines it (a logged WorkerQuarantined), the
# streak's attempts are given back to their cells, and after the backoff (doubling per
# quarantine in a row) it is probed with work again. A streak no other worker contradicts is
# the run's problem, and its cells run out of attempts as before.

def _streak(state: State, worker: WorkerState, tid, cell: CellState, report, selectable: bool, now: int) -> None:
    if selectable:
        worker.last_selected_ms = now
        if worker.streak or worker.probation or worker.quarantines:
            worker.streak, worker.probation, worker.quarantines = [], False, 0
        return
    if report.throttled or report.environment_failure:
        return
    if worker.quarantined_until_ms:
        # A group it held when quarantined: known broken, given back at once where the subject
        # has succeeded elsewhere (a subject that fails everywhere is the run's problem).
        if not _offered_only(state, tid):
            _give_back_or_withhold(state, state.runs[state.attempts[tid].run_id], cell, tid, now)
        return
    if not worker.streak:
        worker.streak_started_ms = now
    worker.streak.append(tid)
    if _streaking(worker, _timing(state).quarantine_after_failures):
        _quarantine_watch(state)[worker.worker_id] = None


def _streaking(worker: WorkerState, bound: int) -> bool:
    return bool(bound) and bool(worker.streak) and (len(worker.streak) >= bound or worker.probation)


def _quarantine_watch(state: State) -> dict:
    """Workers each tick looks at: streaks at the bound, and quarantines (rebuilt when absent)."""
    watch = state.soft.quarantine_watch
    if watch is None:
        bound = _timing(state).quarantine_after_failures
        watch = state.soft.quarantine_watch = {w.worker_id: None for w in state.workers.values()
                                               if w.quarantined_until_ms or _streaking(w, bound)}
    return watch


def _own_failures(state: State, worker: WorkerState, since: int) -> list:
    """The streak's failures that are the worker's own: of a subject that has had a cell selected
    since `since` (by another worker: this one selected nothing since its streak began). A
    subject that fails on every worker (a broken subject, a provider down) is the run's problem."""
    own = []
    for tid in worker.streak:
        attempt = state.attempts[tid]
        run = state.runs[attempt.run_id]
        if run.subject_selected_ms.get(run.cells[attempt.cell_id].subject_id, -1) >= since:
            own.append(tid)
    return own


def _quarantine_due(state: State, worker: WorkerState, bound: int) -> bool:
    if worker.quarantined_until_ms or not _streaking(worker, bound):
        return False
    if worker.probation:  # shown broken before: one failure of its own quarantines it again
        return bool(_own_failures(state, worker, 0))
    return len(_own_failures(state, worker, worker.streak_started_ms)) >= bound


def _quarantine_ticks(state: State, now: int, fx: list, durable: list) -> None:
    watch = _quarantine_watch(state)
    if not watch:
        return
    bound = _timing(state).quarantine_after_failures
    for wid in list(watch):
        worker = state.workers[wid]
        if worker.quarantined_until_ms:
            if now < worker.quarantined_until_ms:
                continue
            t = _HANDLERS[c.WorkerProbed](state, c.WorkerProbed(now, wid))
        elif _quarantine_due(state, worker, bound):
            t = _HANDLERS[c.WorkerQuarantined](state, c.WorkerQuarantined(now, wid))
        else:
            if not _streaking(worker, bound):
                del watch[wid]
            continue
        fx.extend(t.effects)
        durable.extend(t.durable)


def _worker_quarantined(state: State, cmd: c.WorkerQuarantined, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.quarantined_until_ms or not worker.streak:
        return DUPLICATE
    timing = _timing(state)
    backoff = min(limits.QUARANTINE_BACKOFF_MAX_MS, timing.quarantine_backoff_ms << min(worker.quarantines, 20))
    own = _own_failures(state, worker, 0 if worker.probation else worker.streak_started_ms)
    if not own:
        return DUPLICATE
    last = state.attempts[own[-1]].report
    failures = len(own)
    worker.quarantine_reason = (f"{failures} infrastructure failures in a row of subjects that succeed on other "
                                f"workers; the last: {last.detail if last is not None else 'unknown'}")[:limits.ID_CHARS_MAX]
    worker.quarantined_until_ms = cmd.now_ms + max(backoff, 1)
    worker.quarantines += 1
    worker.probation = False
    # Given back: the streak's failures of every subject that has succeeded anywhere. A subject
    # that never has keeps its attempts counted (a broken one: they are the run's) until it
    # first succeeds, if it ever does (`_select`).
    given, withheld = _forgive(state, worker.streak, cmd.now_ms)
    worker.streak = []
    state.version += 1
    _refresh_free(state, worker)
    _quarantine_watch(state)[worker.worker_id] = None
    fx.append(Emit("worker_quarantined", None, worker.worker_id,
                   f"{worker.quarantine_reason}; {given} attempts given back to their cells; "
                   + (f"{withheld} more once their subjects first succeed; " if withheld else "")
                   + f"probed again in {max(backoff, 1)} ms"))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _forgive(state: State, streak: list, now: int) -> tuple[int, int]:
    """A quarantined worker's streak: each failure of a subject that has succeeded anywhere no
    longer counts against its cell (a group it had settled waits again), each of a subject that
    never has waits for that subject's first success. One known only from a restore's offers was
    forgiven when offered. Returns how many were given back and how many wait."""
    given = withheld = 0
    for tid in streak:
        if _offered_only(state, tid):
            continue
        attempt = state.attempts[tid]
        run = state.runs[attempt.run_id]
        if _give_back_or_withhold(state, run, run.cells[attempt.cell_id], tid, now):
            given += 1
        else:
            withheld += 1
    return given, withheld


def _give_back_or_withhold(state: State, run: RunState, cell: CellState, tid: AttemptId, now: int) -> bool:
    """A quarantined worker's failure `tid` of `cell`: given back if its subject has succeeded
    anywhere; otherwise withheld until the subject first succeeds (`_select`): a subject that
    fails everywhere is the run's problem, and its cells run out (seed 3364 with providers and
    ops,stall,blackhole: the subject's first success came 0.5 s after the quarantine, and the
    black hole's failure exhausted a cell)."""
    if run.subject_selected_ms.get(cell.subject_id, -1) >= 0:
        _give_back(state, run, cell, now)
        return True
    run.withheld.setdefault(cell.subject_id, []).append(tid)
    return False


def _give_back(state: State, run: RunState, cell: CellState, now: int) -> bool:
    """One of the cell's attempts no longer counts against it; a group it had settled (out of
    attempts, or, offered after a restore, lost at its worker's return) waits again. Returns
    whether it did (the caller fills the free slots)."""
    cell.forgiven += 1
    group = run.groups[cell.group_index]
    if group.status == GroupStatus.SETTLED and cell.selected is None and run.attempts_left(cell):
        _unsettle(state, run, group, now)
        return True
    return False


def _worker_probed(state: State, cmd: c.WorkerProbed, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if not worker.quarantined_until_ms:
        return DUPLICATE
    worker.quarantined_until_ms = 0
    worker.probation = True
    state.version += 1
    _refresh_free(state, worker)
    fx.append(Emit("worker_probed", None, worker.worker_id,
                   f"quarantine {worker.quarantines} over: on probation, its next infrastructure failure "
                   "quarantines it again"))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _worker_released(state: State, cmd: c.WorkerReleased, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if not (worker.quarantined_until_ms or worker.probation):
        return rejected(Rejection.WORKER_NOT_QUARANTINED, f"worker {cmd.worker_id} is not quarantined")
    worker.quarantined_until_ms = 0
    worker.probation = False
    worker.quarantines = 0
    worker.streak = []
    state.version += 1
    _refresh_free(state, worker)
    fx.append(Emit("worker_released", None, worker.worker_id, "quarantine lifted by an operator"))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _worker_degraded(state: State, cmd: c.WorkerDegraded, fx: Fx) -> Outcome:
    """A worker that cannot keep a result now (its disk is full) gets no new work until it says
    it can again; what it holds stays its own (it finishes those cells once it has room)."""
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if len(cmd.reason) > limits.ID_CHARS_MAX:
        return rejected(Rejection.MALFORMED_FRAME, f"a reason of {len(cmd.reason)} characters")
    if worker.degraded == cmd.reason:
        return DUPLICATE
    _set_degraded(worker, cmd.reason, fx)
    state.version += 1
    _refresh_free(state, worker)
    if not cmd.reason:
        _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _set_degraded(worker: WorkerState, reason: str, fx: Fx) -> None:
    """The worker's word of its disk (a heartbeat's, or its hello's), and the event that says it;
    the caller refreshes the free list."""
    worker.degraded = reason
    fx.append(Emit("worker_degraded", None, worker.worker_id, f"no new work: {reason}") if reason
              else Emit("worker_undegraded", None, worker.worker_id, "takes work again"))


def _worker_drained(state: State, cmd: c.WorkerDrained, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.status == WorkerStatus.GONE:
        return rejected(Rejection.WORKER_NOT_ACTIVE, f"worker {cmd.worker_id} is gone")
    if worker.draining:
        return DUPLICATE
    worker.draining = True
    state.version += 1
    _refresh_free(state, worker)
    fx.append(RequestDrain(worker.worker_id, "drained by an operator"))
    fx.append(Emit("worker_draining", None, worker.worker_id))
    return ACCEPTED


def _worker_gone(state: State, cmd: c.WorkerGone, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.status == WorkerStatus.GONE:
        return DUPLICATE
    for aid in list(worker.assignments):
        _release(state, state.assignments[aid], cmd.now_ms, "worker gone", fx)
    _set_status(state, worker, WorkerStatus.GONE)
    worker.left_ms = cmd.now_ms
    state.soft.stream_ended_ms.pop(worker.worker_id, None)
    state.version += 1
    fx.append(Emit("worker_gone", None, worker.worker_id))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _coordinator_recovered(state: State, cmd: c.CoordinatorRecovered, fx: Fx) -> Outcome:
    timing = _timing(state)
    for worker in state.workers.values():
        if worker.status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED, WorkerStatus.RECONCILING):
            _set_status(state, worker, WorkerStatus.RECONCILING)
        # Expiry fires `recovery_grace_ms` from now unless the worker says hello first.
        state.soft.last_heard_ms[worker.worker_id] = cmd.now_ms + timing.recovery_grace_ms - timing.expire_after_ms
    state.recovered_ms = cmd.now_ms
    state.recovery_grace_ms = timing.recovery_grace_ms
    _liveness_moved(state)  # every worker's liveness was stamped anew above
    state.version += 1
    fx.append(Emit("coordinator_recovered", None, "", f"{len(state.workers)} workers to reconcile"))
    return ACCEPTED


def _coordinator_stalled(state: State, cmd: c.CoordinatorStalled, fx: Fx) -> Outcome:
    """The coordinator's own outage (a frozen VM, a blocked loop): as after a restart, every
    worker is given the recovery grace to be heard from again, deadlines wait it out, and a
    stream that ended meanwhile is silence (with that grace), not a worker that left."""
    if cmd.stalled_ms < 0:
        return rejected(Rejection.MALFORMED_FRAME, f"a stall of {cmd.stalled_ms} ms")
    timing = _timing(state)
    fresh = max(cmd.now_ms, cmd.now_ms + timing.recovery_grace_ms - timing.expire_after_ms)
    last_heard = state.soft.last_heard_ms
    for worker in state.workers.values():
        if worker.status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED, WorkerStatus.RECONCILING):
            if last_heard.get(worker.worker_id, 0) < fresh:
                last_heard[worker.worker_id] = fresh
    state.soft.stream_ended_ms.clear()
    state.soft.stall_grace_until_ms = cmd.now_ms + timing.recovery_grace_ms
    if state.restore_hold_until_ms > cmd.now_ms - cmd.stalled_ms:
        # Stalled during a restore's hold: the offers it was waiting for waited too.
        state.restore_hold_until_ms = max(state.restore_hold_until_ms, cmd.now_ms + (
            timing.recovery_grace_ms if _restore_waits_for(state) else limits.RESTORE_OFFER_WINDOW_MS))
    state.recovered_ms = cmd.now_ms
    state.recovery_grace_ms = timing.recovery_grace_ms
    _liveness_moved(state)
    state.version += 1
    fx.append(Emit("coordinator_stalled", None, "",
                   f"the coordinator was stalled {cmd.stalled_ms} ms: every worker and deadline gets "
                   f"the {timing.recovery_grace_ms} ms recovery grace, and nobody is expired for the silence"))
    return ACCEPTED


def _worker_suspected(state: State, cmd: c.WorkerSuspected, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.status != WorkerStatus.ACTIVE:
        return DUPLICATE
    _set_status(state, worker, WorkerStatus.SUSPECTED)
    state.version += 1
    fx.append(Emit("worker_suspected", None, worker.worker_id))
    return ACCEPTED


def _worker_resumed(state: State, cmd: c.WorkerResumed, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.status != WorkerStatus.SUSPECTED:
        return DUPLICATE
    _set_status(state, worker, WorkerStatus.ACTIVE)
    state.version += 1
    fx.append(Emit("worker_resumed", None, worker.worker_id))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _worker_expired(state: State, cmd: c.WorkerExpired, fx: Fx) -> Outcome:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.status not in (WorkerStatus.SUSPECTED, WorkerStatus.RECONCILING):
        return DUPLICATE
    _expire(state, worker, cmd.now_ms, "worker expired", fx)
    fx.append(Emit("worker_expired", None, worker.worker_id))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _expire(state: State, worker: WorkerState, now: int, reason: str, fx: Fx) -> None:
    """Its groups go back (each revoked with `reason`), and it is expired from `now`."""
    for aid in list(worker.assignments):
        _release(state, state.assignments[aid], now, reason, fx)
        fx.append(RevokeAssignment(worker.worker_id, aid, reason))
    _set_status(state, worker, WorkerStatus.EXPIRED)
    worker.left_ms = now
    state.soft.stream_ended_ms.pop(worker.worker_id, None)
    state.version += 1


def _worker_lost(state: State, cmd: c.WorkerLost, fx: Fx) -> Outcome:
    """Expiry, sooner: the stream ended and the worker did not come back within the grace."""
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return _unknown_worker(cmd.worker_id)
    if worker.status != WorkerStatus.SUSPECTED:
        return DUPLICATE
    _expire(state, worker, cmd.now_ms, "worker lost: its stream ended and it did not come back", fx)
    fx.append(Emit("worker_lost", None, worker.worker_id, "stream ended, not back within the grace"))
    _fill(state, cmd.now_ms, fx)
    return ACCEPTED


def _time_advanced(state: State, cmd: c.TimeAdvanced, fx: Fx) -> Outcome:
    now = cmd.now_ms
    # While no deadline can release anything (the coordinator's grace, or every run with an
    # assignment held), the heap is left alone: popping and pushing back every overdue entry
    # at each tick cost 60 ms a tick with 40,000 assignments after a restart. The same entries
    # are released, in the same order, once one can be.
    if state.deadlines and state.deadlines[0][0] <= now and _deadlines_can_release(state, now):
        deferred: list[tuple[int, AssignmentId]] = []
        while state.deadlines and state.deadlines[0][0] <= now:
            entry = heapq.heappop(state.deadlines)
            assignment = state.assignments[entry[1]]
            if not assignment.authoritative:
                continue
            if _deadlines_held(state.runs[assignment.run_id], now):
                deferred.append(entry)
                continue
            _release(state, assignment, now, "group deadline exceeded", fx)
            fx.append(RevokeAssignment(assignment.worker_id, assignment.assignment_id, "group deadline exceeded"))
        for entry in deferred:
            heapq.heappush(state.deadlines, entry)
    # Popping stale entries changes no decision; only releases and dispatches bump the version.
    _fill(state, now, fx)
    return ACCEPTED


def _deadlines_held(run: RunState, now: int) -> bool:
    """A run's deadlines wait while it is paused or in its own recovery grace."""
    return run.paused or (run.recovered_ms is not None and now < run.recovered_ms + run.policy.recovery_grace_ms)


def _deadlines_can_release(state: State, now: int) -> bool:
    """Whether a deadline can release an assignment now: none during the coordinator's recovery
    grace, and only in a run that holds an assignment (`active > 0`) and is not held."""
    if now < state.recovered_ms + state.recovery_grace_ms:
        return False
    return any(run.active and not _deadlines_held(run, now) for run in state.runs.values())


# --- soft command handlers --------------------------------------------------------------------

def _heartbeat(state: State, cmd: c.HeartbeatReceived) -> Transition:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return Transition(_unknown_worker(cmd.worker_id))
    if worker.status in (WorkerStatus.EXPIRED, WorkerStatus.GONE, WorkerStatus.RECONCILING):
        return Transition(rejected(Rejection.WORKER_NOT_ACTIVE,
                                   f"worker {cmd.worker_id} is {worker.status.name.lower()}: register again"))
    if worker.worker_id in state.soft.stream_ended_ms:
        # Only a new hello ends the grace: a heartbeat now was read from the ended stream
        # before it ended (heartbeats reach the core coalesced, a little late).
        return Transition(ACCEPTED)
    _heard(state.soft, worker.worker_id, cmd.now_ms)
    fx: Fx = []
    owned = dict.fromkeys(cmd.owned)
    _push_unsaid(state, worker, owned, fx)
    for aid in owned:
        if aid not in worker.assignments:
            fx.append(RevokeAssignment(worker.worker_id, aid, _revoke_reason(state, aid, worker.worker_id)))
    for run in state.runs.values():
        if run.run_id not in worker.fits and _to_measure(state, run):
            fx.append(_offer(run, worker))  # not measured yet: the worker answers once per stream
    durable: tuple = ()
    # What it says of its disk first: a suspected worker's resume fills its free slots, and one
    # whose disk is full must get none (its cells could not start while others' slots wait).
    if cmd.degraded[:limits.ID_CHARS_MAX] != worker.degraded:
        t = _HANDLERS[c.WorkerDegraded](state, c.WorkerDegraded(cmd.now_ms, worker.worker_id,
                                                                cmd.degraded[:limits.ID_CHARS_MAX]))
        fx.extend(t.effects)
        durable = t.durable
    if worker.status == WorkerStatus.SUSPECTED:
        resumed = c.WorkerResumed(cmd.now_ms, worker.worker_id)
        t = _HANDLERS[c.WorkerResumed](state, resumed)
        fx.extend(t.effects)
        durable += t.durable
    return Transition(ACCEPTED, tuple(fx), durable)


def _liveness_moved(state: State) -> None:
    """A liveness decision may be due earlier than the last walk found: the next tick walks."""
    state.soft.tick_due_ms = 0


def _heard(soft: Soft, wid: WorkerId, now: int) -> None:
    """The worker was heard from at `now` (a frame of its own, or its stream vouched for)."""
    if soft.last_heard_ms.get(wid, 0) > now:
        soft.tick_due_ms = 0  # heard "in the future" (a recovery's grace): due earlier now
    soft.last_heard_ms[wid] = now
    soft.contact_ms[wid] = now


def _push_unsaid(state: State, worker: WorkerState, owned: dict, fx: Fx) -> None:
    """Push again each group the worker holds here but did not say it owns: the push was
    lost, or is still in flight (the worker ignores repeats)."""
    for aid in worker.assignments:
        if aid not in owned:
            fx.append(_push_for(state, state.assignments[aid]))


def _streams_alive(state: State, cmd: c.StreamsAlive) -> Transition:
    """Sessions whose stream is up count as heard from, but only for a worker the core gives
    no group: a worker that holds one heartbeats every interval itself, so its silence means
    what it always did (suspicion after `suspect_after_ms`) whatever the transport says. So
    the transport vouches for idle workers only, and a silently dead idle worker is noticed
    when its stream ends (limits.TRANSPORT_DEAD_AFTER_MS). A worker that has groups here but
    did not say so (a push lost or still in flight) is pushed them again, as on a heartbeat;
    a suspected idle worker resumes; one that must register again has its session ended."""
    now = cmd.now_ms
    soft = state.soft
    ended = soft.stream_ended_ms
    workers = state.workers
    fx: Fx = []
    durable: list = []
    for wid, owned in cmd.sessions:
        worker = workers.get(wid)
        if worker is None:
            fx.append(EndSession(wid, _unknown_worker(wid).detail))
            continue
        status = worker.status
        if status != WorkerStatus.ACTIVE and status != WorkerStatus.SUSPECTED:
            fx.append(EndSession(wid, f"worker {wid} is {status.name.lower()}: register again"))
            continue
        if wid in ended:
            continue  # an ended stream is not vouched for (a new hello ends the grace)
        if worker.assignments:
            # Not vouched for: it speaks for itself. What it has not heard of goes again.
            _push_unsaid(state, worker, dict.fromkeys(owned), fx)
            continue
        _heard(soft, wid, now)
        if status == WorkerStatus.SUSPECTED:
            t = _HANDLERS[c.WorkerResumed](state, c.WorkerResumed(now, wid))
            fx.extend(t.effects)
            durable.extend(t.durable)
    return Transition(ACCEPTED, tuple(fx), tuple(durable))


def _disconnected(state: State, cmd: c.WorkerDisconnected) -> Transition:
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return Transition(_unknown_worker(cmd.worker_id))
    if worker.status != WorkerStatus.ACTIVE:
        return Transition(ACCEPTED)
    # A worker without a stream cannot receive a push: give it no new work until it is back.
    return _HANDLERS[c.WorkerSuspected](state, c.WorkerSuspected(cmd.now_ms, worker.worker_id))


def _stream_ended(state: State, cmd: c.WorkerStreamEnded) -> Transition:
    """The worker's stream ended, not cut by us. If a frame came through it just before (so
    the keepalive did not end it after a silence: limits.STREAM_END_QUIET_MS_MAX), its side
    closed or reset it, and the grace starts: no new work meanwhile, and its groups go back
    when the grace ends unless it says hello again. Otherwise: as silence."""
    worker = state.workers.get(cmd.worker_id)
    if worker is None:
        return Transition(_unknown_worker(cmd.worker_id))
    if worker.status != WorkerStatus.ACTIVE:
        return Transition(ACCEPTED)
    timing = _timing(state)
    # Inside the grace after a stall a stream end is silence: streams cut while the coordinator
    # was not itself say nothing about their workers. (After a restart, a worker that said hello
    # again and then dies is gone as ever.)
    own_grace = cmd.now_ms < state.soft.stall_grace_until_ms
    if (timing.stream_end_grace_ms > 0 and 0 <= cmd.quiet_ms < limits.STREAM_END_QUIET_MS_MAX
            and not own_grace):
        state.soft.stream_ended_ms[worker.worker_id] = cmd.now_ms
        _liveness_moved(state)
    return _HANDLERS[c.WorkerSuspected](state, c.WorkerSuspected(cmd.now_ms, worker.worker_id))


def _clock_ticked(state: State, cmd: c.ClockTicked) -> Transition:
    now = cmd.now_ms
    timing = _timing(state)
    fx: list = []
    durable: list = []
    soft = state.soft
    if now >= soft.tick_due_ms:
        decided = len(durable)
        _walk_workers(state, timing, now, fx, durable)
        if len(durable) != decided:
            # A decision may have moved what earlier workers' bounds rest on (a run settled by
            # an expiry, say): the bound is trusted only from a walk that decided nothing.
            _liveness_moved(state)
    _quarantine_ticks(state, now, fx, durable)
    for run in state.runs.values():
        if run.pin is not None and not run.settled and not _pin_release_problem(state, run):
            t = _HANDLERS[c.RunPinReleased](state, c.RunPinReleased(now, run.run_id, run.pinned_by))
            fx.extend(t.effects)
            durable.extend(t.durable)
    t = _HANDLERS[c.TimeAdvanced](state, c.TimeAdvanced(now))
    fx.extend(t.effects)
    durable.extend(t.durable)
    return Transition(ACCEPTED, tuple(fx), tuple(durable))


def _walk_workers(state: State, timing: Policy, now: int, fx: list, durable: list) -> None:
    """Suspicion, loss and expiry of every worker, in `state.workers` order; notes in
    `soft.tick_due_ms` the earliest time the next one could be due (a walk before it would
    decide nothing: each decision below needs `now` at or past its worker's due time)."""
    # An operator's pause is for the coordinator's own outage; a spend cap's is not.
    expiry_frozen = any(r.paused and not r.pause_reason and not r.settled for r in state.runs.values())
    last_heard = state.soft.last_heard_ms
    ended_ms = state.soft.stream_ended_ms
    suspect_after_ms = timing.suspect_after_ms
    expire_after_ms = timing.expire_after_ms
    due = 1 << 62
    for worker in list(state.workers.values()):
        status = worker.status
        if status == WorkerStatus.EXPIRED or status == WorkerStatus.GONE:
            continue  # nothing below applies to them: a walk of 10,000 workers per tick is the cost
        heard = last_heard.get(worker.worker_id, worker.registered_ms)
        silent_ms = now - heard
        if status == WorkerStatus.ACTIVE and silent_ms < suspect_after_ms:
            if heard + suspect_after_ms < due:
                due = heard + suspect_after_ms
            continue  # neither suspected now, nor suspected or reconciling below
        if worker.status == WorkerStatus.ACTIVE and silent_ms >= suspect_after_ms:
            t = _HANDLERS[c.WorkerSuspected](state, c.WorkerSuspected(now, worker.worker_id))
            fx.extend(t.effects)
            durable.extend(t.durable)
        ended = ended_ms.get(worker.worker_id)
        if (ended is not None and worker.status == WorkerStatus.SUSPECTED
                and now - ended >= timing.stream_end_grace_ms and not expiry_frozen):
            t = _HANDLERS[c.WorkerLost](state, c.WorkerLost(now, worker.worker_id))
            fx.extend(t.effects)
            durable.extend(t.durable)
        if (worker.status in (WorkerStatus.SUSPECTED, WorkerStatus.RECONCILING)
                and silent_ms >= expire_after_ms and not expiry_frozen):
            t = _HANDLERS[c.WorkerExpired](state, c.WorkerExpired(now, worker.worker_id))
            fx.extend(t.effects)
            durable.extend(t.durable)
        status = worker.status
        if status == WorkerStatus.ACTIVE:  # cannot be after the above; kept for the bound's sake
            due = min(due, heard + suspect_after_ms)
        elif status == WorkerStatus.SUSPECTED or status == WorkerStatus.RECONCILING:
            due = min(due, heard + expire_after_ms)
            ended = ended_ms.get(worker.worker_id)
            if ended is not None and status == WorkerStatus.SUSPECTED:
                due = min(due, ended + timing.stream_end_grace_ms)
    state.soft.tick_due_ms = due


# --- shared mechanics -------------------------------------------------------------------------

def _unknown_worker(worker_id: WorkerId) -> Outcome:
    return rejected(Rejection.UNKNOWN_WORKER, f"worker {worker_id} has not registered")


def _unknown_run(run_id: str) -> Outcome:
    return rejected(Rejection.UNKNOWN_RUN, f"run {run_id} does not exist")


def liveness_policy(state: State) -> Policy:
    """Liveness thresholds come from the oldest run that still has work."""
    return _timing(state)


def _timing(state: State) -> Policy:
    for run in state.runs.values():
        if not run.settled:
            return run.policy
    return DEFAULT_POLICY


def _set_status(state: State, worker: WorkerState, status: WorkerStatus) -> None:
    if (worker.status == WorkerStatus.ACTIVE) != (status == WorkerStatus.ACTIVE):
        state.slots_active += worker.slots if status == WorkerStatus.ACTIVE else -worker.slots
    worker.status = status
    _liveness_moved(state)
    _refresh_free(state, worker)


def _refresh_free(state: State, worker: WorkerState) -> None:
    free = worker.free
    listed = worker.worker_id in state.free_workers
    if free and not listed:
        _free_add(state, worker)
    elif listed and not free:
        _free_remove(state, worker.worker_id)


# The free list's index (state.Soft): every change to `free_workers` goes through these two.

def _free_add(state: State, worker: WorkerState) -> None:
    soft = state.soft
    state.free_workers[worker.worker_id] = None
    if len(soft.free_stamp) + 1 != len(state.free_workers):
        _free_index_rebuild(state)
        return
    stamp = soft.free_stamp[worker.worker_id] = soft.free_stamp_next
    soft.free_stamp_next += 1
    _serving_add(state, worker, stamp)


def _free_remove(state: State, worker_id: WorkerId) -> None:
    del state.free_workers[worker_id]
    state.soft.free_stamp.pop(worker_id, None)


def _serving_add(state: State, worker: WorkerState, stamp: int) -> None:
    """A free worker may have begun to serve runs: into the heap of each run it serves."""
    for run_id, heap in list(state.soft.serving.items()):
        run = state.runs[run_id]
        if _serves(run, worker):
            if len(heap) > 2 * len(state.free_workers) + 64:
                del state.soft.serving[run_id]  # mostly stale: rebuilt when next needed
            else:
                heapq.heappush(heap, (stamp, worker.worker_id))


def _free_index_rebuild(state: State) -> None:
    soft = state.soft
    soft.free_stamp = {wid: i for i, wid in enumerate(state.free_workers)}
    soft.free_stamp_next = len(soft.free_stamp)
    soft.serving = {}


def _release(state: State, assignment: AssignmentState, now: int, reason: str, fx: Fx) -> None:
    """End an authoritative assignment: its unreported attempts are lost, its group waits for
    a retry or settles, and the worker's slot frees."""
    assert assignment.authoritative
    assignment.authoritative = False
    assignment.ended_ms = now
    assignment.ended_reason = reason
    run = state.runs[assignment.run_id]
    group = run.groups[assignment.group_index]
    for tid in assignment.attempts:
        attempt = state.attempts[tid]
        if not attempt.reported:
            attempt.lost = True
            providers.stopped(state, run, group, attempt.cell_id)
    run.active -= 1
    assert group.assignment == assignment.assignment_id
    _count_group(state, run, group, running=-1)
    group.assignment = None
    worker = state.workers[assignment.worker_id]
    del worker.assignments[assignment.assignment_id]
    _refresh_free(state, worker)
    _settle_or_wait(state, run, group, now, fx)
    state.version += 1
    if reason != "completed" and reason != "finished by the worker":
        fx.append(Emit("assignment_superseded", run.run_id, assignment.assignment_id, reason))


def _count_group(state: State, run: RunState, group: GroupState, *, running: int = 0,
                 exhausted: int = 0) -> None:
    """A group's unselected cells enter (+1) or leave (-1) the running or exhausted count."""
    counts = state.soft.cell_counts.get(run.run_id)
    if counts is not None:
        unselected = sum(1 for cid in group.cells if run.cells[cid].selected is None)
        counts.running += running * unselected
        counts.exhausted += exhausted * unselected


def _pending_cells(run: RunState, group: GroupState) -> list[CellState]:
    out = []
    cells = run.cells
    attempts_max = run.policy.max_attempts_per_cell
    throttled_max = run.policy.max_throttled_attempts_per_cell
    for cid in group.cells:
        cell = cells[cid]  # run.attempts_left, inline: once per cell of every dispatch and release
        if (cell.selected is None and len(cell.attempts) - cell.throttled - cell.forgiven < attempts_max + cell.grants
                and cell.throttled < throttled_max + cell.grants):
            out.append(cell)
    return out


def _settle_or_wait(state: State, run: RunState, group: GroupState, now: int, fx: Fx) -> None:
    pending = _pending_cells(run, group)
    if not pending:
        group.status = GroupStatus.SETTLED
        run.settled_groups += 1
        if run.settled:
            _liveness_moved(state)  # the timing and the expiry freeze follow the unsettled runs
            providers.refresh_declared(state)  # its declared limits no longer count
        _count_group(state, run, group, exhausted=1)
        for cid in group.cells:
            cell = run.cells[cid]
            if cell.selected is None:
                fx.append(Emit("cell_exhausted", run.run_id, cid, _exhausted_detail(run, cell)))
        if run.settled:
            fx.append(Emit("run_settled", run.run_id, run.run_id))
        return
    group.status = GroupStatus.WAITING
    failed = max(counted_attempts(cell) for cell in pending)
    group.eligible_ms = now + run.policy.backoff_ms(failed)
    for cell in pending:  # a throttled cell waits out its provider's retry-after
        last = state.attempts[cell.attempts[-1]] if cell.attempts else None
        if last is not None and (report := last.report) is not None and report.throttled:
            group.eligible_ms = max(group.eligible_ms, last.reported_ms + providers.retry_after_ms(report))
    if group.eligible_ms <= now:
        heapq.heappush(run.ready, run.ready_key(group.index))
    else:
        heapq.heappush(run.backoff, (group.eligible_ms, group.index))


def _exhausted_detail(run: RunState, cell: CellState) -> str:
    if cell.throttled >= run.max_throttled(cell):
        return f"provider throttled: {cell.throttled} throttled attempts, the bound of maxThrottledAttemptsPerCell"
    return f"{counted_attempts(cell)} attempts, none selectable"


def _fill(state: State, now: int, fx: Fx) -> None:
    """Dispatch waiting groups onto free slots, run by run in submission order; none while a
    restore's hold lasts (the workers are offering what they kept)."""
    if not state.free_workers or now < state.restore_hold_until_ms:
        return
    for run in state.runs.values():
        if run.settled or run.paused or run.blocked_reason:
            continue
        while run.backoff and run.backoff[0][0] <= now:
            heapq.heappush(run.ready, run.ready_key(heapq.heappop(run.backoff)[1]))
            state.version += 1
        cap = run.spec.max_concurrent_groups
        if run.subject_providers and _limited(state, run):
            _fill_limited(state, run, cap, now, fx)
        else:
            while run.ready and run.active < cap:
                worker = _pick_worker(state, run)
                if worker is None:
                    break
                _dispatch(state, run, run.groups[run.ready_group(heapq.heappop(run.ready))], worker, now, fx)
        if not state.free_workers:
            return


def _limited(state: State, run: RunState) -> bool:
    """Whether a provider of the run's subjects has a limit (the unnamed default has none until
    it throttles): only then can a group have to wait for one."""
    providers_of = state.providers
    for name in run.provider_names:
        if providers_of[name].effective:
            return True
    return False


def _fill_limited(state: State, run: RunState, cap: int, now: int, fx: Fx) -> None:
    """`_fill` for a run whose subjects' providers may be at their limits: a group that does not
    fit waits, and the next that fits goes first; at most PROVIDER_PASSES_MAX are passed over in
    one fill, and none is looked at while every provider of the run is full."""
    passed: list[int] = []
    names = run.provider_names
    while run.ready and run.active < cap and len(passed) < PROVIDER_PASSES_MAX:
        if all(0 < (p := state.providers[n]).effective <= p.running for n in names):
            break
        worker = _pick_worker(state, run)
        if worker is None:
            break
        key = heapq.heappop(run.ready)
        group = run.groups[run.ready_group(key)]
        if providers.blocking(state, providers.demand(run, group, _pending_cells(run, group))):
            passed.append(key)
            continue
        _dispatch(state, run, group, worker, now, fx)
    for key in passed:
        heapq.heappush(run.ready, key)


def _pick_worker(state: State, run: RunState) -> WorkerState | None:
    """The first free worker, in `free_workers` order, that serves the run and fits its
    reservation. Found through the run's heap of (stamp, worker) (state.Soft), whose entries
    are checked here: one whose stamp is not its worker's current one, or whose worker no
    longer serves, is dropped (a worker that begins to serve is pushed again)."""
    soft = state.soft
    if len(soft.free_stamp) != len(state.free_workers):
        _free_index_rebuild(state)  # after a snapshot was loaded: the index is not in it
    heap = soft.serving.get(run.run_id)
    if heap is None:
        heap = soft.serving[run.run_id] = [(soft.free_stamp[wid], wid) for wid in state.free_workers
                                           if _serves(run, state.workers[wid])]  # ascending: a heap
    unfit = []
    found = None
    while heap:
        stamp, wid = heap[0]
        worker = state.workers[wid]
        if soft.free_stamp.get(wid) != stamp or not _serves(run, worker):
            heapq.heappop(heap)
        elif not _fits(run.policy, worker.slots, worker.cpu_millis, worker.memory_mb):
            unfit.append(heapq.heappop(heap))
        else:
            found = worker
            break
    for entry in unfit:
        heapq.heappush(heap, entry)
    return found


def _dispatch(state: State, run: RunState, group: GroupState, worker: WorkerState, now: int, fx: Fx) -> None:
    pending = _pending_cells(run, group)
    assert pending and group.status == GroupStatus.WAITING, f"dispatch of {group.group_id} with nothing to run"
    if len(run.provider_names) == 1:  # one provider for every subject: the demand is the count
        providers.started(state, {run.provider_names[0]: len(pending)})
    elif run.subject_providers:
        providers.started(state, providers.demand(run, group, pending))
    if run.pin is None:
        _pin(state, run, worker, now, fx)
    group.generation += 1
    aid = assignment_id_for(run.run_id, group.group_id, group.generation, state.epoch)
    task_id, repetition = run.spec.group_key(group.index)
    cells: list[CellDispatch] = []
    for cell in pending:
        tid = attempt_id_for(run.run_id, cell.cell_id, len(cell.attempts) + 1, state.epoch)
        assert tid not in state.attempts, f"attempt id {tid} reused"
        run.dispatches += 1
        state.attempts[tid] = AttemptState(tid, run.run_id, cell.cell_id, aid, group.generation,
                                           worker.worker_id, run.dispatches, now)
        if not cell.attempts and (counts := state.soft.cell_counts.get(run.run_id)) is not None:
            counts.tried += 1
        cell.attempts.append(tid)
        cells.append(CellDispatch(cell.cell_id, tid, task_id, repetition, cell.subject_id, run.dispatches))
    deadline = now + run.group_deadline_ms
    state.assignments[aid] = AssignmentState(aid, run.run_id, group.index, group.generation, worker.worker_id,
                                             tuple(d.attempt_id for d in cells), now, deadline,
                                             unreported=len(cells))
    group.status = GroupStatus.ASSIGNED
    group.assignment = aid
    _count_group(state, run, group, running=1)
    worker.assignments[aid] = None
    run.active += 1
    if run.active > run.peak_active:
        run.peak_active = run.active
    heapq.heappush(state.deadlines, (deadline, aid))
    # Round robin: the worker goes to the back of the free list, or leaves it when full.
    _free_remove(state, worker.worker_id)
    _refresh_free(state, worker)
    state.version += 1
    fx.append(PushAssignment(worker.worker_id, run.run_id, aid, group.generation, group.group_id,
                             tuple(cells), deadline))


def _push_for(state: State, assignment: AssignmentState) -> PushAssignment:
    run = state.runs[assignment.run_id]
    task_id, repetition = run.spec.group_key(assignment.group_index)
    cells = []
    for tid in assignment.attempts:
        attempt = state.attempts[tid]
        cell = run.cells[attempt.cell_id]
        cells.append(CellDispatch(cell.cell_id, tid, task_id, repetition, cell.subject_id, attempt.dispatch_order))
    return PushAssignment(assignment.worker_id, run.run_id, assignment.assignment_id, assignment.generation,
                          run.groups[assignment.group_index].group_id, tuple(cells), assignment.deadline_ms)


def push_for(state: State, assignment_id: AssignmentId) -> PushAssignment:
    """The push of an authoritative assignment, rebuilt from state (for re-sending)."""
    return _push_for(state, state.assignments[assignment_id])


_HANDLERS: dict[type, Callable[[State, object], Transition]] = {
    c.RunSubmitted: _run_submitted_step,
    c.WorkerRegistered: _durable(_worker_registered),
    c.CellReported: _durable(_cell_reported),
    c.ArtifactStored: _durable(_artifact_stored),
    c.GroupFinished: _durable(_group_finished),
    c.RunPaused: _durable(_run_paused),
    c.RunRecovered: _durable(_run_recovered),
    c.RunRepaired: _durable(_run_repaired),
    c.CellRetryGranted: _durable(_cell_retry_granted),
    c.WorkerDrained: _durable(_worker_drained),
    c.WorkerGone: _durable(_worker_gone),
    c.CoordinatorRecovered: _durable(_coordinator_recovered),
    c.CoordinatorStalled: _durable(_coordinator_stalled),
    c.WorkerQuarantined: _durable(_worker_quarantined),
    c.WorkerProbed: _durable(_worker_probed),
    c.WorkerReleased: _durable(_worker_released),
    c.CoordinatorRestored: _durable(_coordinator_restored),
    c.ResultOffered: _durable(_result_offered),
    c.WorkerDegraded: _durable(_worker_degraded),
    c.WorkerSuspected: _durable(_worker_suspected),
    c.WorkerResumed: _durable(_worker_resumed),
    c.WorkerExpired: _durable(_worker_expired),
    c.TimeAdvanced: _durable(_time_advanced),
    c.RunEnvironmentMeasured: _durable(_run_environment_measured),
    c.RunPinReleased: _durable(_run_pin_released),
    c.WorkerLost: _durable(_worker_lost),
    c.WorkerStreamEnded: _stream_ended,
    c.HeartbeatReceived: _heartbeat,
    c.StreamsAlive: _streams_alive,
    c.WorkerDisconnected: _disconnected,
    c.ClockTicked: _clock_ticked,
}
