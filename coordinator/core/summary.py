"""The run summary: selected results apart from everything observed, and honest gaps.

Rules. A cell is either selected (one report, with its provenance) or incomplete with a
reason; it is never given a score it did not earn. Observed cost sums every report of the
run, late ones included, and is only the known subtotal: `usage_complete` is false as soon
as any dispatched attempt has no complete usage report. A blocked or exhausted run says so
in `state` instead of looking merely unsettled. Work paid for twice is counted, never hidden: a
cell whose reports show the subject ran more than once (`executed`; late reports too) counts as
executed more than once, and the known cost of every such execution but the one that counts
(the selected attempt, else the first execution) is its extra execution cost.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.evidence import Execution, Report, Usage
from common.ids import AssignmentId, AttemptId, CellId, RunId, SubjectId, TaskId, WorkerId
from coordinator.core.reportpack import Glance
from coordinator.core.state import CellCounts, GroupState, GroupStatus, RunState, State


@dataclass(frozen=True, slots=True)
class SelectedResult:
    cell_id: CellId
    task_id: TaskId
    repetition: int
    subject_id: SubjectId
    score: float
    status: str
    attempt_id: AttemptId
    worker_id: WorkerId
    assignment_id: AssignmentId
    generation: int
    dispatch_order: int
    attempts: int
    cost_usd: float | None
    usage: str
    started_ms: int
    finished_ms: int
    executions: int = 1  # attempts whose reports show the subject ran (see `executed`)
    extra_execution_cost_usd: float = 0.0  # the known cost of those beyond the selected one


@dataclass(frozen=True, slots=True)
class IncompleteCell:
    cell_id: CellId
    task_id: TaskId
    repetition: int
    subject_id: SubjectId
    reason: str  # exhausted | provider_throttled | blocked | paused | running | retry_pending | not_yet_run
    attempts: int
    detail: str  # what the last report said, if any
    executions: int = 0
    extra_execution_cost_usd: float = 0.0  # the known cost of the executions beyond the first
    last_attempt_id: AttemptId | None = None  # the provenance of its last attempt, if any
    last_worker_id: WorkerId | None = None


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: RunId
    state: str  # running | paused | blocked | complete | incomplete
    blocked_reason: str
    cells_total: int
    selected: tuple[SelectedResult, ...]
    incomplete: tuple[IncompleteCell, ...]
    observed_cost_usd: float
    selected_cost_usd: float
    usage_complete: bool
    attempts_dispatched: int
    executed_more_than_once: int  # cells whose subject ran in two or more attempts
    extra_execution_cost_usd: float  # the known cost of those extra executions
    late_reports: int
    lost_attempts: int
    peak_concurrent_groups: int
    slots_offered: int
    max_concurrent_groups: int
    groups_waiting: int
    groups_assigned: int
    groups_settled: int


@dataclass(slots=True)
class Tally:
    """What a summary sums over cells, kept apart so a listing in pages can carry it from
    page to page and end with the same figures as one walk (the same additions, in order)."""

    selected: int = 0
    incomplete: int = 0
    observed_cost_usd: float = 0.0
    selected_cost_usd: float = 0.0
    usage_complete: bool = True
    dispatched: int = 0
    lost: int = 0
    # Not carried by page tokens (coordinator/paging.py LAYOUT): a listing carries them per cell
    # (CellResult.executions, extra_execution_cost_usd) and its reader sums them.
    executed_more_than_once: int = 0
    extra_execution_cost_usd: float = 0.0


def executed(r: Report | Glance | None) -> bool:
    """Whether a report shows the subject ran (and so was paid for): completed, failed on its
    own or unknown (it may have run to the end); not a subject that never started, and not an
    attempt the provider throttled."""
    return (r is not None and not r.throttled
            and r.execution in (Execution.COMPLETED, Execution.SUBJECT_FAILED, Execution.UNKNOWN))


def visit_cell(state: State, run: RunState, group: GroupState, task_id: TaskId, repetition: int,
               cid: CellId, tally: Tally) -> SelectedResult | IncompleteCell:
    """One cell's outcome, its costs and usage added to `tally` (the one copy of these rules)."""
    cell = run.cells[cid]
    last_detail = ""
    executions = 0
    extra_cost = 0.0
    chosen: Glance | None = None  # the selected attempt's report, read once
    for tid in cell.attempts:
        attempt = state.attempts[tid]
        tally.dispatched += 1
        r = attempt.glance  # what this walk reads of a report, without building it
        if tid == cell.selected:
            chosen = r
        tally.lost += attempt.lost and r is None
        if r is None or r.usage != Usage.COMPLETE:
            tally.usage_complete = False
        if r is not None:
            last_detail = r.detail
            if r.cost_usd is not None:
                tally.observed_cost_usd += r.cost_usd
        if executed(r):
            executions += 1
            # The one that counts is the selected attempt, or the first execution without one.
            counts = tid == cell.selected if cell.selected is not None else executions == 1
            if not counts and r.cost_usd is not None:
                extra_cost += r.cost_usd
    if executions > 1:
        tally.executed_more_than_once += 1
        tally.extra_execution_cost_usd += extra_cost
    if cell.selected is not None:
        a = state.attempts[cell.selected]
        r = chosen
        assert r is not None and r.score is not None
        if r.cost_usd is not None:
            tally.selected_cost_usd += r.cost_usd
        tally.selected += 1
        return SelectedResult(
            cid, task_id, repetition, cell.subject_id, r.score, r.status.name.lower(),
            a.attempt_id, a.worker_id, a.assignment_id, a.generation, a.dispatch_order,
            len(cell.attempts), r.cost_usd, r.usage.name.lower(), r.started_ms, r.finished_ms,
            executions, extra_cost)
    if group.status == GroupStatus.ASSIGNED:
        reason = "running"
    elif group.status == GroupStatus.SETTLED:
        reason = "provider_throttled" if cell.throttled >= run.max_throttled(cell) else "exhausted"
    elif run.blocked_reason:
        reason = "blocked"
    elif run.paused:
        reason = "paused"
    elif cell.attempts:
        reason = "retry_pending"
    else:
        reason = "not_yet_run"
    tally.incomplete += 1
    last = state.attempts[cell.attempts[-1]] if cell.attempts else None
    return IncompleteCell(cid, task_id, repetition, cell.subject_id, reason, len(cell.attempts), last_detail,
                          executions, extra_cost, last.attempt_id if last is not None else None,
                          last.worker_id if last is not None else None)


def summarize(state: State, run_id: RunId) -> RunSummary:
    run = state.runs[run_id]
    spec = run.spec
    selected: list[SelectedResult] = []
    incomplete: list[IncompleteCell] = []
    tally = Tally()
    counts = {GroupStatus.WAITING: 0, GroupStatus.ASSIGNED: 0, GroupStatus.SETTLED: 0}
    for group in run.groups:
        counts[group.status] += 1
        task_id, repetition = spec.group_key(group.index)
        for cid in group.cells:
            v = visit_cell(state, run, group, task_id, repetition, cid, tally)
            if isinstance(v, SelectedResult):
                selected.append(v)
            else:
                incomplete.append(v)
    return RunSummary(
        run_id=run_id, state=run_state(run, bool(incomplete)), blocked_reason=run.blocked_reason, cells_total=spec.cell_count,
        selected=tuple(selected), incomplete=tuple(incomplete),
        observed_cost_usd=round(tally.observed_cost_usd, 9), selected_cost_usd=round(tally.selected_cost_usd, 9),
        usage_complete=tally.usage_complete, attempts_dispatched=tally.dispatched,
        executed_more_than_once=tally.executed_more_than_once,
        extra_execution_cost_usd=round(tally.extra_execution_cost_usd, 9), late_reports=run.late_reports,
        lost_attempts=tally.lost, peak_concurrent_groups=run.peak_active, slots_offered=run.peak_slots_offered,
        max_concurrent_groups=spec.max_concurrent_groups,
        groups_waiting=counts[GroupStatus.WAITING], groups_assigned=counts[GroupStatus.ASSIGNED],
        groups_settled=counts[GroupStatus.SETTLED],
    )


def run_state(run: RunState, has_incomplete: bool) -> str:
    if run.settled:
        return "incomplete" if has_incomplete else "complete"
    if run.blocked_reason:
        return "blocked"
    if run.paused:
        return "paused"
    return "running"


@dataclass(frozen=True, slots=True)
class RunCounts:
    """What `status` and live progress need, counted without building a row per cell."""

    state: str
    cells_total: int
    selected: int
    running: int
    exhausted: int
    retries: int  # dispatches beyond each cell's first
    groups_waiting: int
    groups_assigned: int
    groups_settled: int


def walk_cell_counts(run: RunState) -> CellCounts:
    """The counts by one walk of every cell (what `State.soft` keeps as cells change)."""
    counts = CellCounts()
    for group in run.groups:
        for cid in group.cells:
            cell = run.cells[cid]
            if cell.attempts:
                counts.tried += 1
            if cell.selected is None:
                if group.status == GroupStatus.ASSIGNED:
                    counts.running += 1
                elif group.status == GroupStatus.SETTLED:
                    counts.exhausted += 1
    return counts


def cell_counts(state: State, run: RunState) -> CellCounts:
    """The run's counts: kept by the core as cells change; after a restart, one walk builds them."""
    counts = state.soft.cell_counts.get(run.run_id)
    if counts is None:
        counts = state.soft.cell_counts[run.run_id] = walk_cell_counts(run)
    return counts


def run_counts(state: State, run: RunState) -> RunCounts:
    n = cell_counts(state, run)
    total = len(run.cells)
    return RunCounts(run_state(run, run.selected_cells < total), total, run.selected_cells, n.running, n.exhausted,
                     run.dispatches - n.tried, len(run.groups) - run.active - run.settled_groups, run.active,
                     run.settled_groups)
