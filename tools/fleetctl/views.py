"""A run's results and the coordinator's status as plain dicts (the JSON of `--json`, also
what `fleetctl local` and the HTML report read), and their text tables."""
from __future__ import annotations

import datetime
import json
from typing import Any

from common.report.names import RUN_STATE_NAMES, STATUS_NAMES, USAGE_NAMES
from common.report.shapes import (  # noqa: F401  (re-exported: fleetctl reads them from here)
    paid_twice,
    provider_json,
    results_json,
    shown_providers,
    status_json,
    summary_json,
    worker_json,
)
from common.report.stats import (
    CI_METHODS,
    DISAGREE_FRACTION,
    describe,
    disagree,
    fmt,
    paired_differences,
    subject_stats,
)














def usd(x: float) -> str:
    return f"${x:.4f}" if abs(x) < 100 else f"${x:,.2f}"


def spend_text(observed: float, cap: float | None) -> str:
    """A run's spend against its cap (policy maxObservedCostUsd, or the last `recover --max-cost`)."""
    if not cap:
        return f"spend {usd(observed)} (no cap)"
    return f"spend {usd(observed)} of cap {usd(cap)} ({100 * observed / cap:.0f}%)"


def pause_text(run_id: str, reason: str, capped: bool) -> str:
    """Why the core paused a run, and the command that resumes it."""
    again = f"fleetctl recover {run_id} --max-cost DOLLARS" if capped else f"fleetctl recover {run_id}"
    return f" (paused: {reason} — resume with: {again})"


def print_providers(providers: list[dict]) -> None:
    """The providers table: cells running against each limit, what the runs declare, throttling."""
    rows = []
    for p in providers:
        last = "-"
        if p["throttled"]:
            last = f"{age(p['last_throttled_age_ms'] or 0)} ago" + (f": {p['last_throttled']}" if p["last_throttled"] else "")
        rows.append([p["name"], f"{p['running']}/{p['effective'] or '-'}", p["peak_running"], p["declared"] or "-",
                     p["throttled"], f"{p['retry_after_ms_total'] / 1000:.1f}s", "yes" if p["slow_start"] else "no",
                     last])
    print(table(rows, ["provider", "running/limit", "peak", "declared", "throttled", "retry-after waits",
                       "slow start", "last throttled"]))




def age(ms: int) -> str:
    s = ms / 1000
    if s < 120:
        return f"{s:.1f}s"
    return f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


def environment_line(env: dict) -> str:
    ref = (f"reference {env['reference_id']} ({env['reference_keys']} keys, fixed by the submitter)"
           if env["reference_id"] else "no reference (submitted without a manifest)")
    pin = (f"pin {env['pin_id']} fixed by worker {env['pinned_by']} at its first dispatch, "
           f"{age(env['pinned_age_ms'])} ago" if env["pin_id"] else "not pinned yet (pinned at the first dispatch)")
    return f"environment: {ref}; {pin}"


def refusal_lines(worker_id: str, refusal: dict, shown_max: int = 10) -> str:
    lines = [f"worker {worker_id} refused by run {refusal['run_id']}: {refusal['reason']}"]
    diffs = refusal["differences"]
    for d in diffs[:shown_max]:
        lines.append(f"    {d['key']}: run {d['run']}, worker {d['worker']}")
    if len(diffs) > shown_max:
        lines.append(f"    ... and {len(diffs) - shown_max} more (fleetctl status --json lists them)")
    return "\n".join(lines)


def utc(ms: int) -> str:
    """A time on the coordinator's wall clock (ms since the epoch), to the second."""
    return datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def quarantine_cell(q: dict | None) -> str:
    """The workers table's quarantine column."""
    if q is None:
        return "-"
    if q["probation"]:
        return "probation"
    return f"{age(q['left_ms'] or 0)} left"


def quarantine_line(worker_id: str, q: dict, streak: int = 0) -> str:
    """A quarantined worker (or one on probation) with its evidence, and how to lift it."""
    lift = f"lift with: fleetctl release {worker_id}"
    if q["probation"]:
        return (f"worker {worker_id} on probation after quarantine {q['quarantines']}: its next infrastructure "
                f"failure quarantines it again ({q['reason'] or 'no reason kept'}); {lift}")
    return (f"worker {worker_id} quarantined, no new work for {age(q['left_ms'] or 0)} more (until "
            f"{utc(q['until_ms'])} on the coordinator's clock; quarantine {q['quarantines']} in a row): "
            f"{q['reason']}" + (f"; {streak} failures since" if streak else "") + f"; {lift}")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


# Up to this many workers are listed one per line; a larger fleet is summarised (counts by
# state, the slowest, the refused) unless `status --workers` asks for every line.
WORKERS_LISTED_MAX = 20
WORKERS_SLOWEST_SHOWN = 5
WORKERS_REFUSED_SHOWN = 5
WORKERS_QUARANTINED_SHOWN = 5


GONE_STATES = ("expired", "gone")  # no longer registered: counted, never "slowest"


def summarise_workers(workers: list[dict], shown: int = WORKERS_SLOWEST_SHOWN) -> dict:
    """The summary a coordinator builds (coordinator/views.py worker_summary), from a full
    list: for a coordinator that answers only with the list."""
    counts: dict[str, int] = {}
    for w in workers:
        counts[w["status"]] = counts.get(w["status"], 0) + 1
    live = [w for w in workers if w["status"].split()[0] not in GONE_STATES]
    refused = [w for w in workers if w["refusal"]]
    quarantined = [w for w in workers if w.get("quarantine")]
    return {"total": len(workers), "counts": dict(sorted(counts.items(), key=lambda x: (-x[1], x[0]))),
            "slots": sum(w["slots"] for w in workers), "busy_slots": sum(w["busy_slots"] for w in workers),
            "slowest": sorted(live, key=lambda w: -w["last_heartbeat_age_ms"])[:shown],
            "refused": refused[:WORKERS_REFUSED_SHOWN], "refused_total": len(refused),
            "quarantined": quarantined[:WORKERS_QUARANTINED_SHOWN], "quarantined_total": len(quarantined)}


def print_workers_summary(summary: dict) -> None:
    print(f"{summary['total']} workers: " + ", ".join(f"{n} {state}" for state, n in summary["counts"].items())
          + f"; {summary['busy_slots']}/{summary['slots']} slots busy (list them all with: fleetctl status --workers)")
    slowest = summary["slowest"]
    if slowest:
        print("slowest to be heard from:")
        print(table([[w["worker_id"], w["status"], age(w["last_heartbeat_age_ms"]), f"{w['busy_slots']}/{w['slots']}"]
                     for w in slowest], ["  worker", "status", "last heard", "busy"]))
    refused, total = summary["refused"], summary["refused_total"]
    if total:
        print(f"{total} workers refused by a run" + (f" (the first {len(refused)}):" if total > len(refused) else ":"))
        for w in refused:
            print(refusal_lines(w["worker_id"], w["refusal"]))
    quarantined, total = summary.get("quarantined") or [], summary.get("quarantined_total") or 0
    if total:
        print(f"{total} workers quarantined or on probation"
              + (f" (the first {len(quarantined)}):" if total > len(quarantined) else ":"))
        for w in quarantined:
            print(quarantine_line(w["worker_id"], w["quarantine"], w.get("streak") or 0))


def order_text(order_from: str | None) -> str:
    """Which order a run's groups were dispatched in (the policy's `orderFrom`)."""
    if order_from:
        return f"longest first, by the group durations observed in run {order_from}"
    return "spec order"


def dispatch_order(status: dict, run_id: str) -> dict:
    """The `dispatch_order` entry of `fleetctl results --json`, from `status_json`."""
    run = next((r for r in status["runs"] if r["run_id"] == run_id), None)
    source = run.get("order_from") if run else None
    return {"kind": "longest_first" if source else "spec", "from_run": source, "text": order_text(source)}


def print_status(data: dict, list_workers: bool = False) -> None:
    for r in data["runs"]:
        g = r["groups"]
        cap = r.get("cost_cap_usd")
        observed = r.get("observed_cost_usd") or 0.0
        print(f"run {r['run_id']}: {r['state']}"
              + (f" (blocked: {r['blocked_reason']} — repair with: fleetctl repair {r['run_id']} "
                 f"{json.dumps(r['blocked_reason'])})" if r["blocked_reason"] else "")
              + (pause_text(r["run_id"], r["pause_reason"], bool(cap) and observed >= cap)
                 if r.get("pause_reason") and r["state"] == "paused" else ""))
        print(f"  cells {r['cells_selected']}/{r['cells_total']} selected, {r['cells_running']} running, "
              f"{r['cells_incomplete']} incomplete; groups waiting {g.get('waiting', 0)}, "
              f"assigned {g.get('assigned', 0)}, settled {g.get('settled', 0)}; "
              f"peak {r['peak_concurrent_groups']} groups at once (cap {r['max_concurrent_groups']}, "
              f"{r['slots_offered']} slots offered)")
        print("  " + environment_line(r["environment"]))
        print("  dispatch order: " + order_text(r["order_from"]))
        print("  " + spend_text(observed, cap))
    providers = shown_providers(data.get("providers") or [])
    if providers:
        print_providers(providers)
    summary = data.get("worker_summary")
    if summary is not None and summary["total"] > len(data["workers"]):
        print_workers_summary(summary)  # the coordinator sent the summary alone
    elif len(data["workers"]) > WORKERS_LISTED_MAX and not list_workers:
        print_workers_summary(summarise_workers(data["workers"]))
    elif data["workers"]:
        quarantine = any(w.get("quarantine") for w in data["workers"])
        print(table([[w["worker_id"], w["status"], w["incarnation"], f"{w['busy_slots']}/{w['slots']}",
                      age(w["last_heartbeat_age_ms"]), w["environment_id"], len(w["serves_runs"]),
                      f"{w['refusal']['run_id']} {age(w['refusal']['age_ms'])} ago" if w["refusal"] else "-"]
                     + ([quarantine_cell(w.get("quarantine"))] if quarantine else [])
                     for w in data["workers"]],
                    ["worker", "status", "incarnation", "busy", "last heard", "environment", "serves", "refused by"]
                    + (["quarantine"] if quarantine else [])))
        for w in data["workers"]:
            if w["refusal"]:
                print(refusal_lines(w["worker_id"], w["refusal"]))
            if w.get("quarantine"):
                print(quarantine_line(w["worker_id"], w["quarantine"], w.get("streak") or 0))
            if w.get("degraded"):
                print(f"worker {w['worker_id']} takes no new work: {w['degraded']}")
    else:
        print("no workers registered")
    for d in data["dead_letters"]:
        print(f"dead letter: worker {d['worker_id']} attempt {d['attempt_id']}: {d['reason']}")


def print_results(data: dict, ci: str = "t") -> None:
    """The cells, then per subject the mean score and pass rate with 95% intervals (`ci`: "t",
    the analytic intervals, or "bootstrap", the seeded cluster bootstrap, with the analytic
    interval beside it wherever the two disagree), paired differences, incomplete cells."""
    assert ci in CI_METHODS, ci
    print_cells(data)
    score_range = data["summary"].get("score_range")
    boot = ci == "bootstrap"
    print_stats(subject_stats(data["cells"], score_range, bootstrap=boot),
                paired_differences(data["cells"], score_range, bootstrap=boot),
                scores_outside(data["cells"], score_range), score_range, ci,
                [c for c in data["cells"] if c["state"] != "selected"], 0, data["summary"])


def print_stats(stats: list, diffs: list, outside: list[dict], score_range: list[float] | None, ci: str,
                incomplete: list[dict], incomplete_more: int, summary: dict) -> None:
    """What `results` prints after the cells (also page by page: tools/fleetctl/results_out.py);
    `outside` and `incomplete` need cell_id, score or incomplete_reason and attempts."""
    boot = ci == "bootstrap"
    print()
    print(table([[s.subject, s.selected, s.incomplete, fmt(s.score_bootstrap if boot else s.score),
                  fmt(s.pass_rate_bootstrap if boot else s.pass_rate, percent=True)] for s in stats],
                ["subject", "selected", "incomplete", "mean score [95% CI, clustered by task]", "pass rate [95% CI]"]))
    if diffs:
        print()
        print(table([[f"{d.a} - {d.b}", d.difference.n, fmt(d.bootstrap if boot else d.difference)] for d in diffs],
                    ["paired difference", "pairs", "mean [95% CI]"]))
    if outside:
        print(f"\nwarning: {len(outside)} selected scores lie outside the declared benchmark.scoreRange "
              f"{score_range} (e.g. {outside[0]['cell_id']}: {outside[0]['score']:g}); intervals are still cut to it")
    if stats:
        first = stats[0]
        print(f"\nintervals: mean score: {describe(first.score_bootstrap if boot else first.score)}; "
              f"pass rate: {describe(first.pass_rate_bootstrap if boot else first.pass_rate)}"
              + ("" if score_range is not None else "; the spec declares no benchmark.scoreRange"))
    if boot:
        shown = [(f"{s.subject} mean score", s.score, s.score_bootstrap, False) for s in stats]
        shown += [(f"{s.subject} pass rate", s.pass_rate, s.pass_rate_bootstrap, True) for s in stats]
        shown += [(f"{d.a} - {d.b}", d.difference, d.bootstrap, False) for d in diffs]
        split = [(name, a, b, pct) for name, a, b, pct in shown if b is not None and disagree(a, b)]
        if split:
            print(f"bootstrap and analytic intervals differ by more than {DISAGREE_FRACTION:g} of the range "
                  "(few tasks, or scores piled at a bound): both are shown")
            for name, a, b, pct in split:
                print(f"  {name}: bootstrap {fmt(b, percent=pct)}; {describe(a)} {fmt(a, percent=pct)}")
    if incomplete:
        print("\nincomplete cells (not counted as zero):")
        for c in incomplete:
            print(f"  {c['cell_id']}: {c['incomplete_reason']} after {c['attempts']} attempts")
        if incomplete_more:
            print(f"  ... and {incomplete_more} more (every cell is in the table above, --csv and --json)")
    print_summary(summary)


def scores_outside(cells: list[dict], score_range: list[float] | None) -> list[dict]:
    """Selected cells whose score breaks the spec's declared range (a verifier's bug, or a wrong range)."""
    if score_range is None:
        return []
    lo, hi = score_range
    return [c for c in cells if c["state"] == "selected" and not lo <= c["score"] <= hi]


def with_stats(data: dict, ci: str = "t") -> dict:
    assert ci in CI_METHODS, ci
    data = dict(data)
    score_range, boot = data["summary"].get("score_range"), ci == "bootstrap"
    data["subjects"] = [s.as_dict() for s in subject_stats(data["cells"], score_range, bootstrap=boot)]
    data["paired_differences"] = [d.as_dict() for d in paired_differences(data["cells"], score_range, bootstrap=boot)]
    data["scores_outside_range"] = [c["cell_id"] for c in scores_outside(data["cells"], score_range)]
    return data


def print_cells(data: dict) -> None:
    rows = []
    for cell in data["cells"]:
        if cell["state"] == "selected":
            rows.append([cell["cell_id"], f"{cell['score']:g}", cell["status"], cell["worker_id"],
                         f"g{cell['generation']}", cell["attempts"],
                         "" if cell["cost_usd"] is None else f"{cell['cost_usd']:.4f}"])
        else:
            rows.append([cell["cell_id"], "-", f"incomplete: {cell['incomplete_reason']}", "", "", cell["attempts"], ""])
    print(table(rows, ["cell", "score", "status", "worker", "gen", "attempts", "cost_usd"]))


def print_summary(s: dict) -> None:
    print(f"\n{s['selected']} selected, {s['incomplete']} incomplete; run {s['state']}"
          f"{' (blocked: ' + s['blocked_reason'] + ')' if s['blocked_reason'] else ''}; observed cost "
          f"${s['observed_cost_usd']:.4f}{'' if s['usage_complete'] else ' (usage incomplete: the true cost is higher or unknown)'}"
          f"; {s['late_reports']} late reports"
          + (f"; {spend_text(s['run_observed_cost_usd'], s.get('cost_cap_usd'))}" if "run_observed_cost_usd" in s else "")
          + (f"; {s['throttled_attempts']} throttled attempts (not counted against maxAttemptsPerCell)"
             if s.get("throttled_attempts") else "")
          + (f"\n{paid_twice_text(s)}" if "executed_more_than_once" in s else ""))


def paid_twice_text(s: dict) -> str:
    """The results' line on work paid for more than once."""
    n = s["executed_more_than_once"]
    recovered = s.get("recovered_after_restore") or 0
    tail = (f"; {recovered} results recovered from the workers that kept them after a restore (not run again)"
            if recovered else "")
    if not n:
        return "executed more than once: 0 cells (no work paid for twice)" + tail
    return (f"executed more than once: {n} cells; their extra executions cost {usd(s['extra_execution_cost_usd'])} "
            "(known subtotal, in the observed cost)" + tail)
