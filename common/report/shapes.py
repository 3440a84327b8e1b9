"""A run's results and the coordinator's status as plain dicts: the JSON of `fleetctl results
--json` and `fleetctl status --json`, and what the HTML report (common/report/html.py) and the
coordinator's console render. Built from the Admin API's messages, with the enums' lower-case
names (common/report/names.py); an absent value is None, never a made-up zero.

Also the one filter of a bulk retry (`fleetctl retry RUN --where`, the console's bulk retry):
WHERE_KEYS, `parse_where`, `cell_matches`.
"""
from __future__ import annotations

from typing import Any

from common.report.names import RUN_STATE_NAMES, STATUS_NAMES, USAGE_NAMES

# The keys of a retry by filter, and what each matches in a results cell: state (only
# "incomplete": the cells a retry can grant), reason (the incomplete reason), task, subject, and
# worker (the worker of the cell's last attempt).
WHERE_KEYS = {"state": "state", "reason": "incomplete_reason", "task": "task", "subject": "subject",
              "worker": "worker_id"}
# coordinator/core/summary.py IncompleteCell.reason: a typo matches nothing, so it is refused.
INCOMPLETE_REASONS = ("exhausted", "provider_throttled", "blocked", "paused", "running", "retry_pending",
                      "not_yet_run")


class WhereError(ValueError):
    """A filter that cannot be read: the operator's input, named with the reason."""


def parse_where(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """{key: value} from (key, value) pairs, each checked: an unknown key, a key given twice, a
    state other than incomplete or an unknown reason is a WhereError. Empty values are left out
    (a form's unset field)."""
    out: dict[str, str] = {}
    for key, value in pairs:
        key, value = key.strip(), value.strip()
        if not value:
            continue
        if key not in WHERE_KEYS:
            raise WhereError(f"unknown filter key {key!r} (keys: {', '.join(WHERE_KEYS)})")
        if key in out:
            raise WhereError(f"filter key {key!r} is given twice")
        if key == "state" and value != "incomplete":
            raise WhereError(f"state={value}: only incomplete cells can be retried (state=incomplete)")
        if key == "reason" and value not in INCOMPLETE_REASONS:
            raise WhereError(f"unknown incomplete reason {value!r} (reasons: {', '.join(INCOMPLETE_REASONS)})")
        out[key] = value
    return out


def cell_matches(cell: dict, where: dict[str, str]) -> bool:
    """An incomplete cell (a results_json cell) that matches every key of `where`."""
    return cell["state"] == "incomplete" and all(cell[WHERE_KEYS[k]] == v for k, v in where.items() if k != "state")


def results_json(resp: Any) -> dict:
    cells = []
    for cell in resp.cells:
        cells.append({
            "cell_id": cell.cell_id, "task": cell.task_id, "repetition": cell.repetition, "subject": cell.subject_id,
            "state": cell.state, "score": cell.score if cell.HasField("score") else None,
            "status": STATUS_NAMES.get(cell.status, "unspecified") if cell.state == "selected" else None,
            "attempt_id": cell.attempt_id or None, "worker_id": cell.worker_id or None,
            "assignment_id": cell.assignment_id or None, "generation": cell.generation or None,
            "dispatch_order": cell.dispatch_order or None, "attempts": cell.attempts,
            "cost_usd": cell.cost_usd if cell.HasField("cost_usd") else None,
            "usage": USAGE_NAMES.get(cell.usage) if cell.state == "selected" else None,
            "incomplete_reason": cell.incomplete_reason or None,
            "incomplete_detail": cell.incomplete_detail or None,
            "started_ms": cell.started_ms if cell.HasField("started_ms") else None,
            "finished_ms": cell.finished_ms if cell.HasField("finished_ms") else None,
            "artifacts": [{"name": a.name, "digest": a.digest, "size_bytes": a.size_bytes} for a in cell.artifacts],
            "throttled": cell.throttled,
            # Attempts whose subject ran (late ones too), and the known cost of all but the one
            # that counts: work paid for more than once.
            "executions": cell.executions, "extra_execution_cost_usd": cell.extra_execution_cost_usd,
            # Recovered from the worker that kept it after a restore lost it (issue 23).
            "recovered_after_restore": cell.recovered,
        })
    s = resp.summary
    return {"cells": cells, "summary": {
        "selected": s.selected, "incomplete": s.incomplete, "observed_cost_usd": s.observed_cost_usd,
        "usage_complete": s.usage_complete, "state": RUN_STATE_NAMES.get(s.state, "unspecified"),
        "blocked_reason": s.blocked_reason, "peak_concurrent_groups": s.peak_concurrent_groups,
        "slots_offered": s.slots_offered, "late_reports": s.late_reports,
        "selected_cost_usd": s.selected_cost_usd,
        # What the spend cap counts (every report, throttled ones too), the cap (None: none), and
        # the throttled attempts of the cells in this response (a paged listing sums its pages:
        # tools/fleetctl/results_out.py).
        "run_observed_cost_usd": s.run_observed_cost_usd, "cost_cap_usd": s.cost_cap_usd or None,
        "throttled_attempts": sum(c["throttled"] for c in cells),
        # The same for the cells executed more than once and what their extra executions cost.
        **paid_twice(cells),
        "score_range": [s.score_range_low, s.score_range_high] if s.HasField("score_range_low") else None}}

def paid_twice(cells: list[dict]) -> dict:
    """The cells executed more than once among `cells`, and the known cost of their extra
    executions (summed per cell: a listing in pages adds its pages up, results_out.py)."""
    return {"executed_more_than_once": sum(1 for c in cells if c["executions"] > 1),
            "extra_execution_cost_usd": round(sum(c["extra_execution_cost_usd"] for c in cells), 9),
            "recovered_after_restore": sum(1 for c in cells if c.get("recovered_after_restore"))}

def status_json(resp: Any) -> dict:
    return {
        "runs": [{"run_id": r.run_id, "state": RUN_STATE_NAMES.get(r.state), "blocked_reason": r.blocked_reason,
                  "cells_total": r.cells_total, "cells_selected": r.cells_selected,
                  "cells_incomplete": r.cells_incomplete, "cells_running": r.cells_running,
                  "cells_exhausted": r.cells_exhausted, "retries": r.retries,
                  "groups": {g.state: g.count for g in r.group_counts},
                  "peak_concurrent_groups": r.peak_concurrent_groups, "slots_offered": r.slots_offered,
                  "max_concurrent_groups": r.max_concurrent_groups, "order_from": r.order_from or None,
                  "environment": {"reference_id": r.environment_id or None, "reference_keys": r.reference_keys,
                                  "pin_id": r.pin_environment_id or None, "pinned_by": r.pinned_by or None,
                                  "pinned_age_ms": r.pinned_age_ms if r.pin_environment_id else None},
                  "observed_cost_usd": r.observed_cost_usd, "cost_cap_usd": r.cost_cap_usd or None,
                  "pause_reason": r.pause_reason or None}
                 for r in resp.runs],
        "providers": [provider_json(p) for p in resp.providers],
        "workers": [worker_json(w) for w in resp.workers],
        "dead_letters": [{"worker_id": d.worker_id, "attempt_id": d.attempt_id, "reason": d.reason}
                         for d in resp.dead_letters],
        **({"worker_summary": summary_json(resp.worker_summary)} if resp.HasField("worker_summary") else {}),
    }

def worker_json(w: Any) -> dict:
    return {"worker_id": w.worker_id, "status": w.status, "incarnation": w.incarnation, "slots": w.slots,
            "busy_slots": w.busy_slots, "last_heartbeat_age_ms": w.last_heartbeat_age_ms,
            "environment_id": w.environment_id, "serves_runs": list(w.serves_runs),
            "refusal": {"run_id": w.refused_run_id, "reason": w.refused_reason,
                        "age_ms": w.refused_age_ms,
                        "differences": [{"key": d.key, "run": d.run_value, "worker": d.worker_value}
                                        for d in w.refused_differences]} if w.refused_run_id else None,
            "streak": w.streak, "degraded": w.degraded or None,
            "quarantine": {"until_ms": w.quarantined_until_ms or None,
                           "left_ms": w.quarantine_left_ms if w.quarantined_until_ms else None,
                           "reason": w.quarantine_reason, "probation": w.probation, "quarantines": w.quarantines}
            if w.quarantined_until_ms or w.probation else None}

def provider_json(p: Any) -> dict:
    """GetStatusResponse.providers: a limit of 0 is None (no limit yet, none declared)."""
    return {"name": p.name, "running": p.running, "peak_running": p.peak_running, "effective": p.effective or None,
            "declared": p.declared or None, "throttled": p.throttled, "retry_after_ms_total": p.retry_after_ms_total,
            "slow_start": p.slow_start, "last_throttled": p.last_throttled or None,
            "last_throttled_age_ms": p.last_throttled_age_ms if p.throttled else None}

def summary_json(s: Any) -> dict:
    """GetStatusResponse.worker_summary (asked for with WORKERS_VIEW_SUMMARY)."""
    return {"total": s.total, "counts": {c.state: c.count for c in s.counts}, "slots": s.slots,
            "busy_slots": s.busy_slots, "slowest": [worker_json(w) for w in s.slowest],
            "refused": [worker_json(w) for w in s.refused], "refused_total": s.refused_total,
            "quarantined": [worker_json(w) for w in s.quarantined], "quarantined_total": s.quarantined_total}


def shown_providers(providers: list[dict]) -> list[dict]:
    """The providers worth a table: none when the unnamed "default" alone, never throttled,
    is all there is (it says nothing)."""
    return providers if any(p["name"] != "default" or p["throttled"] for p in providers) else []
