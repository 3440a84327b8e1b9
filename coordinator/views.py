"""Read-only views of the core state for the admin API, built on the actor thread.

`status` costs in proportion to the run (it counts every cell) and is never called per
worker frame. Results and attempts come in pages whose cost is bounded by the page
(common/limits.py PAGE_ITEMS_MAX, PAGE_BYTES_MAX), so a large run never holds the actor
thread for a whole walk.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2
from common.identity import manifest_id
from common.ids import CellId, RunId, cell_of_attempt
from common.report.names import STATUS_NAMES
from coordinator.core.machine import liveness_policy
from coordinator.core.reportpack import glance
from coordinator.core.state import GroupState, RunState, State, WorkerStatus
from coordinator.core.summary import IncompleteCell, SelectedResult, Tally, run_counts, run_state, visit_cell
from coordinator.paging import Position
from coordinator import codec

RUN_STATES = {"running": admin_pb2.RUN_STATE_RUNNING, "paused": admin_pb2.RUN_STATE_PAUSED,
              "blocked": admin_pb2.RUN_STATE_BLOCKED, "complete": admin_pb2.RUN_STATE_COMPLETE,
              "incomplete": admin_pb2.RUN_STATE_INCOMPLETE}


def welcome(state: State) -> tuple[int, int, int, str]:
    """What a Welcome tells a worker of the coordinator: its liveness timing and its epoch."""
    p = liveness_policy(state)
    return p.heartbeat_interval_ms, p.suspect_after_ms, p.expire_after_ms, state.epoch


def status(state: State, run_id: str | None, now_ms: int, view: int = admin_pb2.WORKERS_VIEW_ALL,
           shown: int = 0, listed_max: int = 0) -> admin_pb2.GetStatusResponse:
    """Runs and workers; with `view` SUMMARY, a worker summary and the workers themselves only
    when there are at most `listed_max` of them."""
    out = admin_pb2.GetStatusResponse()
    for rid, run in state.runs.items():
        if run_id and rid != run_id:
            continue
        # Counts only, no row per cell: status is polled (fleetctl local, watch scripts) and
        # runs on the actor thread, between commits.
        n = run_counts(state, run)
        out.runs.append(admin_pb2.RunStatus(
            run_id=rid, state=RUN_STATES[n.state], blocked_reason=run.blocked_reason,
            group_counts=[admin_pb2.GroupCount(state="waiting", count=n.groups_waiting),
                          admin_pb2.GroupCount(state="assigned", count=n.groups_assigned),
                          admin_pb2.GroupCount(state="settled", count=n.groups_settled)],
            cells_selected=n.selected, cells_incomplete=n.cells_total - n.selected - n.running,
            cells_running=n.running, peak_concurrent_groups=run.peak_active, slots_offered=run.peak_slots_offered,
            max_concurrent_groups=run.spec.max_concurrent_groups, cells_total=n.cells_total,
            retries=n.retries, cells_exhausted=n.exhausted,
            environment_id=manifest_id(run.manifest) if run.manifest else "", reference_keys=len(run.manifest),
            pin_environment_id=manifest_id(dict(run.pin)) if run.pin is not None else "", pinned_by=run.pinned_by,
            pinned_age_ms=max(0, now_ms - run.pinned_ms) if run.pin is not None else 0,
            order_from=run.policy.order_from if run.order else "",
            observed_cost_usd=round(run.observed_cost_usd, 9), cost_cap_usd=run.cost_cap_usd,
            pause_reason=run.pause_reason))
    out.providers.extend(providers(state, now_ms))
    if view == admin_pb2.WORKERS_VIEW_SUMMARY:
        out.worker_summary.CopyFrom(worker_summary(state, now_ms, shown or WORKERS_SHOWN_DEFAULT))
        if len(state.workers) > listed_max:
            return out
    for wid, w in state.workers.items():
        out.workers.append(_worker_status(state, wid, w, now_ms))
    return out


def providers(state: State, now_ms: int) -> list[admin_pb2.ProviderStatus]:
    """Every provider, by name: a handful per coordinator, so a row each costs nothing."""
    out = []
    for name in sorted(state.providers):
        p = state.providers[name]
        out.append(admin_pb2.ProviderStatus(
            name=name, running=p.running, peak_running=p.peak_running, effective=p.effective, declared=p.declared,
            throttled=p.throttled, retry_after_ms_total=p.retry_after_ms_total, slow_start=p.slow_start,
            last_throttled=p.last_throttled,
            last_throttled_age_ms=max(0, now_ms - p.last_throttled_ms) if p.throttled else 0))
    return out


WORKERS_SHOWN_DEFAULT = 5
WORKERS_SHOWN_MAX = 100
LIVE = (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED, WorkerStatus.RECONCILING)


def _last_heard(state: State, wid: str, w) -> int:
    # What was really heard last: a restart forgets soft state, and then a worker that
    # expired or left says when, one still registered when it registered.
    last = state.soft.contact_ms.get(wid)
    if last is None:
        last = w.left_ms or w.registered_ms
    return last


# A registered worker under quarantine is named for it (its liveness is the core's as ever): the
# summary of a large fleet counts the quarantined apart. Expired and gone workers keep their name.
_STATUS_NAMES = {(st, d, q): ("quarantined" if q and st in LIVE else st.name.lower()) + (" draining" if d else "")
                 for st in WorkerStatus for d in (False, True) for q in (False, True)}


def _status_name(w) -> str:
    return _STATUS_NAMES[w.status, bool(w.draining), bool(w.quarantined_until_ms)]


def _quarantine_shown(w) -> bool:
    return bool(w.quarantined_until_ms or w.probation)


def _worker_status(state: State, wid: str, w, now_ms: int) -> admin_pb2.WorkerStatus:
    ws = admin_pb2.WorkerStatus(
        worker_id=wid, status=_status_name(w),
        incarnation=w.incarnation, slots=w.slots, busy_slots=len(w.assignments),
        last_heartbeat_age_ms=max(0, now_ms - _last_heard(state, wid, w)), environment_id=w.environment_id,
        serves_runs=[r for r in w.fits if w.status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED)
                     and _serves(state, r, w)])
    if w.refusal is not None:
        ws.refused_run_id, ws.refused_reason = w.refusal.run_id, w.refusal.reason
        ws.refused_age_ms = max(0, now_ms - w.refusal.at_ms)
        ws.refused_differences.extend(codec.differences(w.refusal.differences[:REFUSAL_DIFFERENCES_SHOWN_MAX]))
    ws.streak = len(w.streak)
    ws.degraded = w.degraded
    if _quarantine_shown(w):
        ws.quarantined_until_ms = w.quarantined_until_ms
        ws.quarantine_left_ms = max(0, w.quarantined_until_ms - now_ms) if w.quarantined_until_ms else 0
        ws.quarantine_reason, ws.probation, ws.quarantines = w.quarantine_reason, w.probation, w.quarantines
    return ws


def worker_summary(state: State, now_ms: int, shown: int) -> admin_pb2.WorkerSummary:
    """Counts by state, the `shown` registered workers longest unheard and the first `shown`
    refused and quarantined ones: one pass over the workers and a proto for only those named (at
    10,000 workers the full list costs the actor thread tens of ms and is a megabyte)."""
    shown = min(shown, WORKERS_SHOWN_MAX)
    counts: dict[str, int] = {}
    slots = busy = refused_total = quarantined_total = 0
    refused: list[str] = []
    quarantined: list[str] = []
    heard: list[tuple[int, str]] = []
    contact = state.soft.contact_ms
    for wid, w in state.workers.items():
        name = _status_name(w)
        counts[name] = counts.get(name, 0) + 1
        slots += w.slots
        busy += len(w.assignments)
        if w.refusal is not None:
            refused_total += 1
            if len(refused) < shown:
                refused.append(wid)
        if _quarantine_shown(w):
            quarantined_total += 1
            if len(quarantined) < shown:
                quarantined.append(wid)
        if w.status in LIVE:
            last = contact.get(wid)
            heard.append((last if last is not None else (w.left_ms or w.registered_ms), wid))
    slowest = heapq.nsmallest(shown, heard)
    workers = state.workers
    return admin_pb2.WorkerSummary(
        total=len(workers), slots=slots, busy_slots=busy, refused_total=refused_total,
        quarantined_total=quarantined_total,
        counts=[admin_pb2.WorkerCount(state=k, count=n) for k, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))],
        slowest=[_worker_status(state, wid, workers[wid], now_ms) for _, wid in slowest],
        refused=[_worker_status(state, wid, workers[wid], now_ms) for wid in refused],
        quarantined=[_worker_status(state, wid, workers[wid], now_ms) for wid in quarantined])


REFUSAL_DIFFERENCES_SHOWN_MAX = 50


def _serves(state: State, run_id: str, w) -> bool:
    run = state.runs[run_id]
    fit = w.fits[run_id]
    return not fit.differences and (run.pin is None or fit.components == run.pin)


def run_environment(state: State, run_id: RunId) -> coordinator_pb2.DescribeRunEnvironmentResponse | None:
    run = state.runs.get(run_id)
    if run is None:
        return None
    return coordinator_pb2.DescribeRunEnvironmentResponse(
        run_id=run_id, reference=codec.components(run.manifest.items()), worker_keys=run.worker_keys,
        pin=codec.components(run.pin or ()), pinned_by=run.pinned_by,
        environment_match=run.policy.environment_match)


@dataclass(slots=True)
class Page:
    """One page of a listing: its items, where the next page starts (None: this was the last),
    and the tally of every cell listed so far, this page's included."""

    items: list
    next_at: Position | None
    tally: Tally
    total: int  # cells of the run
    size_bytes: int  # the items' encoded size
    summary: admin_pb2.Summary | None = None  # on the last page of GetResults


def _cell_proto(state: State, v: SelectedResult | IncompleteCell) -> admin_pb2.CellResult:
    if isinstance(v, IncompleteCell):
        cell = admin_pb2.CellResult(
            cell_id=v.cell_id, task_id=v.task_id, repetition=v.repetition, subject_id=v.subject_id,
            state="incomplete", incomplete_reason=v.reason, attempts=v.attempts,
            status=common_pb2.STATUS_UNSPECIFIED, incomplete_detail=v.detail, executions=v.executions,
            extra_execution_cost_usd=round(v.extra_execution_cost_usd, 9))
        if v.last_attempt_id is not None:  # the provenance of its last attempt (bulk retry by worker)
            last = state.attempts[v.last_attempt_id]
            cell.attempt_id, cell.worker_id, cell.assignment_id = last.attempt_id, last.worker_id, last.assignment_id
            cell.generation, cell.dispatch_order = last.generation, last.dispatch_order
        return cell
    report = state.attempts[v.attempt_id].report
    assert report is not None
    # Its fields straight into the message: a report in the state was checked when it came in
    # (off the wire or the log), so the checking report_to_proto (half of a page's time when
    # it built a whole Report message for these four fields) has nothing left to refuse.
    cell = admin_pb2.CellResult(
        cell_id=v.cell_id, task_id=v.task_id, repetition=v.repetition, subject_id=v.subject_id,
        state="selected", score=v.score, status=report.status, attempt_id=v.attempt_id, worker_id=v.worker_id,
        assignment_id=v.assignment_id, generation=v.generation, dispatch_order=v.dispatch_order,
        usage=report.usage, attempts=v.attempts, executions=v.executions,
        extra_execution_cost_usd=round(v.extra_execution_cost_usd, 9), recovered=state.attempts[v.attempt_id].recovered)
    for a in report.artifacts:
        cell.artifacts.add(name=a.name, digest=a.digest, size_bytes=a.size_bytes)
    for u in report.unavailable:
        cell.unavailable.add(name=u.name, reason=u.reason)
    if report.cost_usd is not None:
        cell.cost_usd = report.cost_usd
    if report.started_ms:
        cell.started_ms, cell.finished_ms = report.started_ms, report.finished_ms
    for name in ("input_tokens", "output_tokens", "cached_tokens"):
        value = getattr(report, name)
        if value is not None:
            setattr(cell, name, value)
    return cell


def position_problem(state: State, run_id: RunId, at: Position) -> str:
    """Why a (verified) position does not continue this run's listing, or ""."""
    run = state.runs[run_id]
    if at.group >= len(run.groups) or at.offset >= len(run.groups[at.group].cells):
        return f"the token points past the end of run {run_id}"
    return ""


def _walk(state: State, run_id: RunId, at: Position, items_max: int, bytes_max: int, tally: Tally,
          visit: Callable[[State, RunState, GroupState, Any, int, Any, Tally], list]) -> Page:
    """Cells from `at` in the run's fixed order until `items_max` items or `bytes_max` bytes
    (a page holds at least one cell); the work per page is bounded by the page, not the run."""
    run = state.runs[run_id]
    spec = run.spec
    items: list = []
    size = 0
    g, offset = at.group, at.offset
    groups = run.groups
    while g < len(groups):
        group = groups[g]
        task_id, repetition = spec.group_key(group.index)
        cells = group.cells
        while offset < len(cells):
            if items and (len(items) >= items_max or size >= bytes_max):
                return Page(items, Position(g, offset), tally, len(run.cells), size)
            for item in visit(state, run, group, task_id, repetition, cells[offset], tally):
                items.append(item)
                size += item.ByteSize()
            offset += 1
        g, offset = g + 1, 0
    return Page(items, None, tally, len(run.cells), size)


def _results_visit(state: State, run: RunState, group: GroupState, task_id: Any, repetition: int, cid: Any,
                   tally: Tally) -> list:
    cell = _cell_proto(state, visit_cell(state, run, group, task_id, repetition, cid, tally))
    cell.throttled = run.cells[cid].throttled
    return [cell]


def results_page(state: State, run_id: RunId, at: Position, items_max: int, bytes_max: int,
                 tally: Tally) -> Page | None:
    """A page of GetResults (None: no such run); the caller checks `at` with position_problem."""
    if run_id not in state.runs:
        return None
    page = _walk(state, run_id, at, items_max, bytes_max, tally, _results_visit)
    if page.next_at is None:
        page.summary = summary_of(state, run_id, page.tally)
    return page


def summary_of(state: State, run_id: RunId, tally: Tally) -> admin_pb2.Summary:
    """The summary of a listing that is complete: its tally, and the run's state now."""
    run = state.runs[run_id]
    out = admin_pb2.Summary(
        selected=tally.selected, incomplete=tally.incomplete, observed_cost_usd=round(tally.observed_cost_usd, 9),
        usage_complete=tally.usage_complete, state=RUN_STATES[run_state(run, tally.incomplete > 0)],
        blocked_reason=run.blocked_reason, peak_concurrent_groups=run.peak_active,
        slots_offered=run.peak_slots_offered, late_reports=run.late_reports,
        selected_cost_usd=round(tally.selected_cost_usd, 9),
        run_observed_cost_usd=round(run.observed_cost_usd, 9), cost_cap_usd=run.cost_cap_usd)
    score_range = run.spec.score_range
    if score_range is not None:
        out.score_range_low, out.score_range_high = score_range
    return out


def _attempt_kind(selected: Any, tid: Any, t: Any) -> str:
    """What became of an attempt (AttemptRecord.kind)."""
    if selected == tid:
        return "selected"
    if t.reported:
        return "late" if t.late else "retried"
    return "lost" if t.lost else "pending"


def _attempts_visit(state: State, run: RunState, group: GroupState, task_id: Any, repetition: int, cid: Any,
                    tally: Tally) -> list:
    cell = run.cells[cid]
    records = []
    for tid in cell.attempts:
        t = state.attempts[tid]
        r = t.glance  # the fields read here, without building a Report
        kind = _attempt_kind(cell.selected, tid, t)
        rec = admin_pb2.AttemptRecord(
            attempt_id=tid, cell_id=cell.cell_id, task_id=task_id, repetition=repetition,
            subject_id=cell.subject_id, worker_id=t.worker_id, assignment_id=t.assignment_id,
            generation=t.generation, dispatch_order=t.dispatch_order, kind=kind, dispatched_ms=t.dispatched_ms)
        if r is not None:
            rec.status = int(r.status)
            rec.usage = int(r.usage)
            rec.detail = r.detail
            if r.started_ms:
                rec.started_ms, rec.finished_ms = r.started_ms, r.finished_ms
            if r.score is not None:
                rec.score = r.score
            if r.cost_usd is not None:
                rec.cost_usd = r.cost_usd
        records.append(rec)
    return records


def attempts_page(state: State, run_id: RunId, at: Position, items_max: int, bytes_max: int) -> Page | None:
    """A page of ListAttempts in cell order (each cell's attempts in dispatch order); a page
    ends at a cell boundary, so it may pass `items_max` by one cell's attempts."""
    if run_id not in state.runs:
        return None
    return _walk(state, run_id, at, items_max, bytes_max, Tally(), _attempts_visit)


def attempt_owner(state: State, attempt_id: str, worker_id: str = "") -> str | None:
    """The worker an attempt was dispatched to. After a restore, an attempt the coordinator
    does not know but that names a cell of a known run (issued before the restore, lost with
    the log's tail) is `worker_id`'s to upload for: its result is offered again."""
    attempt = state.attempts.get(attempt_id)
    if attempt is not None:
        return attempt.worker_id
    if state.epoch and worker_id:
        run = state.runs.get(attempt_id.partition(":")[0])
        if run is not None and cell_of_attempt(run.run_id, attempt_id) in run.cells:
            return worker_id
    return None


# ---- the console's run page (coordinator/console/runview.py) -----------------------------------
# The run page's heavy part needs sums and counts over every cell and attempt but shows only a
# few of them: its read visits the cells on the actor (visit_cell, the one copy of a cell's
# outcome) and copies what the visit gave with the attempts' few changing fields, a part at a
# time; the records the page folds are made from that copy off the actor (`part_cells`), never a
# proto per cell. About 6 us a cell at W1's size, most of it visit_cell: this many cells a query
# hold the actor about 6 ms at a time (GetResults' pages of 5,000 held it 50 ms and more), and
# it goes on with its commands between two.
RUN_PART_CELLS_MAX = 1_000


@dataclass(frozen=True, slots=True)
class CellRead:
    """ReadCell's request (in process only)."""

    run_id: str
    cell_id: str


@dataclass(slots=True)
class RunPart:
    """One actor query's share of a run page's read: per cell, in the run's order, its visit
    (SelectedResult or IncompleteCell: frozen), its throttled count, its selected attempt's
    `recovered` or its last attempt's (assignment, generation, dispatch order), and its other
    attempts as (id, kind, worker, assignment, generation, dispatch order, report: frozen)."""

    cells_total: int
    groups_total: int
    score_range: tuple[float, float] | None  # the spec's benchmark.scoreRange (the intervals keep to it)
    selected_cells: int  # of the run, when the part was read
    cells: list[tuple]
    next_at: Position | None
    summary: admin_pb2.Summary | None = None  # on the last part


@dataclass(slots=True)
class RunPagePart:
    """A part as the console folds it: results_json cells (runview.PAGE_CELL_KEYS) and, in the
    run's order, (kind, status name, worker, timeline entry or None) per attempt."""

    cells_total: int
    groups_total: int
    score_range: tuple[float, float] | None
    selected_cells: int
    cells: list[dict]
    attempts: list[tuple]
    summary: admin_pb2.Summary | None


def run_part(state: State, run_id: RunId, at: Position, cells_max: int, tally: Tally) -> RunPart | None:
    """Up to `cells_max` cells from `at` (None: no such run); `tally` carries the summary's sums
    from part to part, as GetResults' pages do. The caller checks `at` with position_problem."""
    run = state.runs.get(run_id)
    if run is None:
        return None
    spec, groups, cells, attempts = run.spec, run.groups, run.cells, state.attempts
    out: list[tuple] = []
    g, offset = at.group, at.offset
    while g < len(groups):
        group = groups[g]
        task_id, repetition = spec.group_key(group.index)
        ids = group.cells
        while offset < len(ids):
            if len(out) >= cells_max:
                return RunPart(len(cells), len(groups), spec.score_range, run.selected_cells, out, Position(g, offset))
            cid = ids[offset]
            v = visit_cell(state, run, group, task_id, repetition, cid, tally)
            cell = cells[cid]
            sel = cell.selected
            tried = cell.attempts
            others: tuple = ()
            if len(tried) > (sel is not None):
                others = tuple((tid, _attempt_kind(sel, tid, t), t.worker_id, t.assignment_id, t.generation,
                                t.dispatch_order, t.packed_report)
                               for tid in tried if tid != sel for t in (attempts[tid],))
            if sel is not None:
                extra: Any = attempts[sel].recovered
            elif tried:
                last = attempts[tried[-1]]
                extra = (last.assignment_id, last.generation, last.dispatch_order)
            else:
                extra = None
            out.append((v, cell.throttled, extra, others))
            offset += 1
        g, offset = g + 1, 0
    return RunPart(len(cells), len(groups), spec.score_range, run.selected_cells, out, None,
                   summary_of(state, run_id, tally))


def part_cells(part: RunPart) -> RunPagePart:
    """The part's cells as GetResults' cells read through results_json would be (the keys the run
    page reads), and its attempts as ListAttempts' records would fold; off the actor: it reads
    only the part (frozen visits, packed reports, copied fields)."""
    cells: list[dict] = []
    items: list[tuple] = []
    for v, throttled, extra, others in part.cells:
        if isinstance(v, SelectedResult):
            started = v.started_ms or None
            cells.append({
                "cell_id": v.cell_id, "task": v.task_id, "repetition": v.repetition, "subject": v.subject_id,
                "state": "selected", "score": float(v.score), "status": v.status, "attempt_id": v.attempt_id or None,
                "worker_id": v.worker_id or None, "assignment_id": v.assignment_id or None,
                "generation": v.generation or None, "dispatch_order": v.dispatch_order or None,
                "attempts": v.attempts, "cost_usd": None if v.cost_usd is None else float(v.cost_usd),
                "incomplete_reason": None, "incomplete_detail": None, "started_ms": started,
                "finished_ms": v.finished_ms if started else None, "throttled": throttled,
                "executions": v.executions, "extra_execution_cost_usd": round(v.extra_execution_cost_usd, 9),
                "recovered_after_restore": extra})
            items.append(("selected", "", v.worker_id, None))  # its timeline entry is its cell's
        else:
            assignment, generation, order = extra if extra is not None else (None, None, None)
            cells.append({
                "cell_id": v.cell_id, "task": v.task_id, "repetition": v.repetition, "subject": v.subject_id,
                "state": "incomplete", "score": None, "status": None, "attempt_id": v.last_attempt_id or None,
                "worker_id": v.last_worker_id or None, "assignment_id": assignment or None,
                "generation": generation or None, "dispatch_order": order or None, "attempts": v.attempts,
                "cost_usd": None, "incomplete_reason": v.reason or None, "incomplete_detail": v.detail or None,
                "started_ms": None, "finished_ms": None, "throttled": throttled, "executions": v.executions,
                "extra_execution_cost_usd": round(v.extra_execution_cost_usd, 9), "recovered_after_restore": False})
        for tid, kind, worker, assignment, generation, order, packed in others:
            r = None if packed is None else glance(packed)  # read here, off the actor
            status = int(r.status) if r is not None else 0
            entry = None
            if kind != "pending":  # as common/report/html.py attempts_from_records
                timed = r is not None and bool(r.started_ms)
                entry = {"kind": kind, "worker_id": worker, "assignment_id": assignment, "task": v.task_id,
                         "repetition": v.repetition, "subject": v.subject_id, "cell_id": v.cell_id,
                         "attempt_id": tid, "generation": generation, "dispatch_order": order, "attempts": None,
                         "started_ms": r.started_ms if timed else None, "finished_ms": r.finished_ms if timed else None,
                         "score": float(r.score) if r is not None and r.score is not None else None,
                         "status": STATUS_NAMES.get(status) if status else None}
            items.append((kind, STATUS_NAMES.get(status, "unspecified"), worker, entry))
    return RunPagePart(part.cells_total, part.groups_total, part.score_range, part.selected_cells, cells, items,
                       part.summary)


def cell_read(state: State, run_id: RunId, cell_id: CellId) -> tuple[admin_pb2.CellResult | None, list] | None:
    """One cell as GetResults lists it and its attempts as ListAttempts does (None: no such run;
    (None, []): no such cell): a cell's page costs that cell."""
    run = state.runs.get(run_id)
    if run is None:
        return None
    cell = run.cells.get(cell_id)
    if cell is None:
        return None, []
    group = run.groups[cell.group_index]
    task_id, repetition = run.spec.group_key(group.index)
    [proto] = _results_visit(state, run, group, task_id, repetition, cell_id, Tally())
    return proto, _attempts_visit(state, run, group, task_id, repetition, cell_id, Tally())
