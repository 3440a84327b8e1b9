"""The coordinator bench `reports`: durable reports/s from 64 simulated workers of protocol 4 (a
group's reports in one ReportBatch): 3-cell groups with 2 and with 8 slots per worker, 32-cell
groups with 2; each run has 360,000 cells so that it outlasts the window (checked after it).

Run by `python -m tools.bench.coordinator --only reports` (tools/bench/coordinator.py: sizes, the
table of every figure, the command line).
"""
from __future__ import annotations

from pathlib import Path

from tools.bench.clients import SUBJECTS
from tools.bench.commit import grpc_commit_rate
from tools.bench.harness import say
from tools.bench.sizes import Sizes

REPORTS_LARGE_GROUP = 32  # reports: groups of this many cells, so frames of as many reports


# --reports-shapes: the (slots per worker, cells per group) of each reports window
REPORTS_SHAPES = [(2, SUBJECTS), (8, SUBJECTS), (2, REPORTS_LARGE_GROUP)]


def bench_reports(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Durable reports/s over gRPC from 64 simulated workers of protocol 4 (every group's
    reports in one ReportBatch), with 2 and with 8 slots per worker."""
    say(f"Reports over gRPC: {sz.commit_clients} simulated workers of protocol 4, {sz.commit_window_s:g} s windows")
    out: dict = {}
    for slots, cells in REPORTS_SHAPES:
        r = grpc_commit_rate(sz, root / f"reports-{slots}-{cells}", None, profile, protocol=4, slots=slots, cells=cells,
                             total_cells=sz.reports_cells)
        key = f"reports_p4_{slots}slots" + ("" if cells == SUBJECTS else f"_{cells}cells")
        out[f"{key}_per_s"] = r["acked_rate"]
        out[key] = r
    return out
