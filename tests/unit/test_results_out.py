"""`fleetctl results` written page by page: `--json` is one valid document equal to the whole
run's (the statistics to rounding), `--jsonl` is a line per cell and a last summary line,
`--csv` a row per cell, the table lists every cell; method: pages of a real core's run from
the coordinator's own views, fed to the writers through an in-memory stream."""
from __future__ import annotations

import csv
import io
import json

from common import limits
from common.fleetpb import admin_pb2
from coordinator import views
from coordinator.core.summary import Tally
from coordinator.paging import Position
from tests.unit.core_helpers import Core
from tests.unit.test_paging import advance_run, core
from tools.fleetctl import results_out
from tools.fleetctl.views import results_json, with_stats


def pages_of(k: Core, size: int) -> list:
    at, tally, out = Position(), Tally(), []
    while True:
        page = views.results_page(k.state, k.run_id, at, size, limits.PAGE_BYTES_MAX, tally)
        resp = admin_pb2.GetResultsResponse(cells=page.items, total_size=page.total)
        if page.next_at is None:
            resp.summary.CopyFrom(page.summary)
            out.append(resp)
            return out
        out.append(resp)
        at, tally = page.next_at, page.tally


def whole(pages: list) -> admin_pb2.GetResultsResponse:
    w = admin_pb2.GetResultsResponse()
    for p in pages:
        w.cells.extend(p.cells)
    w.summary.CopyFrom(pages[-1].summary)
    return w


def a_run() -> Core:
    k = core()
    for _ in range(25):
        advance_run(k, 9)
    return k


def test_json_is_one_document_equal_to_the_whole_runs():
    pages = pages_of(a_run(), 7)
    out = io.StringIO()
    results_out.write_json(pages, out)
    expected = with_stats(results_json(whole(pages)))
    got = json.loads(out.getvalue())
    assert got == expected, "the same statistics as over the whole list"
    out = io.StringIO()
    results_out.write_json(pages, out, "bootstrap")
    assert json.loads(out.getvalue()) == with_stats(results_json(whole(pages)), "bootstrap")
    assert len(got["cells"]) == 240 and 0 < got["summary"]["selected"] < 240


def test_json_text_is_what_json_dumps_prints():
    pages = pages_of(a_run(), 50)
    out = io.StringIO()
    results_out.write_json(pages, out)
    assert out.getvalue() == json.dumps(with_stats(results_json(whole(pages))), indent=1, sort_keys=True) + "\n"


def test_jsonl_has_a_line_per_cell_then_the_summary():
    pages = pages_of(a_run(), 11)
    out = io.StringIO()
    results_out.write_jsonl(pages, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 241 and all("cell_id" in x for x in lines[:-1])
    assert set(lines[-1]) == {"summary", "subjects", "paired_differences", "scores_outside_range"}
    assert lines[-1]["summary"]["selected"] == sum(1 for x in lines[:-1] if x["state"] == "selected")


def test_csv_and_table_list_every_cell_once():
    pages = pages_of(a_run(), 13)
    out = io.StringIO()
    results_out.write_csv(pages, out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(rows) == len({r["cell_id"] for r in rows}) == 240
    out = io.StringIO()
    results_out.write_table(pages, out)
    text = out.getvalue()
    assert all(r["cell_id"] in text for r in rows)
    assert "mean score [95% CI, clustered by task]" in text and "selected," in text
