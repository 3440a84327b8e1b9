"""The run page's heavy part as data: everything coordinator/console/pages.py draws of a run's
cells and attempts, folded one cell and one attempt at a time into sums, counts and the few
cells a page shows, so that the page costs what it shows and not what the run holds.

Rules.
- Pure, as pages.py: no I/O, no clock; the same cells in the same order give the same view.
- One fold for both ways in: the cells of a full listing (`from_listing`, what GetResults and
  ListAttempts give: the reference, and what the tests draw) and the cells the coordinator hands
  over part by part (coordinator/views.py `run_part`, read through the Admin servicer's
  ReadRunPage), in the run's order, a group's cells together. A cell is a results_json dict
  (common/report/shapes.py) of which the fold reads PAGE_CELL_KEYS; an attempt is its kind, its
  status's name, its worker and its timeline entry (common/report/html.py ENTRY_KEYS, or None).
- Bounded: what is kept grows with what the page shows (the cells page, the first incomplete
  cells, a small run's matrix, a timeline of at most TIMELINE_CELLS_MAX entries), with the groups
  (the matrix's rows of a large run) and with the selected scores (the intervals need each
  sample, in order); never a record per cell.
- The sums are the additions the full listing's renderers make, in the same order, so that the
  floating-point figures are the same to the last bit.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from common.report.html import KINDS, attempts_from_records, timeline_from_results
from common.report.names import STATUS_NAMES
from common.report.stats import PairedDifference, StreamingStats, SubjectStats
from coordinator.console import limits

# What the run page reads of a cell (and so what coordinator/views.py `part_cells` gives): a
# results_json cell has these and the artifacts and usage, which only the cell's own page shows.
PAGE_CELL_KEYS = ("cell_id", "task", "repetition", "subject", "state", "score", "status", "attempt_id", "worker_id",
                  "assignment_id", "generation", "dispatch_order", "attempts", "cost_usd", "incomplete_reason",
                  "incomplete_detail", "started_ms", "finished_ms", "throttled", "executions",
                  "extra_execution_cost_usd", "recovered_after_restore")
CELL_CLASSES = ("pass", "partial", "zero", "unscored", "running", "waiting", "held", "exhausted")
WAITING_REASONS = ("retry_pending", "not_yet_run")
HELD_REASONS = ("paused", "blocked", "provider_throttled")
INCOMPLETE_SHOWN_MAX = 20


def cell_class(c: dict) -> str:
    """The matrix's colour of a cell: its score once selected, else what it waits for."""
    if c["state"] == "selected":
        s = c.get("score")
        return "unscored" if s is None else ("pass" if s >= 1 else "partial" if s > 0 else "zero")
    reason = c.get("incomplete_reason") or ""
    if reason == "running":
        return "running"
    if reason in WAITING_REASONS:
        return "waiting"
    if reason in HELD_REASONS:
        return "held"
    return "exhausted"


def cell_matches_filter(c: dict, f: dict[str, str]) -> bool:
    """The cells table's filter: state (selected, incomplete or a matrix class), reason,
    subject, worker, task; every key given must match."""
    if f.get("state") and f["state"] not in (c["state"], cell_class(c)):
        return False
    if f.get("reason") and (c.get("incomplete_reason") or "") != f["reason"]:
        return False
    return not any(f.get(k) and (c.get(key) or "") != f[k] for k, key in
                   (("subject", "subject"), ("worker", "worker_id"), ("task", "task")))


@dataclass(slots=True)
class RunView:
    """What the run page's heavy part draws (pages.run_live_view)."""

    cells_total: int
    summary: dict  # results_json's summary
    subjects: list[str]  # in the order the cells name them
    groups: list[tuple[str, int]]  # (task, repetition) of every group: kept for a matrix drawn cell by cell only
    # The matrix: every cell (a run of at most MATRIX_CELLS_MAX cells), else per row of `per_row`
    # consecutive groups, per subject's index, the cells counted by class, and the row's tasks.
    matrix_cells: list[dict] | None
    per_row: int
    buckets: list[dict[int, Counter]]
    labels: list[list[str]]
    stats: list[SubjectStats]
    diffs: list[PairedDifference]
    incomplete_reasons: dict[str, int]
    incomplete_shown: list[dict]  # the first INCOMPLETE_SHOWN_MAX incomplete cells
    incomplete_total: int
    counts: dict  # common/report/html.py overview_counts
    cost: dict  # common/report/html.py cost_facts
    # The timeline: its entries when there are at most TIMELINE_CELLS_MAX (else None), how many
    # there are, how many name a worker, the group dispatches they make and the kinds not selected.
    timeline: list[dict] | None
    timeline_entries: int
    timeline_with_worker: int
    groups_dispatched: int
    timeline_kinds: dict[str, int]
    attempt_kinds: Counter
    retry_causes: Counter
    lost_by_worker: Counter
    # The cells table: the rows of page `table_page` (the requested one, or the last when it asked
    # past the end) of the `table_matched` cells the filter matches.
    table_rows: list[dict]
    table_matched: int
    table_page: int


@dataclass(slots=True)
class RunViewBuilder:
    """The fold: `add_cell` and `add_attempt` in the run's order, then `finish`."""

    cells_total: int
    groups_total: int
    f: dict[str, str]
    page: int
    score_range: list[float] | None = None
    # At least this many cells are selected: past TIMELINE_CELLS_MAX no timeline entry is kept at
    # all, since each selected cell is one (a run's selected cells never become unselected).
    selected_least: int = 0
    _small: bool = False
    _per_row: int = 1
    _subjects: dict[str, int] = field(default_factory=dict)
    _groups: dict[tuple[str, int], int] = field(default_factory=dict)
    _matrix_cells: list[dict] = field(default_factory=list)
    _buckets: list[dict[int, Counter]] = field(default_factory=list)
    _labels: list[list[str]] = field(default_factory=list)
    _stats: StreamingStats | None = None
    _reasons: dict[str, int] = field(default_factory=dict)
    _incomplete: list[dict] = field(default_factory=list)
    _incomplete_total: int = 0
    _counts: dict = field(default_factory=lambda: {"cells": 0, "selected": 0, "retried_cells": 0, "attempts": 0,
                                                   "throttled": 0, "executed_twice": 0})
    _known: int = 0
    _selected_cost: Any = 0  # what sum() starts from: the same additions as the full listing's
    _extra_cost: Any = 0
    _recovered: int = 0
    _cell_entries: list[dict] = field(default_factory=list)
    _extra_entries: list[dict] = field(default_factory=list)
    _entries: int = 0
    _drop_entries: bool = False
    _with_worker: int = 0
    _dispatches: set = field(default_factory=set)
    _timeline_kinds: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS if k != "selected"})
    _kinds: Counter = field(default_factory=Counter)
    _causes: Counter = field(default_factory=Counter)
    _lost: Counter = field(default_factory=Counter)
    _matched: int = 0
    _page_rows: list[dict] = field(default_factory=list)
    _tail: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._small = self.cells_total <= limits.MATRIX_CELLS_MAX
        self._per_row = max(1, math.ceil(self.groups_total / limits.MATRIX_ROWS_MAX))
        self._buckets = [{} for _ in range(math.ceil(self.groups_total / self._per_row))]
        self._labels = [[] for _ in self._buckets]
        self._stats = StreamingStats(self.score_range)
        self._drop_entries = self.selected_least > limits.TIMELINE_CELLS_MAX

    def add_cell(self, c: dict) -> None:
        """One cell, a dict with every key of PAGE_CELL_KEYS (None where results_json has None)."""
        si = self._subjects.setdefault(c["subject"], len(self._subjects))
        key = (c["task"], c["repetition"])
        gi = self._groups.get(key)
        if gi is None:
            gi = self._groups[key] = len(self._groups)
            if not self._small:
                labels = self._labels[gi // self._per_row]
                if not labels or labels[-1] != key[0]:
                    labels.append(key[0])
        if self._small:
            self._matrix_cells.append(c)
        else:
            bucket = self._buckets[gi // self._per_row]
            counts = bucket.get(si)
            if counts is None:
                counts = bucket[si] = Counter()
            counts[cell_class(c)] += 1
        assert self._stats is not None
        self._stats.add(c)
        n = self._counts
        n["cells"] += 1
        attempts = c["attempts"] or 0
        if attempts:
            n["attempts"] += attempts
            if attempts > 1:
                n["retried_cells"] += 1
        if c["throttled"]:
            n["throttled"] += int(c["throttled"])
        if (c["executions"] or 0) > 1:
            n["executed_twice"] += 1
        self._extra_cost += float(c["extra_execution_cost_usd"] or 0.0)
        if c["state"] == "selected":
            n["selected"] += 1
            if c["cost_usd"] is not None:
                self._known += 1
                self._selected_cost += c["cost_usd"]
            if c["recovered_after_restore"]:
                self._recovered += 1
            if c["worker_id"] and self._count_entry(c["worker_id"], c["assignment_id"], c["cell_id"]):
                self._cell_entries.extend(timeline_from_results({"cells": [c]}))
        else:
            reason = c["incomplete_reason"] or c["state"]
            self._reasons[reason] = self._reasons.get(reason, 0) + 1
            self._incomplete_total += 1
            if len(self._incomplete) < INCOMPLETE_SHOWN_MAX:
                self._incomplete.append(c)
        if not self.f or cell_matches_filter(c, self.f):
            block, at = divmod(self._matched, limits.TABLE_ROWS_MAX)
            if at == 0:
                self._tail = []
            self._tail.append(c)
            if block == self.page:
                self._page_rows.append(c)
            self._matched += 1

    def add_attempt(self, kind: str, status: str, worker_id: str, entry: dict | None) -> None:
        """One attempt (ListAttempts' record): its kind, its status's name ("unspecified" when it has
        no report), its worker, and its timeline entry (None: a pending attempt, or a selected one,
        whose entry is its cell's)."""
        self._kinds[kind] += 1
        if kind == "retried":
            self._causes[status] += 1
        elif kind == "lost":
            self._lost[worker_id] += 1
        if entry is not None:
            if entry["kind"] in self._timeline_kinds:
                self._timeline_kinds[entry["kind"]] += 1
            if self._count_entry(entry.get("worker_id"), entry.get("assignment_id"), entry.get("cell_id")):
                self._extra_entries.append(entry)

    def _count_entry(self, worker_id: str | None, assignment_id: str | None, cell_id: str | None) -> bool:
        """One more timeline entry; whether it is still kept (the timeline is drawn only up to
        TIMELINE_CELLS_MAX entries: past that, none is kept and each is only counted)."""
        self._entries += 1
        self._with_worker += bool(worker_id)
        self._dispatches.add((worker_id, assignment_id or cell_id))
        if self._entries <= limits.TIMELINE_CELLS_MAX and not self._drop_entries:
            return True
        if not self._drop_entries or self._cell_entries or self._extra_entries:
            self._drop_entries = True
            self._cell_entries, self._extra_entries = [], []
        return False

    def cell_sums(self) -> dict:
        """The summary's figures a listing sums over its cells (results_json)."""
        return {"throttled_attempts": self._counts["throttled"], "executed_more_than_once": self._counts["executed_twice"],
                "extra_execution_cost_usd": round(self._extra_cost, 9), "recovered_after_restore": self._recovered}

    def finish(self, summary: dict) -> RunView:
        assert self._stats is not None
        pages_n = max(1, math.ceil(self._matched / limits.TABLE_ROWS_MAX))
        page = min(max(0, self.page), pages_n - 1)
        rows = self._page_rows if page == self.page else self._tail
        drawn = self._entries <= limits.TIMELINE_CELLS_MAX and not self._drop_entries
        return RunView(
            cells_total=self._counts["cells"], summary=summary, subjects=list(self._subjects),
            groups=list(self._groups) if self._small else [],
            matrix_cells=self._matrix_cells if self._small else None, per_row=self._per_row,
            buckets=self._buckets, labels=self._labels,
            stats=self._stats.subjects(), diffs=self._stats.paired_differences(),
            incomplete_reasons=self._reasons, incomplete_shown=self._incomplete,
            incomplete_total=self._incomplete_total, counts=dict(self._counts),
            cost={"selected": self._counts["selected"], "known": self._known, "selected_cost_usd": self._selected_cost,
                  "executed_twice": self._counts["executed_twice"], "extra_cost_usd": self._extra_cost},
            timeline=self._cell_entries + self._extra_entries if drawn else None, timeline_entries=self._entries,
            timeline_with_worker=self._with_worker, groups_dispatched=len(self._dispatches),
            timeline_kinds=self._timeline_kinds, attempt_kinds=self._kinds, retry_causes=self._causes,
            lost_by_worker=self._lost, table_rows=rows, table_matched=self._matched, table_page=page)


def from_listing(results: dict, attempts: list[Any], f: dict[str, str], page: int) -> RunView:
    """The view of a full listing: GetResults' cells (results_json) and ListAttempts' records,
    as the page was drawn from them before the coordinator handed it the view itself."""
    cells = [{k: c.get(k) for k in PAGE_CELL_KEYS} for c in results["cells"]]  # what the page reads of each
    summary = results["summary"]
    b = RunViewBuilder(len(cells), len({(c["task"], c["repetition"]) for c in cells}), f, page,
                       summary.get("score_range"), sum(1 for c in cells if c["state"] == "selected" and c["worker_id"]))
    for c in cells:
        b.add_cell(c)
    # A selected attempt's entry is its cell's (merge_timeline keeps one of each attempt).
    seen = {c["attempt_id"] for c in cells if c["state"] == "selected" and c.get("worker_id") and c.get("attempt_id")}
    for r in attempts:
        entry = attempts_from_records([r])[0] if r.kind in KINDS else None
        if entry is not None and entry.get("attempt_id"):
            if entry["attempt_id"] in seen:
                entry = None
            else:
                seen.add(entry["attempt_id"])
        b.add_attempt(r.kind, STATUS_NAMES.get(r.status, "unspecified"), r.worker_id, entry)
    return b.finish(summary)
