"""Read-only views of the core state for the admin API, built on the actor thread.

They cost in proportion to the run (a summary walks every cell): fine for an operator's
`status` or `results`, never called per worker frame.
"""
from __future__ import annotations

from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2
from common.ids import RunId
from common.identity import manifest_id
from coordinator.core import summarize
from coordinator.core.summary import run_counts
from coordinator.core.machine import liveness_policy
from coordinator.core.state import State, WorkerStatus
from coordinator.logcodec import report_to_proto

RUN_STATES = {"running": admin_pb2.RUN_STATE_RUNNING, "paused": admin_pb2.RUN_STATE_PAUSED,
              "blocked": admin_pb2.RUN_STATE_BLOCKED, "complete": admin_pb2.RUN_STATE_COMPLETE,
              "incomplete": admin_pb2.RUN_STATE_INCOMPLETE}


def timing(state: State) -> tuple[int, int, int]:
    p = liveness_policy(state)
    return p.heartbeat_interval_ms, p.suspect_after_ms, p.expire_after_ms


def status(state: State, run_id: str | None, now_ms: int) -> admin_pb2.GetStatusResponse:
    out = admin_pb2.GetStatusResponse()
    for rid, run in state.runs.items():
        if run_id and rid != run_id:
            continue
        # Counts only, no row per cell: status is polled (fleetctl local, watch scripts) and
        # runs on the actor thread, between commits.
        n = run_counts(run)
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
            pinned_age_ms=max(0, now_ms - run.pinned_ms) if run.pin is not None else 0))
    for wid, w in state.workers.items():
        # What was really heard last: a restart forgets soft state, and then a worker that
        # expired or left says when, one still registered when it registered.
        last = state.soft.contact_ms.get(wid)
        if last is None:
            last = w.left_ms or w.registered_ms
        ws = admin_pb2.WorkerStatus(
            worker_id=wid, status=w.status.name.lower() + (" draining" if w.draining else ""),
            incarnation=w.incarnation, slots=w.slots, busy_slots=len(w.assignments),
            last_heartbeat_age_ms=max(0, now_ms - last), environment_id=w.environment_id,
            serves_runs=[r for r in w.fits if w.status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED)
                         and _serves(state, r, w)])
        if w.refusal is not None:
            ws.refused_run_id, ws.refused_reason = w.refusal.run_id, w.refusal.reason
            ws.refused_age_ms = max(0, now_ms - w.refusal.at_ms)
            ws.refused_differences.extend(common_pb2.EnvironmentDifference(key=k, run_value=a, worker_value=b)
                                          for k, a, b in w.refusal.differences[:REFUSAL_DIFFERENCES_SHOWN_MAX])
        out.workers.append(ws)
    return out


REFUSAL_DIFFERENCES_SHOWN_MAX = 50


def _serves(state: State, run_id: str, w) -> bool:
    run = state.runs[run_id]
    fit = w.fits[run_id]
    return not fit.differences and (run.pin is None or fit.components == run.pin)


def run_environment(state: State, run_id: RunId) -> coordinator_pb2.DescribeRunEnvironmentResponse | None:
    run = state.runs.get(run_id)
    if run is None:
        return None
    comps = [common_pb2.EnvironmentComponent(key=k, value=v) for k, v in run.manifest.items()]
    pin = [common_pb2.EnvironmentComponent(key=k, value=v) for k, v in (run.pin or ())]
    return coordinator_pb2.DescribeRunEnvironmentResponse(
        run_id=run_id, reference=comps, worker_keys=run.worker_keys, pin=pin, pinned_by=run.pinned_by,
        environment_match=run.policy.environment_match)


def results(state: State, run_id: RunId) -> admin_pb2.GetResultsResponse | None:
    if run_id not in state.runs:
        return None
    s = summarize(state, run_id)
    out = admin_pb2.GetResultsResponse()
    for r in s.selected:
        report = state.attempts[r.attempt_id].report
        assert report is not None
        pr = report_to_proto(report)
        cell = admin_pb2.CellResult(
            cell_id=r.cell_id, task_id=r.task_id, repetition=r.repetition, subject_id=r.subject_id,
            state="selected", score=r.score, status=pr.status, attempt_id=r.attempt_id, worker_id=r.worker_id,
            assignment_id=r.assignment_id, generation=r.generation, dispatch_order=r.dispatch_order,
            usage=pr.usage, attempts=r.attempts, artifacts=pr.artifacts, unavailable=pr.unavailable)
        if report.cost_usd is not None:
            cell.cost_usd = report.cost_usd
        if report.started_ms:
            cell.started_ms, cell.finished_ms = report.started_ms, report.finished_ms
        for name in ("input_tokens", "output_tokens", "cached_tokens"):
            value = getattr(report, name)
            if value is not None:
                setattr(cell, name, value)
        out.cells.append(cell)
    for i in s.incomplete:
        out.cells.append(admin_pb2.CellResult(
            cell_id=i.cell_id, task_id=i.task_id, repetition=i.repetition, subject_id=i.subject_id,
            state="incomplete", incomplete_reason=i.reason, attempts=i.attempts,
            status=common_pb2.STATUS_UNSPECIFIED, incomplete_detail=i.detail))
    out.summary.CopyFrom(admin_pb2.Summary(
        selected=len(s.selected), incomplete=len(s.incomplete), observed_cost_usd=s.observed_cost_usd,
        usage_complete=s.usage_complete, state=RUN_STATES[s.state], blocked_reason=s.blocked_reason,
        peak_concurrent_groups=s.peak_concurrent_groups, slots_offered=s.slots_offered,
        late_reports=s.late_reports, selected_cost_usd=s.selected_cost_usd))
    score_range = state.runs[run_id].spec.score_range
    if score_range is not None:
        out.summary.score_range_low, out.summary.score_range_high = score_range
    return out


def attempts(state: State, run_id: RunId) -> admin_pb2.ListAttemptsResponse | None:
    run = state.runs.get(run_id)
    if run is None:
        return None
    records = []
    for cell in run.cells.values():
        task_id, repetition = run.spec.group_key(cell.group_index)
        for tid in cell.attempts:
            t = state.attempts[tid]
            r = t.report
            if cell.selected == tid:
                kind = "selected"
            elif r is not None:
                kind = "late" if t.late else "retried"
            else:
                kind = "lost" if t.lost else "pending"
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
    records.sort(key=lambda rec: rec.dispatch_order)
    return admin_pb2.ListAttemptsResponse(attempts=records)


def attempt_owner(state: State, attempt_id: str) -> str | None:
    attempt = state.attempts.get(attempt_id)
    return None if attempt is None else attempt.worker_id
