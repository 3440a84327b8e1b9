"""The HTML of a run's report, shared by the static page (`fleetctl report RUN --html FILE`,
`fleetctl local --html FILE`, tools/fleetctl/report_page.py) and the coordinator's live console
(coordinator/console/): one self-contained page about a run, or its sections.

The page has a timeline per worker slot, the per-subject scores with 95% intervals
clustered by task (common/report/stats.py), the cost of the selected results against all observed
cost, and the incomplete cells with their reasons. It is one file with inline CSS and
inline SVG: no script, no font, no image and no stylesheet is fetched from anywhere, so it
can be mailed, archived or opened offline and always shows the same thing.

Rules.
- `render_html(results, status, timeline)` is pure: the same three inputs give the same
  bytes (no clock, no randomness); `results` and `status` are the dicts of
  `fleetctl results --json` and `fleetctl status --json` (common/report/shapes.py
  `results_json`, `status_json`), `timeline` a list of attempt entries (below).
- A timeline entry is one attempt of one cell: `worker_id`, `assignment_id`, `task`,
  `repetition`, `subject`, `cell_id`, `attempt_id`, `generation`, `dispatch_order`,
  `attempts`, `started_ms`, `finished_ms` (None when unknown), `score`, `status` and
  `kind`: "selected" for the attempt that counts, "retried" for an attempt whose cell was
  dispatched again, "late" for a report of a superseded assignment, "lost" for an attempt
  that never reported. The admin API exposes only the selected attempts today
  (`timeline_from_results`); every other kind comes from the optional `--attempts FILE`
  (`load_attempts`), kept apart so that nothing on the page is inferred.
- A bar is one assignment (one dispatch of one task group to one worker), spanning its
  cells' start and finish times; the cells are stripes inside it. A worker's bars are
  packed into slot lanes by their time intervals (greedy interval partitioning: a bar
  takes the lowest lane that is free at its start), so a lane is a slot as far as the
  times can tell; more lanes than the worker's slots is flagged, never hidden. What no bar
  covers is an idle gap and is drawn as one.
- Times are each worker's wall clock. When any bar lacks times, every bar is placed by
  dispatch order instead, one lane per worker, and the page says so.
- Counts have stable ids and data attributes (`#count-selected`, `data-cells-incomplete`,
  ...) so that a test, or a script, can read them from the rendered page.
"""
from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from common.report.names import STATUS_NAMES
from common.report.shapes import shown_providers
from common.report.stats import (
    Estimate,
    PairedDifference,
    SubjectStats,
    describe,
    paired_differences,
    subject_stats,
)

KINDS = ("selected", "retried", "late", "lost")
ENTRY_KEYS = ("kind", "worker_id", "assignment_id", "task", "repetition", "subject", "cell_id", "attempt_id",
              "generation", "dispatch_order", "attempts", "started_ms", "finished_ms", "score", "status")

# Geometry of the timeline, in SVG user units (the SVG scales to the page width).
LABEL_W = 150
PLOT_W = 1000
RIGHT_PAD = 20
LANE_H = 30
LABEL_ROW_H = 11  # the top of a bar holds its label; the cells are stripes below it
LANE_GAP = 4
WORKER_GAP = 14
AXIS_H = 26
MIN_BAR_W = 2.0
LABEL_MIN_W = 46  # a bar narrower than this gets no text label (its tooltip still has it)
AXIS_TICKS_TARGET = 8
FOREST_W = 220
FOREST_H = 16


# ---- the timeline's data -------------------------------------------------------------------

def timeline_from_results(results: dict) -> list[dict]:
    """One "selected" entry per selected cell, with its provenance and (when the coordinator
    reports them) its start and finish times."""
    out = []
    for c in results["cells"]:
        if c["state"] != "selected" or not c.get("worker_id"):
            continue
        out.append({
            "kind": "selected", "worker_id": c["worker_id"], "assignment_id": c.get("assignment_id"),
            "task": c["task"], "repetition": c["repetition"], "subject": c["subject"], "cell_id": c["cell_id"],
            "attempt_id": c.get("attempt_id"), "generation": c.get("generation"),
            "dispatch_order": c.get("dispatch_order"), "attempts": c.get("attempts"),
            "started_ms": c.get("started_ms"), "finished_ms": c.get("finished_ms"),
            "score": c.get("score"), "status": c.get("status"),
        })
    return out


class AttemptsFileError(ValueError):
    pass


def load_attempts(path: Path) -> list[dict]:
    """The optional `--attempts FILE`: a JSON list of timeline entries (or an object with an
    `attempts` list), e.g. every attempt of a run exported by a future admin RPC. Each entry
    needs `kind`, `worker_id` and `cell_id`; the other keys of ENTRY_KEYS are optional."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise AttemptsFileError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise AttemptsFileError(f"{path} is not JSON: {e}") from None
    if isinstance(data, dict):
        data = data.get("attempts")
    if not isinstance(data, list):
        raise AttemptsFileError(f"{path}: expected a list of attempts (or {{\"attempts\": [...]}})")
    out = []
    for i, raw in enumerate(data):
        if not isinstance(raw, dict):
            raise AttemptsFileError(f"{path}: attempts[{i}] is not an object")
        unknown = sorted(set(raw) - set(ENTRY_KEYS))
        if unknown:
            raise AttemptsFileError(f"{path}: attempts[{i}] has unknown keys: {', '.join(unknown)}")
        if raw.get("kind") not in KINDS:
            raise AttemptsFileError(f"{path}: attempts[{i}].kind must be one of {', '.join(KINDS)}")
        for key in ("worker_id", "cell_id"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise AttemptsFileError(f"{path}: attempts[{i}].{key} is required")
        for key in ("started_ms", "finished_ms", "generation", "dispatch_order", "attempts", "repetition"):
            value = raw.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise AttemptsFileError(f"{path}: attempts[{i}].{key} must be an integer")
        entry = {k: raw.get(k) for k in ENTRY_KEYS}
        if entry["task"] is None or entry["subject"] is None:
            task, rep, subject = _split_cell_id(entry["cell_id"])
            entry["task"] = entry["task"] or task
            entry["repetition"] = entry["repetition"] or rep
            entry["subject"] = entry["subject"] or subject
        out.append(entry)
    return out


def attempts_from_records(records: Iterable[Any]) -> list[dict]:
    """Timeline entries from the admin API's `ListAttempts` (pending attempts are not drawn)."""
    out = []
    for r in records:
        if r.kind not in KINDS:
            continue
        out.append({
            "kind": r.kind, "worker_id": r.worker_id, "assignment_id": r.assignment_id, "task": r.task_id,
            "repetition": r.repetition, "subject": r.subject_id, "cell_id": r.cell_id, "attempt_id": r.attempt_id,
            "generation": r.generation, "dispatch_order": r.dispatch_order, "attempts": None,
            "started_ms": r.started_ms if r.HasField("started_ms") else None,
            "finished_ms": r.finished_ms if r.HasField("finished_ms") else None,
            "score": r.score if r.HasField("score") else None,
            "status": STATUS_NAMES.get(r.status) if r.status else None,
        })
    return out


def _split_cell_id(cell_id: str) -> tuple[str, int | None, str]:
    """`task/rN/subject` as common.ids.cell_id_for writes it; unknown parts stay empty."""
    parts = cell_id.split("/")
    if len(parts) == 3 and parts[1][:1] == "r" and parts[1][1:].isdigit():
        return parts[0], int(parts[1][1:]), parts[2]
    return cell_id, None, ""


def merge_timeline(selected: list[dict], extra: Iterable[dict]) -> list[dict]:
    """The selected entries plus the extra ones, without a second copy of any attempt."""
    seen = {e["attempt_id"] for e in selected if e.get("attempt_id")}
    out = list(selected)
    for e in extra:
        if e.get("attempt_id") and e["attempt_id"] in seen:
            continue
        if e.get("attempt_id"):
            seen.add(e["attempt_id"])
        out.append(e)
    return out


@dataclass
class Bar:
    worker: str
    assignment: str
    task: str
    repetition: int | None
    generation: int | None
    cells: list[dict] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    lane: int = 0

    @property
    def kinds(self) -> set[str]:
        return {c["kind"] for c in self.cells}

    @property
    def label(self) -> str:
        return f"{self.task}/r{self.repetition}" if self.repetition is not None else self.task


@dataclass
class Lanes:
    mode: str  # "time" or "dispatch-order"
    t0: float
    t1: float
    workers: list[tuple[str, int, int | None, list[Bar]]]  # worker, lanes, slots (None: unknown), bars


def _timed(e: dict) -> bool:
    return e.get("started_ms") is not None and e.get("finished_ms") is not None


def build_bars(timeline: list[dict], subject_order: dict[str, int] | None = None) -> list[Bar]:
    """One bar per (worker, assignment); its cells in the spec's subject order when known."""
    order = subject_order or {}
    bars: dict[tuple[str, str], Bar] = {}
    for e in timeline:
        if not e.get("worker_id"):
            continue
        assignment = e.get("assignment_id") or f"{e.get('task')}/r{e.get('repetition')}:g{e.get('generation')}"
        key = (e["worker_id"], assignment)
        bar = bars.get(key)
        if bar is None:
            bar = bars[key] = Bar(e["worker_id"], assignment, str(e.get("task") or ""), e.get("repetition"),
                                  e.get("generation"))
        bar.cells.append(e)
    for bar in bars.values():
        bar.cells.sort(key=lambda c: (order.get(c.get("subject") or "", len(order)), c.get("subject") or "",
                                      c.get("dispatch_order") or 0))
    return list(bars.values())


def pack_lanes(bars: list[Bar]) -> int:
    """Assign each bar (of one worker) the lowest lane free at its start; returns the lane count."""
    ends: list[float] = []
    for bar in sorted(bars, key=lambda b: (b.start, b.end, b.assignment)):
        for i, end in enumerate(ends):
            if end <= bar.start:
                bar.lane, ends[i] = i, bar.end
                break
        else:
            bar.lane = len(ends)
            ends.append(bar.end)
    return len(ends)


def layout(timeline: list[dict], status: dict, subject_order: dict[str, int] | None = None) -> Lanes:
    bars = build_bars(timeline, subject_order)
    timed = bool(bars) and all(_timed(c) for b in bars for c in b.cells)
    if timed:
        for b in bars:
            b.start = min(c["started_ms"] for c in b.cells)
            b.end = max(max(c["finished_ms"], c["started_ms"]) for c in b.cells)
    else:
        fallback = 0
        for b in sorted(bars, key=lambda b: min(c.get("dispatch_order") or 0 for c in b.cells)):
            orders = [c.get("dispatch_order") for c in b.cells if c.get("dispatch_order")]
            if not orders:
                fallback += 1
                orders = [fallback]
            b.start, b.end = min(orders), max(orders) + 1
    slots = {w["worker_id"]: w.get("slots") for w in status.get("workers", [])}
    by_worker: dict[str, list[Bar]] = {}
    for b in bars:
        by_worker.setdefault(b.worker, []).append(b)
    for wid in slots:
        by_worker.setdefault(wid, [])
    workers = []
    for wid in sorted(by_worker):
        wbars = by_worker[wid]
        if timed:
            used = pack_lanes(wbars)
        else:
            for b in wbars:
                b.lane = 0
            used = 1 if wbars else 0
        n_slots = slots.get(wid)
        lanes = max(used, n_slots or 0, 1) if timed else 1
        workers.append((wid, lanes, n_slots, sorted(wbars, key=lambda b: (b.lane, b.start))))
    t0 = min((b.start for b in bars), default=0.0)
    t1 = max((b.end for b in bars), default=t0 + 1)
    if t1 <= t0:
        t1 = t0 + 1
    return Lanes("time" if timed else "dispatch-order", t0, t1, workers)


# ---- rendering -----------------------------------------------------------------------------

def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(x: float) -> str:
    """SVG coordinates: short and deterministic."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if not float(x).is_integer() else str(int(x))


def _nice_step(span: float, target: int) -> float:
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _duration(ms: float) -> str:
    s = ms / 1000
    if s < 10:
        return f"{s:.2f} s"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _usd(x: float | None) -> str:
    return "unknown" if x is None else f"${x:.4f}"


def _cell_class(c: dict) -> str:
    if c["kind"] != "selected":
        return c["kind"]
    score = c.get("score")
    if score is None:
        return "unscored"
    if score >= 1:
        return "pass"
    return "partial" if score > 0 else "zero"


def _cell_title(c: dict, mode: str) -> str:
    parts = [c.get("cell_id") or "", c["kind"]]
    if c.get("score") is not None:
        parts.append(f"score {c['score']:g}")
    if c.get("status"):
        parts.append(str(c["status"]))
    if c.get("attempt_id"):
        parts.append(f"attempt {c['attempt_id']}")
    if c.get("attempts"):
        parts.append(f"{c['attempts']} attempt{'s' if c['attempts'] != 1 else ''} of this cell")
    if mode == "time" and _timed(c):
        parts.append(_duration(c["finished_ms"] - c["started_ms"]))
    if c.get("dispatch_order"):
        parts.append(f"dispatch #{c['dispatch_order']}")
    return " · ".join(p for p in parts if p)


def render_timeline(lanes: Lanes, late_reports: int) -> tuple[str, dict]:
    span = lanes.t1 - lanes.t0
    scale = PLOT_W / span

    def x(t: float) -> float:
        return LABEL_W + (t - lanes.t0) * scale

    rows: list[str] = []
    y = AXIS_H
    stats = {"bars": 0, "idle_gaps": 0, "lanes": 0, "over_slots": 0, "redispatched": 0, "retried_cells": 0,
             "late_cells": 0}
    worker_notes: list[str] = []
    for wid, n_lanes, n_slots, bars in lanes.workers:
        top = y
        busy = sum(b.end - b.start for b in bars)
        over = n_slots is not None and n_lanes > n_slots
        stats["over_slots"] += over
        stats["lanes"] += n_lanes
        if lanes.mode == "time" and bars:
            denominator = span * max(1, n_slots or n_lanes)
            use = f"busy {100 * busy / denominator:.0f}% of {n_slots or n_lanes} slot{'s' if (n_slots or n_lanes) != 1 else ''}"
        else:
            use = "no groups of this run" if not bars else f"{len(bars)} groups"
        rows.append(f'<g class="worker" data-worker="{esc(wid)}" data-lanes="{n_lanes}" '
                    f'data-slots="{"" if n_slots is None else n_slots}" data-bars="{len(bars)}">')
        rows.append(f'<text class="wlabel" x="6" y="{_num(top + 14)}">{esc(wid)}</text>')
        rows.append(f'<text class="wsub" x="6" y="{_num(top + 27)}">{esc(use)}</text>')
        if over:
            worker_notes.append(f"{wid}: {n_lanes} overlapping lanes but {n_slots} slots "
                                "(late evidence overlapping its replacement, or clock steps)")
            rows.append(f'<text class="wwarn" x="6" y="{_num(top + 40)}">{n_lanes} lanes &gt; {n_slots} slots</text>')
        for lane in range(n_lanes):
            ly = top + lane * (LANE_H + LANE_GAP)
            in_lane = sorted((b for b in bars if b.lane == lane), key=lambda b: b.start)
            rows.append(f'<rect class="lane" x="{LABEL_W}" y="{_num(ly)}" width="{PLOT_W}" height="{LANE_H}">'
                        f'<title>{esc(wid)} slot lane {lane + 1}</title></rect>')
            cursor = lanes.t0
            gaps = []
            for b in in_lane:
                if b.start > cursor:
                    gaps.append((cursor, b.start))
                cursor = max(cursor, b.end)
            if cursor < lanes.t1:
                gaps.append((cursor, lanes.t1))
            if lanes.mode == "time":
                for g0, g1 in gaps:
                    stats["idle_gaps"] += 1
                    rows.append(f'<rect class="idle" x="{_num(x(g0))}" y="{_num(ly)}" width="{_num((g1 - g0) * scale)}" '
                                f'height="{LANE_H}"><title>{esc(wid)} lane {lane + 1} idle '
                                f'{esc(_duration(g1 - g0))}</title></rect>')
            for b in in_lane:
                rows.append(_bar_svg(b, ly, x, scale, lanes.mode, stats))
        rows.append("</g>")
        y = top + max(n_lanes * (LANE_H + LANE_GAP), 44 if over else 32) + WORKER_GAP
    height = y + 4
    axis = _axis_svg(lanes, x, height)
    legend = _legend()
    mode_note = ("Bars are placed by each worker's wall-clock start and finish times."
                 if lanes.mode == "time" else
                 "Times were not reported for every attempt: bars are placed by dispatch order, one lane per "
                 "worker; lengths are cell counts, not durations, and idle time cannot be shown.")
    late_note = ""
    drawn_late = stats["late_cells"]
    if late_reports and not drawn_late:
        late_note = (f'<p class="note" id="late-not-drawn" data-late-reports="{late_reports}">{late_reports} late '
                     "report(s) of superseded assignments are counted in the observed cost but not drawn: the admin "
                     "API does not list them yet (pass them with <code>--attempts FILE</code>).</p>")
    notes = "".join(f'<p class="warn">{esc(n)}</p>' for n in worker_notes)
    svg = (f'<svg class="timeline" viewBox="0 0 {LABEL_W + PLOT_W + RIGHT_PAD} {_num(height)}" '
           f'width="100%" role="img" aria-label="timeline per worker slot">'
           f'<defs><pattern id="hatch-idle" width="6" height="6" patternUnits="userSpaceOnUse" '
           f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f6f7f8"/>'
           f'<line x1="0" y1="0" x2="0" y2="6" stroke="#d5d9de" stroke-width="2"/></pattern>'
           f'<pattern id="hatch-late" width="5" height="5" patternUnits="userSpaceOnUse" '
           f'patternTransform="rotate(-45)"><rect width="5" height="5" fill="#bdbdbd"/>'
           f'<line x1="0" y1="0" x2="0" y2="5" stroke="#757575" stroke-width="2"/></pattern>'
           f'<pattern id="hatch-retried" width="5" height="5" patternUnits="userSpaceOnUse" '
           f'patternTransform="rotate(45)"><rect width="5" height="5" fill="#ffcc80"/>'
           f'<line x1="0" y1="0" x2="0" y2="5" stroke="#e65100" stroke-width="2"/></pattern></defs>'
           f'{axis}{"".join(rows)}</svg>')
    body = (f'<p class="note" id="timeline-mode" data-mode="{lanes.mode}">{mode_note}</p>{legend}'
            f'<div class="scroll">{svg}</div>{late_note}{notes}')
    return body, stats


def _bar_svg(b: Bar, ly: float, x: Any, scale: float, mode: str, stats: dict) -> str:
    bx = x(b.start)
    bw = max(MIN_BAR_W, (b.end - b.start) * scale)
    kinds = b.kinds
    redispatched = (b.generation or 1) > 1
    stats["bars"] += 1
    stats["redispatched"] += redispatched
    classes = ["bar"]
    if kinds == {"late"}:
        classes.append("late")
    if redispatched:
        classes.append("redispatch")
    title = (f"{b.label} on {b.worker} · assignment {b.assignment}"
             + (f" · generation {b.generation}" if b.generation else "")
             + (f" · {_duration(b.end - b.start)}" if mode == "time" else "")
             + f" · {len(b.cells)} cell{'s' if len(b.cells) != 1 else ''}")
    parts = [f'<g class="{" ".join(classes)}" data-assignment="{esc(b.assignment)}" data-task="{esc(b.task)}" '
             f'data-generation="{esc(b.generation)}" data-cells="{len(b.cells)}">',
             f'<rect class="frame" x="{_num(bx)}" y="{_num(ly)}" width="{_num(bw)}" height="{LANE_H}" rx="2">'
             f'<title>{esc(title)}</title></rect>']
    n = len(b.cells)
    top = ly + LABEL_ROW_H + 1
    stripe_h = (LANE_H - LABEL_ROW_H - 3) / n
    retried_here = 0
    for i, c in enumerate(b.cells):
        if mode == "time" and _timed(c):
            cx, cw = x(c["started_ms"]), max(MIN_BAR_W, (c["finished_ms"] - c["started_ms"]) * scale)
        else:
            cx, cw = bx, bw
        cls = _cell_class(c)
        retried_cell = c["kind"] == "selected" and (c.get("attempts") or 1) > 1
        stats["retried_cells"] += retried_cell
        retried_here += retried_cell
        stats["late_cells"] += c["kind"] == "late"
        parts.append(f'<rect class="cell {cls}{" had-retries" if retried_cell else ""}" '
                     f'data-cell="{esc(c.get("cell_id"))}" data-kind="{esc(c["kind"])}" x="{_num(cx)}" '
                     f'y="{_num(top + i * stripe_h)}" width="{_num(cw)}" height="{_num(max(1.0, stripe_h - 0.5))}">'
                     f'<title>{esc(_cell_title(c, mode))}</title></rect>')
        if retried_cell:
            parts.append(f'<rect class="retry-mark" x="{_num(cx)}" y="{_num(top + i * stripe_h)}" width="3" '
                         f'height="{_num(max(1.0, stripe_h - 0.5))}"/>')
    if bw >= LABEL_MIN_W:
        label = b.label + (f" g{b.generation}" if redispatched else "") + (f" ↻{retried_here}" if retried_here else "")
        parts.append(f'<text class="blabel" x="{_num(bx + 3)}" y="{_num(ly + LABEL_ROW_H - 1.5)}">{esc(label)}</text>')
    elif redispatched or retried_here:
        parts.append(f'<text class="blabel retry" x="{_num(bx)}" y="{_num(ly + LABEL_ROW_H - 1.5)}">↻</text>')
    parts.append("</g>")
    return "".join(parts)


def _axis_svg(lanes: Lanes, x: Any, height: float) -> str:
    span = lanes.t1 - lanes.t0
    step = _nice_step(span, AXIS_TICKS_TARGET)
    parts = []
    t = 0.0
    while t <= span + 1e-9:
        px = x(lanes.t0 + t)
        label = _duration(t) if lanes.mode == "time" else f"#{int(lanes.t0 + t)}"
        parts.append(f'<line class="grid" x1="{_num(px)}" y1="{AXIS_H - 6}" x2="{_num(px)}" y2="{_num(height)}"/>'
                     f'<text class="tick" x="{_num(px)}" y="{AXIS_H - 10}">{esc(label)}</text>')
        t += step
    caption = "time since the first start" if lanes.mode == "time" else "dispatch order"
    parts.append(f'<text class="wsub" x="6" y="{AXIS_H - 10}">{caption}</text>')
    return "".join(parts)


def _legend() -> str:
    items = [("pass", "score 1"), ("partial", "0 &lt; score &lt; 1"), ("zero", "score 0"),
             ("had-retries-key", "cell needed more than one attempt"),
             ("redispatch-key", "redispatched group (generation &gt; 1)"),
             ("retried", "retried attempt"), ("late", "late report"),
             ("idle-key", "idle slot")]
    return ('<ul class="legend">' + "".join(f'<li><span class="swatch {cls}"></span>{text}</li>' for cls, text in items)
            + "</ul>")


def _forest(e: Estimate, lo: float, hi: float, zero_line: bool = False) -> str:
    if e.mean is None:
        return ""
    w = FOREST_W

    def px(v: float) -> float:
        return 4 + (v - lo) / (hi - lo) * (w - 8)

    parts = [f'<svg class="forest" viewBox="0 0 {w} {FOREST_H}" width="{w}" height="{FOREST_H}" aria-hidden="true">',
             f'<line class="axis" x1="4" y1="{FOREST_H / 2}" x2="{w - 4}" y2="{FOREST_H / 2}"/>']
    if zero_line and lo < 0 < hi:
        parts.append(f'<line class="zero" x1="{_num(px(0))}" y1="1" x2="{_num(px(0))}" y2="{FOREST_H - 1}"/>')
    if e.low is not None:
        parts.append(f'<line class="ci" x1="{_num(px(e.low))}" y1="{FOREST_H / 2}" x2="{_num(px(e.high))}" '
                     f'y2="{FOREST_H / 2}"/>')
    parts.append(f'<circle class="mean" cx="{_num(px(e.mean))}" cy="{FOREST_H / 2}" r="4"/></svg>')
    return "".join(parts)


def _est_text(e: Estimate, percent: bool = False) -> str:
    if e.mean is None:
        return "–"
    k, unit, f = (100, "%", "{:.1f}") if percent else (1, "", "{:.3f}")
    text = f.format(e.mean * k) + unit
    if e.low is None:
        return text + ' <span class="muted">(one task: no interval)</span>'
    return f"{text} <span class=\"ci-text\">[{f.format(e.low * k)}, {f.format(e.high * k)}]</span>"


def render_scores(cells: list[dict], score_range: list[float] | None = None) -> tuple[str, int]:
    """With a declared score range the axis is that range (every interval is inside it);
    without one, it spans [0, 1] and whatever the intervals reach beyond."""
    return render_scores_of(subject_stats(cells, score_range), paired_differences(cells, score_range), score_range)


def render_scores_of(stats: list[SubjectStats], diffs: list[PairedDifference],
                     score_range: list[float] | None = None) -> tuple[str, int]:
    """render_scores from the statistics themselves (StreamingStats gives the same ones)."""
    if score_range is not None:
        lo, hi = float(score_range[0]), float(score_range[1])
    else:
        points = [v for s in stats for v in (s.score.mean, s.score.low, s.score.high) if v is not None]
        lo, hi = min([0.0, *points]), max([1.0, *points])
    rows = []
    for s in stats:
        rows.append(
            f'<tr data-subject="{esc(s.subject)}" data-selected="{s.selected}" data-incomplete="{s.incomplete}" '
            f'data-mean="{"" if s.score.mean is None else repr(s.score.mean)}">'
            f'<td>{esc(s.subject)}</td><td class="n">{s.selected}</td><td class="n">{s.incomplete}</td>'
            f'<td class="n">{s.score.clusters}</td><td class="n">{_est_text(s.score)}</td>'
            f'<td>{_forest(s.score, lo, hi)}</td><td class="n">{_est_text(s.pass_rate, percent=True)}</td></tr>')
    table = ('<table id="scores" data-subjects="{}"><thead><tr><th>subject</th><th>selected</th><th>incomplete</th>'
             '<th>tasks</th><th>mean score [95% CI]</th><th>interval ({} to {})</th><th>pass rate [95% CI]</th></tr>'
             '</thead><tbody>{}</tbody></table>').format(len(stats), f"{lo:g}", f"{hi:g}", "".join(rows))
    if stats:
        table += (f'<p class="note" id="ci-method" data-score-method="{esc(stats[0].score.method)}" '
                  f'data-pass-method="{esc(stats[0].pass_rate.method)}" data-axis-low="{lo!r}" data-axis-high="{hi!r}">'
                  f'Intervals: mean score: {esc(describe(stats[0].score))}; pass rate: '
                  f'{esc(describe(stats[0].pass_rate))}'
                  + ("" if score_range is not None else "; the spec declares no benchmark.scoreRange") + '.</p>')
    if diffs:
        if score_range is not None:  # a difference of two in-range scores
            bound = float(score_range[1]) - float(score_range[0])
        else:
            bound = max([1e-9, *(abs(v) for d in diffs for v in (d.difference.mean, d.difference.low,
                                                                  d.difference.high) if v is not None)])
        drows = "".join(
            f'<tr data-pair="{esc(d.a)}-{esc(d.b)}" data-pairs="{d.difference.n}"><td>{esc(d.a)} − {esc(d.b)}</td>'
            f'<td class="n">{d.difference.n}</td><td class="n">{_est_text(d.difference)}</td>'
            f'<td>{_forest(d.difference, -bound, bound, zero_line=True)}</td></tr>' for d in diffs)
        table += ('<h3>Paired differences</h3><p class="note">Over the task × repetition pairs where both subjects '
                  'have a selected result; intervals clustered by task.</p><table id="paired"><thead><tr>'
                  '<th>difference</th><th>pairs</th><th>mean [95% CI]</th><th>interval</th></tr></thead><tbody>'
                  f'{drows}</tbody></table>')
    return table, len(stats)


def cost_facts(cells: list[dict]) -> dict:
    """What the cost section sums over the cells (the same additions, in the cells' order)."""
    selected = [c for c in cells if c["state"] == "selected"]
    known = [c["cost_usd"] for c in selected if c.get("cost_usd") is not None]
    # Work paid for more than once: cells whose subject ran in two or more attempts (late reports
    # too), and the known cost of every execution but the one that counts. From the cells, as the
    # throttled count: the whole listing, whatever its pages.
    return {"selected": len(selected), "known": len(known), "selected_cost_usd": sum(known),
            "executed_twice": sum(1 for c in cells if (c.get("executions") or 0) > 1),
            "extra_cost_usd": sum(float(c.get("extra_execution_cost_usd") or 0.0) for c in cells)}


def render_cost(cells: list[dict], summary: dict) -> str:
    return render_cost_of(cost_facts(cells), summary)


def render_cost_of(facts: dict, summary: dict) -> str:
    """render_cost from its sums (cost_facts)."""
    unknown = facts["selected"] - facts["known"]
    sel_cost = round(facts["selected_cost_usd"], 9)
    observed = float(summary.get("observed_cost_usd") or 0.0)
    other = max(0.0, round(observed - sel_cost, 9))
    complete = bool(summary.get("usage_complete"))
    total = max(observed, sel_cost)
    frac = (sel_cost / total) if total > 0 else 0.0
    bar = (f'<svg class="costbar" viewBox="0 0 {PLOT_W} 18" width="100%" aria-hidden="true">'
           f'<rect class="cost-other" x="0" y="0" width="{PLOT_W}" height="18"/>'
           f'<rect class="cost-selected" x="0" y="0" width="{_num(frac * PLOT_W)}" height="18"/></svg>')
    usage = ('<p id="usage-status" class="ok" data-usage-complete="true">usage complete: every dispatched attempt '
             'reported its usage</p>' if complete else
             '<p id="usage-status" class="warn" data-usage-complete="false">usage incomplete: some attempts did not '
             'report their usage, so the observed cost is only the known subtotal; the true cost is higher or '
             'unknown, not zero</p>')
    unknown_note = (f'<p class="note" id="selected-cost-unknown" data-cells="{unknown}">{unknown} selected '
                    f'result(s) report no cost: unknown, not counted as zero.</p>' if unknown else "")
    twice = facts["executed_twice"]
    extra = round(facts["extra_cost_usd"], 9)
    return (f'<dl class="facts"><dt>selected results</dt><dd><span id="cost-selected" data-usd="{sel_cost!r}">'
            f'{_usd(sel_cost)}</span> over {facts["known"]} of {facts["selected"]} selected cells</dd>'
            f'<dt>all observed</dt><dd><span id="cost-observed" data-usd="{observed!r}">{_usd(observed)}</span> '
            f'(retries, late and exhausted attempts included)</dd>'
            f'<dt>not in the selected results</dt><dd><span id="cost-other" data-usd="{other!r}">{_usd(other)}</span>'
            f'</dd><dt>paid more than once</dt><dd id="executed-twice" data-cells="{twice}" data-usd="{extra!r}">'
            f'{twice} cells executed more than once; their extra executions cost {_usd(extra)}</dd>'
            f'</dl>{bar}{usage}{unknown_note}')


def render_providers(providers: list[dict]) -> str:
    """The fleet's model providers as the report was written: cells running against each limit,
    the declared limit, throttled attempts and their retry-after waits (empty when only the
    unnamed default, never throttled, is there)."""

    shown = shown_providers(providers)
    if not shown:
        return ""
    rows = "".join(
        f'<tr data-provider="{esc(p["name"])}" data-running="{p["running"]}" data-effective="{p["effective"] or 0}" '
        f'data-declared="{p["declared"] or 0}" data-throttled="{p["throttled"]}"><td>{esc(p["name"])}</td>'
        f'<td>{p["running"]}/{p["effective"] if p["effective"] else "-"}</td><td>{p["peak_running"]}</td>'
        f'<td>{p["declared"] if p["declared"] else "-"}</td><td>{p["throttled"]}</td>'
        f'<td>{p["retry_after_ms_total"] / 1000:.1f} s</td><td>{esc(p["last_throttled"] or "")}</td></tr>'
        for p in shown)
    return ('<section id="providers"><h2>Model providers</h2><p class="note">Shared by every run on the '
            'coordinator, as they were when this report was written.</p><table><thead><tr><th>provider</th>'
            '<th>running/limit</th><th>peak</th><th>declared</th><th>throttled</th><th>retry-after waits</th>'
            f'<th>last throttled</th></tr></thead><tbody>{rows}</tbody></table></section>')


def render_incomplete(cells: list[dict], rows_max: int | None = None) -> tuple[str, int]:
    """The reasons, counted, and a row per incomplete cell (the first `rows_max` of them, when
    given: the console pages the rest)."""
    rows = [c for c in cells if c["state"] != "selected"]
    reasons: dict[str, int] = {}
    for c in rows:
        reasons[c.get("incomplete_reason") or c["state"]] = reasons.get(c.get("incomplete_reason") or c["state"], 0) + 1
    return render_incomplete_of(reasons, rows if rows_max is None else rows[:rows_max], len(rows))


def render_incomplete_of(reasons: dict[str, int], shown: list[dict], total: int) -> tuple[str, int]:
    """render_incomplete from the reasons counted, the cells shown (the first ones) and how many
    cells are incomplete in all."""
    if not total:
        return ('<p id="no-incomplete" data-cells-incomplete="0">Every cell has a selected result.</p>', 0)
    summary = "".join(f'<li data-reason="{esc(r)}" data-count="{n}"><b>{n}</b> {esc(r)}</li>'
                      for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    has_detail = any(c.get("incomplete_detail") for c in shown)
    body = "".join(
        f'<tr data-cell-id="{esc(c["cell_id"])}" data-reason="{esc(c.get("incomplete_reason") or c["state"])}">'
        f'<td>{esc(c["cell_id"])}</td><td>{esc(c["task"])}</td><td class="n">{esc(c["repetition"])}</td>'
        f'<td>{esc(c["subject"])}</td><td>{esc(c.get("incomplete_reason") or c["state"])}</td>'
        f'<td class="n">{esc(c.get("attempts"))}</td>'
        + (f'<td>{esc(c.get("incomplete_detail"))}</td>' if has_detail else "") + "</tr>"
        for c in shown)
    head = ("<tr><th>cell</th><th>task</th><th>rep</th><th>subject</th><th>reason</th><th>attempts</th>"
            + ("<th>last report said</th>" if has_detail else "") + "</tr>")
    return (f'<p class="note">Incomplete cells are not counted as zero: they have no score.</p>'
            f'<ul id="incomplete-reasons" class="reasons">{summary}</ul>'
            f'<table id="incomplete-cells" data-cells-incomplete="{total}"><thead>{head}</thead>'
            f'<tbody>{body}</tbody></table>'
            + (f'<p class="note" id="incomplete-more" data-more="{total - len(shown)}">and {total - len(shown)} '
               'more (the cells table pages them)</p>' if len(shown) < total else ""), total)


CSS = """
:root { --fg:#1f2328; --muted:#656d76; --line:#d0d7de; --bg:#ffffff; --panel:#f6f8fa;
  --pass:#2e7d32; --partial:#f9a825; --zero:#c62828; --retry:#e65100; --late:#9e9e9e; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  background: var(--bg); }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 4px; } h3 { font-size: 15px; margin: 18px 0 6px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: var(--panel); padding: 1px 4px;
  border-radius: 3px; }
.muted, .note { color: var(--muted); } .note { margin: 4px 0 8px; }
.warn { color: #9a3412; background: #fff7ed; border: 1px solid #fed7aa; padding: 6px 10px; border-radius: 6px; }
.ok { color: #166534; background: #f0fdf4; border: 1px solid #bbf7d0; padding: 6px 10px; border-radius: 6px; }
.counts { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0 4px; padding: 0; list-style: none; }
.counts li { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px;
  min-width: 110px; }
.counts b { display: block; font-size: 22px; font-variant-numeric: tabular-nums; }
.counts span.label { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: middle; }
th { background: var(--panel); font-weight: 600; font-size: 13px; } td.n { text-align: right; white-space: nowrap; }
.ci-text { color: var(--muted); }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 6px 0 10px; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
.scroll { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; padding: 4px 0; }
svg.timeline text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg.timeline .wlabel { font-weight: 600; font-size: 12px; } svg.timeline .wsub { fill: var(--muted); font-size: 10px; }
svg.timeline .wwarn { fill: #b91c1c; font-size: 10px; } svg.timeline .tick { fill: var(--muted); text-anchor: middle; font-size: 10px; }
svg.timeline .grid { stroke: #eaeef2; stroke-width: 1; }
svg.timeline .lane { fill: #fbfcfd; stroke: #e5e9ee; stroke-width: .5; }
svg.timeline .idle { fill: url(#hatch-idle); }
svg.timeline .frame { fill: #eef1f4; stroke: #57606a; stroke-width: 1; }
svg.timeline .redispatch .frame { stroke: var(--retry); stroke-width: 1.6; stroke-dasharray: 4 2; }
svg.timeline .late .frame { fill: url(#hatch-late); stroke: #616161; stroke-dasharray: 2 2; }
svg.timeline .cell.pass { fill: var(--pass); } svg.timeline .cell.partial { fill: var(--partial); }
svg.timeline .cell.zero { fill: var(--zero); } svg.timeline .cell.unscored { fill: #90a4ae; }
svg.timeline .cell.retried { fill: url(#hatch-retried); } svg.timeline .cell.late { fill: url(#hatch-late); }
svg.timeline .cell.lost { fill: #263238; }
svg.timeline .retry-mark { fill: var(--retry); }
svg.timeline .blabel { fill: #24292f; font-size: 9.5px; pointer-events: none; }
svg.timeline .blabel.retry { fill: var(--retry); font-weight: 700; }
ul.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; list-style: none; padding: 0; margin: 6px 0; font-size: 12px;
  color: var(--muted); }
.swatch { display: inline-block; width: 14px; height: 10px; margin-right: 5px; vertical-align: -1px; border-radius: 2px; }
.swatch.pass { background: var(--pass); } .swatch.partial { background: var(--partial); } .swatch.zero { background: var(--zero); }
.swatch.had-retries-key { background: linear-gradient(90deg, var(--retry) 0 3px, var(--pass) 3px); }
.swatch.redispatch-key { border: 1.6px dashed var(--retry); background: #eef1f4; }
.swatch.retried { background: repeating-linear-gradient(45deg, #ffcc80 0 3px, #e65100 3px 5px); }
.swatch.late { background: repeating-linear-gradient(-45deg, #bdbdbd 0 3px, #757575 3px 5px); }
.swatch.idle-key { background: repeating-linear-gradient(45deg, #f6f7f8 0 3px, #d5d9de 3px 5px); border: 1px solid #e5e9ee; }
svg.forest .axis { stroke: #d0d7de; } svg.forest .ci { stroke: #0969da; stroke-width: 3; stroke-linecap: round; }
svg.forest .mean { fill: #0969da; } svg.forest .zero { stroke: #8c959f; stroke-dasharray: 2 2; }
svg.costbar .cost-selected { fill: #0969da; } svg.costbar .cost-other { fill: #ffb77a; }
ul.reasons { list-style: none; padding: 0; display: flex; gap: 14px; flex-wrap: wrap; }
"""


def _order_fact(run: dict) -> str:
    """Which order the run's groups were dispatched in (policy `orderFrom`)."""
    source = run.get("order_from") or ""
    text = (f"longest first, by the group durations observed in run {esc(source)}" if source
            else "spec order")
    return f'<dt>dispatch order</dt><dd id="dispatch-order" data-order-from="{esc(source)}">{text}</dd>'


def _spend_fact(summary: dict, run: dict) -> str:
    """The run's spend against its cap: the results' numbers, else the status's (an older
    coordinator sends neither: the fact is left out rather than shown as $0)."""
    observed = summary.get("run_observed_cost_usd", run.get("observed_cost_usd"))
    if observed is None:
        return ""
    cap = summary.get("cost_cap_usd", run.get("cost_cap_usd")) or 0.0
    text = (f"{_usd(observed)} of cap {_usd(cap)} ({100 * observed / cap:.0f}%)" if cap
            else f"{_usd(observed)} (no spend cap)")
    return (f'<dt>spend</dt><dd id="spend" data-usd="{float(observed)!r}" data-cap-usd="{float(cap)!r}"'
            f' data-cap-reached="{"true" if cap and observed >= cap else "false"}">{text}</dd>')


def overview_counts(cells: list[dict]) -> dict:
    """What the run's counts sum over the cells."""
    return {"cells": len(cells), "selected": sum(1 for c in cells if c["state"] == "selected"),
            "retried_cells": sum(1 for c in cells if (c.get("attempts") or 0) > 1),
            "attempts": sum(c.get("attempts") or 0 for c in cells),
            # Throttled attempts are neither outcomes nor attempts: counted apart, from the cells.
            "throttled": sum(int(c.get("throttled") or 0) for c in cells),
            "executed_twice": sum(1 for c in cells if (c.get("executions") or 0) > 1)}


def timeline_kinds(timeline: list[dict]) -> dict[str, int]:
    """The timeline's entries that are not selected results, by kind."""
    return {k: sum(1 for e in timeline if e["kind"] == k) for k in KINDS if k != "selected"}


def render_overview(results: dict, status: dict, timeline: list[dict], lanes: Lanes, tstats: dict,
                    n_subjects: int) -> str:
    """The run's counts and facts (state, spend, concurrency, dispatch order, extra evidence):
    the top of the report and of the console's run page."""
    return render_overview_of(overview_counts(results["cells"]), results["summary"], status, timeline_kinds(timeline),
                              lanes, tstats, n_subjects)


def render_overview_of(n: dict, summary: dict, status: dict, extra: dict[str, int], lanes: Lanes, tstats: dict,
                       n_subjects: int) -> str:
    """render_overview from its counts (overview_counts, timeline_kinds)."""
    runs = status.get("runs") or []
    run = runs[0] if len(runs) == 1 else {}
    workers_drawn = sum(1 for w in lanes.workers if w[3])
    state = summary.get("state") or run.get("state") or "unspecified"
    blocked = summary.get("blocked_reason") or ""
    paused = (run.get("pause_reason") or "") if state == "paused" else ""
    counts = [
        ("count-cells", n["cells"], "cells"), ("count-selected", n["selected"], "selected"),
        ("count-incomplete", n["cells"] - n["selected"], "incomplete"), ("count-subjects", n_subjects, "subjects"),
        ("count-workers", workers_drawn, "workers used"), ("count-groups", tstats["bars"], "group dispatches drawn"),
        ("count-retried-cells", n["retried_cells"], "cells retried"), ("count-attempts", n["attempts"], "attempts"),
        ("count-late", int(summary.get("late_reports") or 0), "late reports"),
        ("count-throttled", n["throttled"], "throttled attempts"),
        ("count-executed-twice", n["executed_twice"], "cells executed more than once"),
    ]
    counts_html = "".join(f'<li><b id="{cid}" data-count="{n}">{n}</b><span class="label">{esc(label)}</span></li>'
                          for cid, n, label in counts)
    facts = (f'<dl class="facts"><dt>state</dt><dd id="run-state" data-state="{esc(state)}">{esc(state)}'
             + (f' (blocked: {esc(blocked)})' if blocked else "")
             + (f' (<span id="pause-reason">{esc(paused)}</span>)' if paused else "") + "</dd>"
             + _spend_fact(summary, run)
             + f'<dt>concurrency</dt><dd id="concurrency" data-peak="{summary.get("peak_concurrent_groups", 0)}" '
             f'data-cap="{run.get("max_concurrent_groups", "")}" data-slots-offered="{summary.get("slots_offered", 0)}">'
             f'peak {summary.get("peak_concurrent_groups", 0)} groups at once'
             + (f' (cap {run.get("max_concurrent_groups")})' if run.get("max_concurrent_groups") else "")
             + f', {summary.get("slots_offered", 0)} slots offered</dd>'
             + _order_fact(run)
             + (f'<dt>extra evidence</dt><dd id="extra-attempts" data-retried="{extra["retried"]}" '
                f'data-late="{extra["late"]}" data-lost="{extra["lost"]}">{extra["retried"]} retried, '
                f'{extra["late"]} late, {extra["lost"]} lost attempts (not selected)</dd>'
                if any(extra.values()) else "")
             + "</dl>")
    return f'<ul class="counts">{counts_html}</ul>{facts}'


def render_timeline_section(results: dict, timeline: list[dict], lanes: Lanes, tstats: dict,
                            timeline_html: str) -> str:
    """The timeline and what it could not draw."""
    return render_timeline_section_of(sum(c.get("attempts") or 0 for c in results["cells"]),
                                      sum(1 for e in timeline if e.get("worker_id")), timeline_html)


def render_timeline_section_of(attempts_total: int, drawn: int, timeline_html: str) -> str:
    """render_timeline_section from the run's attempts and the timeline's entries with a worker."""
    hidden = max(0, attempts_total - drawn)
    if hidden:
        timeline_html += (f'<p class="note" id="attempts-not-drawn" data-attempts="{hidden}">{hidden} of '
                          f'{attempts_total} attempts are not drawn: the admin API lists only the selected attempt '
                          f'of each cell, so earlier attempts of retried cells and the attempts of incomplete cells '
                          f'are missing (pass them with <code>--attempts FILE</code>).</p>')
    return f'<section id="timeline"><h2>Timeline per worker slot</h2>{timeline_html}</section>'


SCORES_NOTE = ('<p class="note">Means over selected cells only; 95% intervals are cluster-robust by task '
               '(repetitions of a task are not independent samples), Student\'s t with tasks − 1 degrees of '
               'freedom.</p>')


def render_html(results: dict, status: dict, timeline: list[dict]) -> str:
    """The whole page; pure (see the module rules)."""
    cells = results["cells"]
    summary = results["summary"]
    runs = status.get("runs") or []
    run = runs[0] if len(runs) == 1 else {}
    run_id = run.get("run_id") or ""
    subject_order: dict[str, int] = {}
    for c in cells:
        subject_order.setdefault(c["subject"], len(subject_order))
    lanes = layout(timeline, status, subject_order)
    timeline_html, tstats = render_timeline(lanes, int(summary.get("late_reports") or 0))
    scores_html, n_subjects = render_scores(cells, summary.get("score_range"))
    incomplete_html, n_incomplete = render_incomplete(cells)
    n_selected = sum(1 for c in cells if c["state"] == "selected")
    workers_drawn = sum(1 for w in lanes.workers if w[3])
    state = summary.get("state") or run.get("state") or "unspecified"
    title = f"fleet report {run_id}".strip()
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer">'
        f'<title>{esc(title)}</title><style>{CSS}</style></head><body>'
        f'<main id="report" data-run-id="{esc(run_id)}" data-state="{esc(state)}" data-cells-total="{len(cells)}" '
        f'data-cells-selected="{n_selected}" data-cells-incomplete="{n_incomplete}" data-subjects="{n_subjects}" '
        f'data-workers="{workers_drawn}" data-groups-drawn="{tstats["bars"]}" data-idle-gaps="{tstats["idle_gaps"]}" '
        f'data-timeline-mode="{lanes.mode}" data-late-reports="{int(summary.get("late_reports") or 0)}" '
        f'data-usage-complete="{"true" if summary.get("usage_complete") else "false"}">'
        f'<h1>Run <code id="run-id">{esc(run_id or "?")}</code></h1>'
        + render_overview(results, status, timeline, lanes, tstats, n_subjects)
        + render_timeline_section(results, timeline, lanes, tstats, timeline_html)
        + f'<section id="subjects"><h2>Scores per subject</h2>{SCORES_NOTE}{scores_html}</section>'
        f'<section id="cost"><h2>Cost</h2>{render_cost(cells, summary)}</section>'
        + render_providers(status.get("providers") or []) +
        f'<section id="incomplete"><h2>Incomplete cells</h2>{incomplete_html}</section>'
        "</main></body></html>\n")
