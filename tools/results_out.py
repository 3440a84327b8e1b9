"""`fleetctl results` written page by page: a table, one JSON document, CSV, or JSON lines.

Each page of GetResults (tools.pages) is turned into cell dicts (fleetctl's `results_json`),
written out and dropped; the statistics are accumulated as the cells pass
(tools.stats.StreamingStats), so memory is one page, a few numbers per subject and the ids
of the tasks seen, not the run's records. Formats:

- table: the cells (column widths from the first page), then per subject the mean with its
  95% interval clustered by task and the pass rate, the paired differences, the incomplete
  cells (the first INCOMPLETE_LISTED_MAX of them by name, then a count), and the summary.
- `--json`: one valid document, byte for byte what `json.dumps(..., indent=1, sort_keys=True)`
  of {"cells", "paired_differences", "subjects", "summary"} would print, written as it goes.
- `--csv`: a header, then one row per cell.
- `--jsonl`: one JSON object per line: every cell (as in `--json`), then one last line
  `{"summary": ..., "subjects": ..., "paired_differences": ...}` (its key "summary" tells it
  from a cell, which has "cell_id"). For consumers that stream.
"""
from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from tools.stats import StreamingStats, fmt

INCOMPLETE_LISTED_MAX = 200
CSV_FIELDS = ["cell_id", "task", "repetition", "subject", "state", "score", "status", "attempts", "attempt_id",
              "worker_id", "assignment_id", "generation", "dispatch_order", "cost_usd", "usage", "incomplete_reason"]
TABLE_HEADER = ["cell", "score", "status", "worker", "gen", "attempts", "cost_usd"]


def cell_pages(pages: Iterable[Any]) -> Iterator[tuple[list[dict], dict | None]]:
    """(cells, summary or None) per page, in fleetctl's JSON shape."""
    from tools.fleetctl import results_json

    for page in pages:
        data = results_json(page)
        yield data["cells"], data["summary"] if page.HasField("summary") else None


def _tail(stats: StreamingStats, summary: dict | None) -> dict:
    assert summary is not None, "the listing ended without its summary"
    return {"paired_differences": [d.as_dict() for d in stats.paired_differences()],
            "subjects": [s.as_dict() for s in stats.subjects()], "summary": summary}


def write_json(pages: Iterable[Any], out: IO[str]) -> None:
    stats, summary, first = StreamingStats(), None, True
    out.write('{\n "cells": [')
    for cells, s in cell_pages(pages):
        summary = s or summary
        for cell in cells:
            stats.add(cell)
            text = json.dumps(cell, indent=1, sort_keys=True).replace("\n", "\n  ")
            out.write(("\n  " if first else ",\n  ") + text)
            first = False
    out.write("]" if first else "\n ]")
    rest = json.dumps(_tail(stats, summary), indent=1, sort_keys=True)
    out.write(",\n" + rest[2:] + "\n")


def write_jsonl(pages: Iterable[Any], out: IO[str]) -> None:
    stats, summary = StreamingStats(), None
    for cells, s in cell_pages(pages):
        summary = s or summary
        for cell in cells:
            stats.add(cell)
            out.write(json.dumps(cell, sort_keys=True) + "\n")
    out.write(json.dumps(_tail(stats, summary), sort_keys=True) + "\n")


def write_csv(pages: Iterable[Any], out: IO[str]) -> None:
    w = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for cells, _ in cell_pages(pages):
        w.writerows(cells)


def _row(cell: dict) -> list:
    if cell["state"] == "selected":
        return [cell["cell_id"], f"{cell['score']:g}", cell["status"], cell["worker_id"], f"g{cell['generation']}",
                cell["attempts"], "" if cell["cost_usd"] is None else f"{cell['cost_usd']:.4f}"]
    return [cell["cell_id"], "-", f"incomplete: {cell['incomplete_reason']}", "", "", cell["attempts"], ""]


def write_table(pages: Iterable[Any], out: IO[str]) -> None:
    from tools.fleetctl import print_summary, table

    stats, summary = StreamingStats(), None
    widths: list[int] | None = None
    incomplete: list[dict] = []
    incomplete_more = 0
    for cells, s in cell_pages(pages):
        summary = s or summary
        rows = []
        for cell in cells:
            stats.add(cell)
            rows.append(_row(cell))
            if cell["state"] != "selected":
                if len(incomplete) < INCOMPLETE_LISTED_MAX:
                    incomplete.append({k: cell[k] for k in ("cell_id", "incomplete_reason", "attempts")})
                else:
                    incomplete_more += 1
        if widths is None:
            widths = [max(len(str(x)) for x in col) for col in zip(TABLE_HEADER, *rows)]
            out.write("  ".join(h.ljust(w) for h, w in zip(TABLE_HEADER, widths)).rstrip() + "\n")
        for row in rows:
            out.write("  ".join(str(x).ljust(w) for x, w in zip(row, widths)) + "\n")
    subjects = stats.subjects()
    out.write("\n" + table([[s.subject, s.selected, s.incomplete, fmt(s.score), fmt(s.pass_rate, percent=True)]
                            for s in subjects],
                           ["subject", "selected", "incomplete", "mean score [95% CI, clustered by task]",
                            "pass rate"]) + "\n")
    diffs = stats.paired_differences()
    if diffs:
        out.write("\n" + table([[f"{d.a} - {d.b}", d.difference.n, fmt(d.difference)] for d in diffs],
                               ["paired difference", "pairs", "mean [95% CI]"]) + "\n")
    if incomplete:
        out.write("\nincomplete cells (not counted as zero):\n")
        for c in incomplete:
            out.write(f"  {c['cell_id']}: {c['incomplete_reason']} after {c['attempts']} attempts\n")
        if incomplete_more:
            out.write(f"  ... and {incomplete_more} more (all are in the table above, --csv and --json)\n")
    assert summary is not None, "the listing ended without its summary"
    with contextlib.redirect_stdout(out):
        print_summary(summary)
