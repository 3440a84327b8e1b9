"""`fleetctl results` written page by page: a table, one JSON document, CSV, or JSON lines.

Each page of GetResults (tools/fleetctl/pages.py) becomes cell dicts (`views.results_json`),
is written out and dropped; the statistics are accumulated as the cells pass
(`stats.StreamingStats`: a task id and a score per selected cell and per pair, the same
numbers as over the whole list), so memory is one page and those samples, not the run's
records. Formats:

- table: the cells (column widths from the first page), then what `print_results` prints
  after them; the incomplete cells are named up to INCOMPLETE_LISTED_MAX, then counted.
- `--json`: one valid document, what `json.dumps(..., indent=1, sort_keys=True)` of
  {"cells", "paired_differences", "scores_outside_range", "subjects", "summary"} would print,
  written as it goes.
- `--csv`: a header, then one row per cell.
- `--jsonl`: one JSON object per line: every cell (as in `--json`), then one last line with
  "summary", "subjects", "paired_differences" and "scores_outside_range" (a cell has
  "cell_id"; the last line has "summary"). For consumers that stream.
"""
from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from common.report.stats import CI_METHODS, StreamingStats
from tools.fleetctl.views import print_stats, results_json

INCOMPLETE_LISTED_MAX = 200
CSV_FIELDS = ["cell_id", "task", "repetition", "subject", "state", "score", "status", "attempts", "attempt_id",
              "worker_id", "assignment_id", "generation", "dispatch_order", "cost_usd", "usage", "incomplete_reason"]
TABLE_HEADER = ["cell", "score", "status", "worker", "gen", "attempts", "cost_usd"]


def cell_pages(pages: Iterable[Any]) -> Iterator[tuple[list[dict], dict | None]]:
    """(cells, summary or None) per page, in `--json`'s shape; the summary is on the last."""
    for page in pages:
        data = results_json(page)
        yield data["cells"], data["summary"] if page.HasField("summary") else None


class _Listing:
    """The statistics need the score range, which comes with the summary on the last page:
    cells wait in `held` (one page) until then, unless the first page is also the last."""

    def __init__(self, pages: Iterable[Any], ci: str) -> None:
        assert ci in CI_METHODS, ci
        self.pages, self.ci = pages, ci
        self.stats: StreamingStats | None = None
        self.summary: dict | None = None
        self._seen: list[dict] = []  # minimal records of cells read before the range was known
        self.throttled = 0  # throttled attempts of every cell listed: the summary's count is its page's
        self.executed_twice, self.extra_cost = 0, 0.0  # the same for work paid for more than once
        self.recovered = 0  # results recovered from workers after a restore

    def cells(self) -> Iterator[dict]:
        for cells, summary in cell_pages(self.pages):
            if summary is not None:
                self.summary = summary
                self._start(summary.get("score_range"))
            for cell in cells:
                self.throttled += cell["throttled"]
                self.executed_twice += cell["executions"] > 1
                self.extra_cost += cell["extra_execution_cost_usd"]
                self.recovered += bool(cell.get("recovered_after_restore"))
                if self.stats is not None:
                    self.stats.add(cell)
                else:
                    self._seen.append({k: cell[k] for k in ("cell_id", "subject", "task", "repetition", "state",
                                                            "score")})
                yield cell
        assert self.summary is not None, "the listing ended without its summary"
        self.summary["throttled_attempts"] = self.throttled
        self.summary["executed_more_than_once"] = self.executed_twice
        self.summary["extra_execution_cost_usd"] = round(self.extra_cost, 9)
        self.summary["recovered_after_restore"] = self.recovered

    def _start(self, score_range: list[float] | None) -> None:
        self.stats = StreamingStats(score_range, bootstrap=self.ci == "bootstrap")
        for cell in self._seen:
            self.stats.add(cell)
        self._seen = []

    def tail(self) -> dict:
        assert self.stats is not None and self.summary is not None
        return {"paired_differences": [d.as_dict() for d in self.stats.paired_differences()],
                "scores_outside_range": [c["cell_id"] for c in self.stats.outside],
                "subjects": [s.as_dict() for s in self.stats.subjects()], "summary": self.summary}


def write_json(pages: Iterable[Any], out: IO[str], ci: str = "t", extra: dict | None = None) -> None:
    listing, first = _Listing(pages, ci), True
    out.write('{\n "cells": [')
    for cell in listing.cells():
        text = json.dumps(cell, indent=1, sort_keys=True).replace("\n", "\n  ")
        out.write(("\n  " if first else ",\n  ") + text)
        first = False
    out.write("]" if first else "\n ]")
    rest = json.dumps(dict(listing.tail(), **(extra or {})), indent=1, sort_keys=True)
    out.write(",\n" + rest[2:] + "\n")


def write_jsonl(pages: Iterable[Any], out: IO[str], ci: str = "t", extra: dict | None = None) -> None:
    listing = _Listing(pages, ci)
    for cell in listing.cells():
        out.write(json.dumps(cell, sort_keys=True) + "\n")
    out.write(json.dumps(dict(listing.tail(), **(extra or {})), sort_keys=True) + "\n")


def write_csv(pages: Iterable[Any], out: IO[str], ci: str = "t") -> None:
    w = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for cells, _ in cell_pages(pages):
        w.writerows(cells)


def _row(cell: dict) -> list:
    if cell["state"] == "selected":
        return [cell["cell_id"], f"{cell['score']:g}", cell["status"], cell["worker_id"], f"g{cell['generation']}",
                cell["attempts"], "" if cell["cost_usd"] is None else f"{cell['cost_usd']:.4f}"]
    return [cell["cell_id"], "-", f"incomplete: {cell['incomplete_reason']}", "", "", cell["attempts"], ""]


def write_table(pages: Iterable[Any], out: IO[str], ci: str = "t") -> None:
    listing = _Listing(pages, ci)
    widths: list[int] | None = None
    incomplete: list[dict] = []
    incomplete_more = 0
    batch: list[list] = []

    def flush() -> None:
        nonlocal widths
        if widths is None:
            widths = [max(len(str(x)) for x in col) for col in zip(TABLE_HEADER, *batch)]
            out.write("  ".join(h.ljust(w) for h, w in zip(TABLE_HEADER, widths)).rstrip() + "\n")
        for row in batch:
            out.write("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() + "\n")
        batch.clear()

    for cell in listing.cells():
        batch.append(_row(cell))
        if len(batch) >= 1_000:
            flush()
        if cell["state"] != "selected":
            if len(incomplete) < INCOMPLETE_LISTED_MAX:
                incomplete.append({k: cell[k] for k in ("cell_id", "incomplete_reason", "attempts")})
            else:
                incomplete_more += 1
    flush()
    assert listing.stats is not None and listing.summary is not None
    stats = listing.stats
    with contextlib.redirect_stdout(out):
        print_stats(stats.subjects(), stats.paired_differences(), stats.outside, listing.summary.get("score_range"),
                    ci, incomplete, incomplete_more, listing.summary)
