"""The console's pages as HTML: pure functions of the dicts the Admin API's reads give
(common/report/shapes.py) and, for a run's heavy part, of the run's view (runview.py: the sums,
counts and few cells it draws, the same from the coordinator's ReadRunPage as from a full
listing), the sections of the static report where it has them (common/report/html.py: counts,
facts, timeline, scores, cost, providers, incomplete reasons), and the console's own (the fleet,
the matrix, paged tables, a cell's attempts, the actions).

Rules.
- Pure: no I/O, no clock (the time, when a page shows one, is an argument).
- Bounded: a page's size does not grow with the run or the fleet. A matrix of more than
  MATRIX_CELLS_MAX cells aggregates consecutive task groups into at most MATRIX_ROWS_MAX
  rows; tables show TABLE_ROWS_MAX rows a page; the timeline draws at most TIMELINE_CELLS_MAX
  attempts (beyond, the page says so and names `fleetctl report --html`).
- Every value a test or a script reads has an id or a data attribute, as in the report.
- What refreshes live is inside a `.live-part` (read again as a fragment on events, each as
  often as its own data-refresh-ms: a run's cheap progress every second, its heavy part as its
  cost allows); the forms an
  operator types into are outside it, so that a refresh never eats what is being typed.
- Every form that changes something carries the session's CSRF token and posts to the
  console's action routes (coordinator/console/server.py); a viewer sees no such form.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any
from urllib.parse import quote, urlencode

from common.report.html import (
    CSS,
    SCORES_NOTE,
    _duration,
    _usd,
    esc,
    layout,
    render_cost_of,
    render_incomplete_of,
    render_overview_of,
    render_providers,
    render_scores_of,
    render_timeline,
    render_timeline_section_of,
)
from common.report.names import STATUS_NAMES
from common.report.shapes import INCOMPLETE_REASONS, WHERE_KEYS, cell_matches
from coordinator.console import limits
from coordinator.console.runview import CELL_CLASSES, RunView, cell_class, cell_matches_filter, from_listing

CONSOLE_CSS = """
header.top { display: flex; align-items: center; gap: 18px; padding: 10px 24px; background: #24292f; color: #fff; }
header.top a { color: #fff; text-decoration: none; font-weight: 600; } header.top .sp { flex: 1; }
header.top .role { font-size: 12px; background: #57606a; padding: 2px 8px; border-radius: 10px; }
header.top form { margin: 0; } header.top button { font-size: 12px; }
#live-status { font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #57606a; }
#live-status[data-state="live"] { background: #2da44e; } #live-status[data-state="reconnecting"] { background: #bf8700; }
.bar { display: inline-block; width: 160px; height: 10px; background: #eaeef2; border-radius: 5px; overflow: hidden;
  vertical-align: middle; } .bar i { display: block; height: 100%; background: var(--pass); }
table.list td a { text-decoration: none; } .pager { margin: 6px 0; } .pager a { margin-right: 12px; }
.matrix { display: grid; gap: 1px; margin: 6px 0; font-size: 10px; }
.matrix .rl { color: var(--muted); white-space: nowrap; padding-right: 6px; overflow: hidden; }
.matrix .ch { color: var(--muted); writing-mode: vertical-rl; transform: rotate(180deg); max-height: 90px;
  overflow: hidden; }
.m { display: block; width: 14px; height: 14px; border-radius: 2px; background: #d0d7de; }
.m.pass { background: var(--pass); } .m.partial { background: var(--partial); } .m.zero { background: var(--zero); }
.m.unscored { background: #90a4ae; } .m.running { background: #0969da; } .m.waiting { background: #d0d7de; }
.m.held { background: #bf8700; } .m.exhausted { background: #24292f; }
.m.twice { outline: 2px solid #8250df; outline-offset: -2px; }
.agg { display: flex; width: 60px; height: 14px; background: #eaeef2; border-radius: 2px; overflow: hidden; }
.agg i { display: block; height: 100%; } .agg i.pass { background: var(--pass); } .agg i.partial { background: var(--partial); }
.agg i.zero { background: var(--zero); } .agg i.running { background: #0969da; } .agg i.held { background: #bf8700; }
.agg i.exhausted { background: #24292f; } .agg i.unscored { background: #90a4ae; }
.actions { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-end; margin: 8px 0; }
td.act form { display: inline-block; margin: 0 4px 0 0; }
.actions form { margin: 0; display: flex; gap: 6px; align-items: flex-end; }
.actions label { font-size: 12px; color: var(--muted); display: flex; flex-direction: column; }
button.danger { color: #cf222e; } #events { font: 12px ui-monospace, monospace; max-height: 180px; overflow-y: auto;
  background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; list-style: none; }
.login { max-width: 420px; margin: 80px auto; } .login input { width: 100%; padding: 6px; }
pre.artifact { background: var(--panel); border: 1px solid var(--line); padding: 10px; overflow: auto; max-height: 600px; }
"""

def shell(title: str, body: str, *, principal: Any = None, run_filter: str = "", live: bool = True) -> str:
    """The page around `body`: the header (who is logged in, the live indicator), the styles and
    the one script (served by the console, no build step, nothing from the internet)."""
    who = ""
    if principal is not None:
        logout = ("" if principal.via != "session" else
                  f'<form method="post" action="/logout"><input type="hidden" name="csrf" value="{esc(principal.csrf)}">'
                  '<button type="submit" id="logout">log out</button></form>')
        who = f'<span class="role" id="role" data-role="{esc(principal.role)}">{esc(principal.role)}</span>{logout}'
    indicator = '<span id="live-status" data-state="connecting">connecting</span>' if live else ""
    script = '<script src="/static/console.js" defer></script>' if live else ""
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="referrer" content="no-referrer"><title>{esc(title)}</title>'
            f'<style>{CSS}{CONSOLE_CSS}</style>{script}</head>'
            f'<body data-run-filter="{esc(run_filter)}"><header class="top"><a href="/" id="nav-fleet">fleet console</a>'
            f'<span class="sp"></span>{indicator}{who}</header><main>{body}</main></body></html>\n')


def login_page(message: str = "", next_path: str = "/") -> str:
    msg = f'<p class="warn" id="login-error">{esc(message)}</p>' if message else ""
    body = (f'<div class="login"><h1>fleet console</h1>{msg}<p class="note">Log in with the viewer token '
            '(<code>viewer.token</code>, to look) or the admin token (<code>admin.token</code>, to act), both in '
            'the coordinator\'s data directory.</p>'
            '<form method="post" action="/login" id="login-form">'
            f'<input type="hidden" name="next" value="{esc(next_path)}">'
            '<p><input type="password" name="token" id="token" autocomplete="current-password" placeholder="token" '
            'required></p><p><button type="submit" id="login-submit">log in</button></p></form></div>')
    return shell("fleet console: log in", body, live=False)


def message_page(title: str, text: str, *, principal: Any = None, back: str = "/", element_id: str = "message",
                 data: dict[str, str] | None = None, extra: str = "") -> str:
    attrs = "".join(f' data-{k}="{esc(v)}"' for k, v in (data or {}).items())
    body = (f'<h1>{esc(title)}</h1><div id="{esc(element_id)}"{attrs}><p>{esc(text)}</p>{extra}</div>'
            f'<p><a href="{esc(back)}" id="back">back</a></p>')
    return shell(title, body, principal=principal, live=False)


def _csrf(principal: Any) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(principal.csrf)}">'


def _button_form(principal: Any, action: str, label: str, element_id: str, fields: dict[str, str] | None = None,
                 danger: bool = False) -> str:
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in (fields or {}).items())
    return (f'<form method="post" action="{esc(action)}">{_csrf(principal)}{hidden}'
            f'<button type="submit" id="{esc(element_id)}"{" class=danger" if danger else ""}>{esc(label)}</button></form>')


def _pager(base: str, params: dict[str, str], page: int, pages: int, anchor: str) -> str:
    if pages <= 1:
        return ""
    links = []
    for label, p in (("« first", 0), ("‹ previous", page - 1), ("next ›", page + 1), ("last »", pages - 1)):
        if 0 <= p < pages and p != page:
            links.append(f'<a href="{esc(base)}?{esc(urlencode({**params, "page": p}))}#{anchor}">{label}</a>')
    return f'<div class="pager" data-page="{page}" data-pages="{pages}">page {page + 1} of {pages} {"".join(links)}</div>'


def _score(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def eta_text(eta_s: float | None) -> str:
    if eta_s is None:
        return "?"
    return _duration(eta_s * 1000)


# ---- the fleet -----------------------------------------------------------------------------

def fleet_live(status: dict, workers: list[dict], page: int, etas: dict[str, float | None],
               actions: list[dict], principal: Any, refresh_ms: int) -> str:
    """Every run with progress, ETA and cost; every worker (paged, counts by state past 50)."""
    runs = status.get("runs") or []
    rows = []
    for r in runs:
        total = r["cells_total"] or 0
        done = r["cells_selected"] + r["cells_exhausted"]
        frac = done / total if total else 0.0
        cap = f" of {_usd(r['cost_cap_usd'])}" if r.get("cost_cap_usd") else ""
        rows.append(
            f'<tr data-run-id="{esc(r["run_id"])}" data-state="{esc(r["state"])}" data-selected="{r["cells_selected"]}" '
            f'data-total="{total}" data-running="{r["cells_running"]}">'
            f'<td><a href="/runs/{quote(r["run_id"])}">{esc(r["run_id"])}</a></td><td>{esc(r["state"])}'
            + (f' ({esc(r["blocked_reason"])})' if r.get("blocked_reason") else "")
            + (f' ({esc(r["pause_reason"])})' if r.get("pause_reason") else "") + "</td>"
            f'<td><span class="bar"><i style="width:{100 * frac:.1f}%"></i></span> '
            f'<span class="progress">{r["cells_selected"]}/{total} selected</span></td>'
            f'<td class="n">{r["cells_running"]}</td><td class="n">{r["cells_incomplete"]}</td>'
            f'<td class="n">{r["retries"]}</td><td class="n eta">{esc(eta_text(etas.get(r["run_id"])))}</td>'
            f'<td class="n">{_usd(r["observed_cost_usd"])}{cap}</td></tr>')
    runs_html = ('<table id="runs" class="list" data-runs="{}"><thead><tr><th>run</th><th>state</th><th>progress</th>'
                 '<th>running</th><th>incomplete</th><th>retries</th><th>ETA</th><th>observed cost</th></tr></thead>'
                 '<tbody>{}</tbody></table>').format(len(runs), "".join(rows)) if runs else \
        '<p id="runs" data-runs="0">No run has been submitted yet (<code>fleetctl submit SPEC</code>).</p>'
    counts = Counter(w["status"] for w in workers)
    slots = sum(w["slots"] for w in workers)
    busy = sum(w["busy_slots"] for w in workers)
    counts_html = "".join(f'<li data-worker-state="{esc(s)}"><b data-count="{n}">{n}</b><span class="label">'
                          f'{esc(s)}</span></li>' for s, n in counts.most_common())
    pages = max(1, math.ceil(len(workers) / limits.TABLE_ROWS_MAX))
    page = min(max(0, page), pages - 1)
    shown = workers[page * limits.TABLE_ROWS_MAX:(page + 1) * limits.TABLE_ROWS_MAX]
    wrows = []
    for w in shown:
        ref = w.get("refusal")
        refusal = ""
        if ref:
            diffs = ", ".join(f'{d["key"]}: run {d["run"]!s} ≠ worker {d["worker"]!s}' for d in ref["differences"][:5])
            refusal = (f'<span class="refusal" data-run="{esc(ref["run_id"])}">{esc(ref["reason"])} by '
                       f'{esc(ref["run_id"])}' + (f" ({esc(diffs)})" if diffs else "") + "</span>")
        act = ""
        if principal.can_act and w["status"] not in ("gone",):
            act = _button_form(principal, f"/workers/{quote(w['worker_id'])}/drain", "drain",
                               f"drain-{w['worker_id']}")
            if w.get("quarantine"):
                act += _button_form(principal, f"/workers/{quote(w['worker_id'])}/release", "release",
                                    f"release-{w['worker_id']}")
        lost = w["status"] in ("expired", "gone")
        wrows.append(
            f'<tr data-worker-id="{esc(w["worker_id"])}" data-state="{esc(w["status"])}" data-busy="{w["busy_slots"]}" '
            f'data-slots="{w["slots"]}"><td>{esc(w["worker_id"])}</td><td class="wstate">{esc(w["status"])}'
            + (' <b class="lost">lost</b>' if lost else "") + "</td>"
            f'<td class="n">{w["busy_slots"]}/{w["slots"]}</td><td class="n">{_duration(w["last_heartbeat_age_ms"])} ago</td>'
            f'<td>{esc(", ".join(w["serves_runs"]))}</td><td>{refusal}</td><td class="act">{act}</td></tr>')
    workers_html = (f'<ul class="counts" id="worker-counts" data-workers="{len(workers)}" data-slots="{slots}" '
                    f'data-busy="{busy}"><li><b>{len(workers)}</b><span class="label">workers</span></li>'
                    f'<li><b>{busy}/{slots}</b><span class="label">slots in use</span></li>{counts_html}</ul>'
                    + ('<table id="workers" class="list"><thead><tr><th>worker</th><th>state</th><th>slots</th>'
                       '<th>last heard</th><th>serves</th><th>last refusal</th><th></th></tr></thead>'
                       f'<tbody>{"".join(wrows)}</tbody></table>' if workers else
                       '<p id="workers">No worker has registered yet.</p>')
                    + _pager("/", {}, page, pages, "fleet-workers"))
    recent = "".join(f'<tr><td>{esc(a["at"])}</td><td>{esc(a["who"])}</td><td>{esc(a["action"])}</td>'
                     f'<td>{esc(a["target"])}</td><td>{esc(a["outcome"])}</td></tr>' for a in reversed(actions[-10:]))
    actions_html = ('<table id="recent-actions"><thead><tr><th>when</th><th>who</th><th>action</th><th>on</th>'
                    f'<th>outcome</th></tr></thead><tbody>{recent}</tbody></table>' if actions else
                    '<p class="note" id="recent-actions">No action taken from the console since the coordinator started.</p>')
    return (f'<div id="live" class="live-part" data-part="1" data-page="fleet" data-refresh-ms="{refresh_ms}">'
            f'<section id="fleet-runs"><h2>Runs</h2>{runs_html}</section>'
            f'<section id="fleet-workers"><h2>Workers</h2>{workers_html}</section>'
            f'<section id="fleet-actions"><h2>Recent actions</h2>{actions_html}</section></div>')


def events_box() -> str:
    return ('<section><h2>Events</h2><p class="note">As they happen, newest first (the stream of '
            '<code>fleetctl watch</code>).</p><ul id="events" data-events="0"></ul></section>')


def fleet_page(live_html: str, principal: Any) -> str:
    return shell("fleet console", f'<h1>Fleet</h1>{live_html}{events_box()}', principal=principal)


# ---- a run ---------------------------------------------------------------------------------

def _matrix(run_id: str, view: RunView) -> str:
    subjects = view.subjects
    n_sub = len(subjects)
    legend = ('<ul class="legend">' + "".join(f'<li><span class="m {k}" style="display:inline-block"></span> {k}</li>'
                                             for k in CELL_CLASSES)
              + '<li><span class="m pass twice" style="display:inline-block"></span> executed more than once</li></ul>')
    head = '<span class="rl"></span>' + "".join(f'<span class="ch" title="{esc(s)}">{esc(s)}</span>' for s in subjects)
    if view.matrix_cells is not None:
        cells = view.matrix_cells
        groups = {key: i for i, key in enumerate(view.groups)}
        column = {s: i for i, s in enumerate(subjects)}
        grid: list[list[dict | None]] = [[None] * n_sub for _ in range(len(groups))]
        for c in cells:
            grid[groups[(c["task"], c["repetition"])]][column[c["subject"]]] = c
        parts = []
        for (task, rep), gi in groups.items():
            parts.append(f'<span class="rl">{esc(task)}{"" if rep in (0, None) and len(groups) == len({t for t, _ in groups}) else f" r{rep}"}</span>')
            for c in grid[gi]:
                if c is None:
                    parts.append('<span></span>')
                    continue
                cls = cell_class(c) + (" twice" if (c.get("executions") or 0) > 1 else "")
                title = f'{c["cell_id"]} · {c["state"]}' + (f' · score {c["score"]:g}' if c.get("score") is not None else "") \
                    + (f' · {c["incomplete_reason"]}' if c.get("incomplete_reason") else "") \
                    + (f' · worker {c["worker_id"]}' if c.get("worker_id") else "")
                parts.append(f'<a class="m {cls}" href="/runs/{quote(run_id)}/cells/{quote(c["cell_id"])}" '
                             f'data-cell="{esc(c["cell_id"])}" data-class="{cls.split()[0]}" '
                             f'data-worker="{esc(c.get("worker_id") or "")}" title="{esc(title)}"></a>')
        return (f'<p class="note">Task × repetition (rows) by subject (columns), one square a cell.</p>{legend}'
                f'<div class="matrix" id="matrix" data-mode="cells" data-cells="{view.cells_total}" '
                f'style="grid-template-columns: max-content repeat({n_sub}, 14px)">{head}{"".join(parts)}</div>')
    parts = []
    empty: Counter = Counter()
    for b, row in enumerate(view.buckets):
        lab = view.labels[b]
        parts.append(f'<span class="rl">{esc(lab[0])}{"–" + esc(lab[-1]) if len(lab) > 1 else ""}</span>')
        for si in range(n_sub):
            counts = row.get(si, empty)
            n = sum(counts.values()) or 1
            bars = "".join(f'<i class="{k}" style="width:{100 * counts[k] / n:.1f}%"></i>'
                           for k in CELL_CLASSES if counts[k] and k != "waiting")
            title = f"{subjects[si]}: " + ", ".join(f"{counts[k]} {k}" for k in CELL_CLASSES if counts[k])
            parts.append(f'<span class="agg" title="{esc(title)}">{bars}</span>')
    return (f'<p class="note" id="matrix-aggregated">{view.cells_total} cells: each row aggregates {view.per_row} '
            f'consecutive task groups (a bar per subject: the share of its cells in each state; grey is waiting).</p>'
            f'{legend}<div class="matrix" id="matrix" data-mode="aggregated" data-cells="{view.cells_total}" '
            f'data-rows="{len(view.buckets)}" style="grid-template-columns: max-content repeat({n_sub}, 60px)">'
            f'{head}{"".join(parts)}</div>')


def filter_cells(cells: list[dict], f: dict[str, str]) -> list[dict]:
    """The cells table's filter (runview.cell_matches_filter) over a list of cells."""
    return [c for c in cells if cell_matches_filter(c, f)]


def _cells_table(run_id: str, view: RunView, f: dict[str, str], principal: Any) -> str:
    pages = max(1, math.ceil(view.table_matched / limits.TABLE_ROWS_MAX))
    page = view.table_page
    rows = []
    for c in view.table_rows:
        retry = (_button_form(principal, f"/runs/{quote(run_id)}/cells/{quote(c['cell_id'])}/retry", "retry",
                              f"retry-{c['cell_id']}") if principal.can_act and c["state"] == "incomplete" else "")
        rows.append(f'<tr data-cell-id="{esc(c["cell_id"])}" data-state="{esc(c["state"])}" data-class="{cell_class(c)}">'
                    f'<td><a href="/runs/{quote(run_id)}/cells/{quote(c["cell_id"])}">{esc(c["cell_id"])}</a></td>'
                    f'<td>{esc(c["state"])}</td><td class="n">{_score(c.get("score"))}</td>'
                    f'<td>{esc(c.get("incomplete_reason") or c.get("status") or "")}</td>'
                    f'<td>{esc(c.get("worker_id") or "")}</td><td class="n">{c.get("attempts") or 0}</td>'
                    f'<td class="n">{_usd(c.get("cost_usd")) if c["state"] == "selected" else ""}</td><td>{retry}</td></tr>')
    params = {k: v for k, v in f.items() if v}
    return (f'<table id="cells" class="list" data-cells="{view.table_matched}"><thead><tr><th>cell</th><th>state</th>'
            '<th>score</th><th>status / reason</th><th>worker</th><th>attempts</th><th>cost</th><th></th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            + _pager(f"/runs/{run_id}", params, page, pages, "cells-section"))


def _retries_and_refusals(view: RunView, status: dict, run_id: str) -> str:
    kinds, causes, lost_by_worker = view.attempt_kinds, view.retry_causes, view.lost_by_worker
    refused = [w for w in status.get("workers") or [] if w.get("refusal") and w["refusal"]["run_id"] == run_id]
    kinds_html = "".join(f'<li data-kind="{esc(k)}" data-count="{n}"><b>{n}</b> {esc(k)}</li>'
                         for k, n in sorted(kinds.items()))
    causes_html = "".join(f'<li data-cause="{esc(k)}" data-count="{n}"><b>{n}</b> {esc(k)}</li>'
                          for k, n in causes.most_common())
    lost_html = "".join(f'<li data-worker="{esc(k)}" data-count="{n}"><b>{n}</b> on {esc(k)}</li>'
                        for k, n in lost_by_worker.most_common(10))
    ref_html = "".join(
        f'<tr data-worker-id="{esc(w["worker_id"])}"><td>{esc(w["worker_id"])}</td><td>{esc(w["refusal"]["reason"])}</td>'
        f'<td>{esc(", ".join(d["key"] for d in w["refusal"]["differences"]))}</td></tr>' for w in refused[:50])
    return (f'<h3>Attempts by what became of them</h3><ul class="reasons" id="attempt-kinds">{kinds_html}</ul>'
            + (f'<h3>Retried attempts by cause</h3><ul class="reasons" id="retry-causes">{causes_html}</ul>'
               if causes else "")
            + (f'<h3>Lost attempts (their worker went away)</h3><ul class="reasons" id="lost-attempts">{lost_html}</ul>'
               if lost_html else "")
            + (f'<h3>Workers this run refused</h3><table id="refusals"><thead><tr><th>worker</th><th>reason</th>'
               f'<th>differing keys</th></tr></thead><tbody>{ref_html}</tbody></table>' if refused else
               '<p class="note" id="refusals" data-refused="0">No worker was refused by this run.</p>'))


def _environment(run: dict) -> str:
    env = run.get("environment") or {}
    pin = env.get("pin_id")
    return ('<dl class="facts" id="environment">'
            f'<dt>reference</dt><dd>{esc(env.get("reference_id") or "none declared")} '
            f'({env.get("reference_keys") or 0} keys)</dd>'
            f'<dt>pinned to</dt><dd id="env-pin" data-pin="{esc(pin or "")}">'
            + (f'{esc(pin)} by worker {esc(env.get("pinned_by"))}' if pin else "not yet (no worker has run a group)")
            + '</dd></dl>')


def run_live(run_id: str, results: dict, status: dict, attempts: list[Any], f: dict[str, str], page: int,
             eta_s: float | None, principal: Any, refresh_ms: int) -> str:
    """The heavy part from a full listing (GetResults' cells, ListAttempts' records)."""
    return run_live_view(run_id, from_listing(results, attempts, f, page), status, f, eta_s, principal, refresh_ms)


def run_live_view(run_id: str, view: RunView, status: dict, f: dict[str, str], eta_s: float | None, principal: Any,
                  refresh_ms: int) -> str:
    """The heavy part (#live) from the run's view (coordinator/console/runview.py): the same page
    for a run of any size, at the cost of what it shows."""
    summary = view.summary
    runs = status.get("runs") or []
    run = runs[0] if runs else {}
    subject_order = {s: i for i, s in enumerate(view.subjects)}
    if view.timeline is not None:
        lanes = layout(view.timeline, status, subject_order)
        timeline_html, tstats = render_timeline(lanes, int(summary.get("late_reports") or 0))
        timeline_section = render_timeline_section_of(view.counts["attempts"], view.timeline_with_worker,
                                                      timeline_html)
    else:
        lanes = layout([], status, subject_order)
        tstats = {"bars": view.groups_dispatched}
        timeline_section = (f'<section id="timeline"><h2>Timeline per worker slot</h2><p class="note" id="timeline-omitted" '
                            f'data-groups="{view.groups_dispatched}" data-attempts="{view.timeline_entries}">'
                            f'{view.timeline_entries} attempts in {view.groups_dispatched} group dispatches: more than '
                            f'the {limits.TIMELINE_CELLS_MAX} attempts the console draws; <code>fleetctl report '
                            f'{esc(run_id)} --html FILE</code> draws them all.</p></section>')
    scores_html, n_subjects = render_scores_of(view.stats, view.diffs, summary.get("score_range"))
    incomplete_html, _ = render_incomplete_of(view.incomplete_reasons, view.incomplete_shown, view.incomplete_total)
    selected = summary.get("selected", 0)
    return (f'<div id="live" class="live-part" data-part="1" data-page="run" data-run-id="{esc(run_id)}" '
            f'data-refresh-ms="{refresh_ms}" '
            f'data-state="{esc(summary.get("state"))}" data-cells-total="{view.cells_total}" '
            f'data-cells-selected="{selected}">'
            + render_overview_of(view.counts, summary, status, view.timeline_kinds, lanes, tstats, n_subjects)
            + f'<section id="matrix-section"><h2>Cells</h2>{_matrix(run_id, view)}</section>'
            + f'<section id="subjects"><h2>Scores per subject</h2>{SCORES_NOTE}{scores_html}</section>'
            + f'<section id="retries"><h2>Retries and refusals</h2>{_retries_and_refusals(view, status, run_id)}'
            f'<h3>Incomplete cells</h3>{incomplete_html}</section>'
            + f'<section id="cost"><h2>Cost: observed against selected</h2>{render_cost_of(view.cost, summary)}</section>'
            + render_providers(status.get("providers") or [])
            + timeline_section
            + f'<section id="environment-section"><h2>Environment</h2>{_environment(run)}</section>'
            + f'<section id="cells-section"><h2>Cells, listed</h2>{_cells_table(run_id, view, f, principal)}</section>'
            + "</div>")


def run_progress(run: dict, eta_s: float | None, refresh_ms: int) -> str:
    """The run's progress from its status alone (cheap at any size): refreshed on its own, as
    often as every second, while the heavier part (#live) is read as often as its cost allows."""
    groups = run.get("groups") or {}
    total, selected = run.get("cells_total", 0), run.get("cells_selected", 0)
    return (f'<div id="live-progress" class="live-part" data-part="progress" data-refresh-ms="{refresh_ms}">'
            f'<p id="progress" data-state="{esc(run.get("state"))}" data-selected="{selected}" data-total="{total}" '
            f'data-running="{run.get("cells_running", 0)}" data-exhausted="{run.get("cells_exhausted", 0)}" '
            f'data-groups-waiting="{groups.get("waiting", 0)}" data-groups-assigned="{groups.get("assigned", 0)}" '
            f'data-groups-settled="{groups.get("settled", 0)}"><span class="bar"><i style="width:'
            f'{100 * selected / total if total else 0:.1f}%"></i></span> <b>{selected}/{total}</b> selected · '
            f'{run.get("cells_running", 0)} running · {run.get("cells_exhausted", 0)} out of attempts · '
            f'{run.get("retries", 0)} retries · groups: {groups.get("waiting", 0)} waiting, '
            f'{groups.get("assigned", 0)} assigned, {groups.get("settled", 0)} settled · {esc(run.get("state"))} · ETA '
            f'<span id="eta">{esc(eta_text(eta_s))}</span></p></div>')


def _filter_form(run_id: str, f: dict[str, str]) -> str:
    def field(name: str, options: tuple[str, ...] | None = None) -> str:
        value = f.get(name, "")
        if options is not None:
            opts = "".join(f'<option value="{esc(o)}"{" selected" if o == value else ""}>{esc(o or "any")}</option>'
                           for o in ("", *options))
            return f'<label>{name}<select name="{name}" id="filter-{name}">{opts}</select></label>'
        return f'<label>{name}<input name="{name}" id="filter-{name}" value="{esc(value)}" size="12"></label>'

    return (f'<form method="get" action="/runs/{quote(run_id)}#cells-section" id="filter-form">'
            + field("state", ("selected", "incomplete", *CELL_CLASSES)) + field("reason", INCOMPLETE_REASONS)
            + field("subject") + field("worker") + field("task")
            + '<button type="submit" id="filter-submit">filter the cells</button></form>')


def _bulk_form(run_id: str, principal: Any) -> str:
    def field(name: str, options: tuple[str, ...] | None = None) -> str:
        if options is not None:
            opts = "".join(f'<option value="{esc(o)}">{esc(o or "any")}</option>' for o in ("", *options))
            return f'<label>{name}<select name="{name}" id="bulk-{name}">{opts}</select></label>'
        return f'<label>{name}<input name="{name}" id="bulk-{name}" size="12"></label>'

    return (f'<form method="post" action="/runs/{quote(run_id)}/retry/plan" id="bulk-form">{_csrf(principal)}'
            '<input type="hidden" name="state" value="incomplete">'
            + field("reason", INCOMPLETE_REASONS) + field("subject") + field("worker") + field("task")
            + '<button type="submit" id="bulk-dry-run">bulk retry: dry run</button></form>')


def run_page(run_id: str, live_html: str, run: dict, f: dict[str, str], principal: Any,
             progress_html: str = "") -> str:
    acts = ""
    if principal.can_act:
        base = f"/runs/{quote(run_id)}"
        repair = ""
        if run.get("blocked_reason"):
            repair = _button_form(principal, f"{base}/repair", f"repair ({run['blocked_reason']})", "action-repair",
                                  {"reason": run["blocked_reason"]})
        acts = (f'<section id="run-actions"><h2>Actions</h2><div class="actions">'
                + _button_form(principal, f"{base}/pause", "pause", "action-pause", danger=True)
                + _button_form(principal, f"{base}/recover", "recover", "action-recover") + repair
                + f'</div><div class="actions">{_bulk_form(run_id, principal)}</div>'
                '<p class="note">A bulk retry first lists exactly the cells it would grant one more attempt; '
                'nothing is retried until that list is confirmed.</p></section>')
    body = (f'<h1>Run <code id="run-id">{esc(run_id)}</code></h1>{progress_html}{live_html}{acts}'
            f'<section><h2>Filter the cells</h2><div class="actions">{_filter_form(run_id, f)}</div></section>'
            f'{events_box()}')
    return shell(f"run {run_id}", body, principal=principal, run_filter=run_id)


def bulk_plan_page(run_id: str, plan_id: str, where: dict[str, str], cell_ids: list[str], principal: Any) -> str:
    what = ", ".join(f"{k}={v}" for k, v in where.items()) or "every incomplete cell"
    items = "".join(f'<li data-cell="{esc(c)}">{esc(c)}</li>' for c in cell_ids)
    confirm = (f'<form method="post" action="/runs/{quote(run_id)}/retry/confirm" id="bulk-confirm-form">{_csrf(principal)}'
               f'<input type="hidden" name="plan" value="{esc(plan_id)}">'
               f'<button type="submit" id="bulk-confirm" class="danger">retry these {len(cell_ids)} cells</button></form>'
               if cell_ids else "")
    body = (f'<h1>Bulk retry of run <code>{esc(run_id)}</code>: dry run</h1>'
            f'<div id="bulk-plan" data-count="{len(cell_ids)}" data-where="{esc(what)}">'
            f'<p>{len(cell_ids)} incomplete cell{"s" if len(cell_ids) != 1 else ""} match {esc(what)}'
            + (": exactly these would be granted one more attempt (through the same RetryCell as "
               "<code>fleetctl retry</code>). Nothing has been retried yet.</p>" if cell_ids else
               ": nothing to retry.</p>")
            + f'<ol id="bulk-cells">{items}</ol></div>{confirm}'
            f'<p><a href="/runs/{quote(run_id)}" id="back">back to the run (nothing retried)</a></p>')
    return shell(f"bulk retry {run_id}", body, principal=principal, live=False)


def bulk_done_page(run_id: str, outcomes: list[tuple[str, str]], principal: Any) -> str:
    granted = sum(1 for _, o in outcomes if o == "accepted")
    items = "".join(f'<li data-cell="{esc(c)}" data-outcome="{esc(o)}">{esc(c)}: {esc(o)}</li>' for c, o in outcomes)
    body = (f'<h1>Bulk retry of run <code>{esc(run_id)}</code></h1>'
            f'<div id="bulk-result" data-granted="{granted}" data-count="{len(outcomes)}"><p>{granted} of '
            f'{len(outcomes)} cells granted one more attempt.</p><ul>{items}</ul></div>'
            f'<p><a href="/runs/{quote(run_id)}" id="back">back to the run</a></p>')
    return shell(f"bulk retry {run_id}", body, principal=principal, live=False)


def bulk_matches(cells: list[dict], where: dict[str, str]) -> list[str]:
    return [c["cell_id"] for c in cells if cell_matches(c, where)]


# ---- a cell --------------------------------------------------------------------------------

def cell_live(run_id: str, cell: dict, attempts: list[Any], refresh_ms: int) -> str:
    rows = []
    for a in sorted(attempts, key=lambda a: a.dispatch_order):
        rows.append(
            f'<tr data-attempt-id="{esc(a.attempt_id)}" data-kind="{esc(a.kind)}"><td>{esc(a.attempt_id)}</td>'
            f'<td>{esc(a.kind)}</td><td>{esc(a.worker_id)}</td><td>{esc(a.assignment_id)}</td>'
            f'<td class="n">{a.generation}</td><td class="n">{a.dispatch_order}</td>'
            f'<td>{esc(STATUS_NAMES.get(a.status, "unspecified"))}</td>'
            f'<td class="n">{f"{a.score:g}" if a.HasField("score") else ""}</td>'
            f'<td class="n">{_usd(a.cost_usd) if a.HasField("cost_usd") else "unknown"}</td>'
            f'<td class="n">{_duration(a.finished_ms - a.started_ms) if a.HasField("started_ms") and a.HasField("finished_ms") else ""}</td>'
            f'<td>{esc(a.detail)}</td></tr>')
    arts = "".join(
        f'<tr data-artifact="{esc(x["name"])}"><td>{esc(x["name"])}</td><td class="n">{x["size_bytes"]}</td>'
        f'<td><a href="/artifacts/{quote(x["digest"])}?name={quote(x["name"])}" id="open-{esc(x["name"])}">open</a> · '
        f'<a href="/artifacts/{quote(x["digest"])}?name={quote(x["name"])}&amp;download=1">download</a></td>'
        f'<td><code>{esc(x["digest"][:23])}…</code></td></tr>' for x in cell.get("artifacts") or [])
    score = cell.get("score")
    return (f'<div id="live" class="live-part" data-part="1" data-page="cell" data-run-id="{esc(run_id)}" data-cell-id="{esc(cell["cell_id"])}" '
            f'data-refresh-ms="{refresh_ms}" data-state="{esc(cell["state"])}" data-class="{cell_class(cell)}" '
            f'data-score="{"" if score is None else repr(score)}">'
            f'<dl class="facts" id="cell-facts"><dt>state</dt><dd id="cell-state">{esc(cell["state"])}'
            + (f' ({esc(cell.get("incomplete_reason"))})' if cell.get("incomplete_reason") else "") + "</dd>"
            f'<dt>score</dt><dd id="cell-score">{"none" if score is None else f"{score:g}"}</dd>'
            f'<dt>status</dt><dd>{esc(cell.get("status") or "")}</dd>'
            f'<dt>provenance</dt><dd id="cell-provenance">worker {esc(cell.get("worker_id") or "-")}, assignment '
            f'{esc(cell.get("assignment_id") or "-")}, generation {esc(cell.get("generation") or "-")}, dispatch '
            f'#{esc(cell.get("dispatch_order") or "-")}, attempt {esc(cell.get("attempt_id") or "-")}</dd>'
            f'<dt>usage</dt><dd>{esc(cell.get("usage") or "")}; cost {_usd(cell.get("cost_usd"))}</dd>'
            f'<dt>attempts</dt><dd>{cell.get("attempts") or 0} dispatched, {cell.get("throttled") or 0} throttled, '
            f'{cell.get("executions") or 0} executions</dd>'
            + (f'<dt>last report said</dt><dd>{esc(cell.get("incomplete_detail"))}</dd>'
               if cell.get("incomplete_detail") else "") + '</dl>'
            f'<h2>Attempts</h2><table id="attempts" data-attempts="{len(attempts)}"><thead><tr><th>attempt</th><th>kind</th>'
            '<th>worker</th><th>assignment</th><th>gen</th><th>dispatch</th><th>status</th><th>score</th><th>cost</th>'
            f'<th>took</th><th>detail</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
            '<h2>Artifacts of the selected attempt</h2>'
            + (f'<table id="artifacts"><thead><tr><th>name</th><th>bytes</th><th></th><th>digest</th></tr></thead>'
               f'<tbody>{arts}</tbody></table>' if arts else '<p class="note" id="artifacts">No artifact (yet).</p>')
            + "</div>")


def cell_page(run_id: str, cell_id: str, live_html: str, incomplete: bool, principal: Any) -> str:
    act = ""
    if principal.can_act and incomplete:
        act = ('<div class="actions">' + _button_form(principal, f"/runs/{quote(run_id)}/cells/{quote(cell_id)}/retry",
                                                      "retry this cell", "action-retry-cell") + "</div>")
    body = (f'<p><a href="/runs/{quote(run_id)}" id="to-run">run {esc(run_id)}</a></p>'
            f'<h1>Cell <code id="cell-id">{esc(cell_id)}</code></h1>{act}{live_html}{events_box()}')
    return shell(f"cell {cell_id}", body, principal=principal, run_filter=run_id)


def artifact_page(name: str, text: str, truncated: bool, principal: Any, back: str) -> str:
    note = '<p class="note">Shown up to 1 MiB; download for the whole file.</p>' if truncated else ""
    body = f'<h1>{esc(name)}</h1>{note}<pre class="artifact" id="artifact-text">{esc(text)}</pre>' \
           f'<p><a href="{esc(back)}">back</a></p>'
    return shell(name, body, principal=principal, live=False)


__all__ = ["WHERE_KEYS", "cell_class", "fleet_page", "login_page", "run_page", "cell_page"]
