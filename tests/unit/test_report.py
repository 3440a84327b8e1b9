"""The HTML report says exactly what the results say: pages rendered from small hand-made results
(and from admin protobuf responses through `fleetctl report`) are parsed back, and their counts,
slot lanes, idle gaps, retry and late marks, intervals, costs and incomplete reasons are checked
against the inputs, along with purity, escaping and the absence of anything to fetch."""
from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.fleetpb import admin_pb2, common_pb2
from tools.fleetctl import cli, client, views
from tools.fleetctl.commands import report as report_command
from tools.fleetctl.report_page import (
    AttemptsFileError,
    build_bars,
    layout,
    load_attempts,
    merge_timeline,
    pack_lanes,
    render_html,
    timeline_from_results,
)
from common.report.stats import subject_stats

T0 = 1_700_000_000_000


def cell(task: str, subject: str, *, worker: str | None = "w1", start: int | None = 0, dur: int | None = 1000,
         score: float | None = 1.0, gen: int = 1, attempts: int = 1, order: int = 1, cost: float | None = 0.01,
         state: str = "selected", reason: str | None = None, rep: int = 1) -> dict:
    selected = state == "selected"
    return {
        "cell_id": f"{task}/r{rep}/{subject}", "task": task, "repetition": rep, "subject": subject, "state": state,
        "score": score if selected else None, "status": "completed" if selected else None,
        "attempt_id": f"run-x:{task}/r{rep}/{subject}:a{attempts}" if selected else None,
        "worker_id": worker if selected else None,
        "assignment_id": f"run-x:{task}/r{rep}:g{gen}" if selected else None, "generation": gen if selected else None,
        "dispatch_order": order if selected else None, "attempts": attempts,
        "cost_usd": cost if selected else None, "usage": "complete" if selected else None,
        "incomplete_reason": reason, "artifacts": [],
        "started_ms": None if start is None or not selected else T0 + start,
        "finished_ms": None if start is None or dur is None or not selected else T0 + start + dur,
    }


def results_of(cells: list[dict], **summary) -> dict:
    s = {"selected": sum(c["state"] == "selected" for c in cells),
         "incomplete": sum(c["state"] != "selected" for c in cells),
         "observed_cost_usd": round(sum(c["cost_usd"] or 0 for c in cells), 9), "usage_complete": True,
         "state": "complete", "blocked_reason": "", "peak_concurrent_groups": 2, "slots_offered": 4, "late_reports": 0}
    s.update(summary)
    return {"cells": cells, "summary": s}


def status_of(**slots: int) -> dict:
    return {"runs": [{"run_id": "run-x", "state": "complete", "max_concurrent_groups": 4, "cells_total": 0}],
            "workers": [{"worker_id": w, "slots": n, "status": "active"} for w, n in slots.items()],
            "dead_letters": []}


VOID = ("meta", "br", "hr", "img", "input", "link")


class Page(HTMLParser):
    """Attributes by id, by tag and class, and the text of elements with an id."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[str | None] = []
        self.raw = text
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if "id" in a:
            self.by_id[a["id"]] = a
            self.text_by_id[a["id"]] = ""
        if tag not in VOID:
            self._open.append(a.get("id"))

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for i in self._open:
            if i is not None:
                self.text_by_id[i] += data

    def with_class(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and cls in a.get("class", "").split()]


def render(cells: list[dict], status: dict | None = None, extra: list[dict] | None = None, **summary) -> Page:
    results = results_of(cells, **summary)
    timeline = merge_timeline(timeline_from_results(results), extra or [])
    return Page(render_html(results, status or status_of(w1=2, w2=2), timeline))


# ---- counts ---------------------------------------------------------------------------------

def test_counts_are_readable_by_id_and_data_attribute() -> None:
    cells = [cell(f"t{i}", s, worker=f"w{i % 2 + 1}", start=i * 500, order=2 * i + j)
             for i in range(6) for j, s in enumerate(("a", "b"))]
    cells += [cell("t9", "a", state="incomplete", reason="exhausted", attempts=3),
              cell("t9", "b", state="incomplete", reason="running", attempts=1)]
    page = render(cells, state="running")
    main = page.by_id["report"]
    assert (main["data-cells-total"], main["data-cells-selected"], main["data-cells-incomplete"]) == ("14", "12", "2")
    assert main["data-subjects"] == "2" and main["data-run-id"] == "run-x" and main["data-workers"] == "2"
    assert page.by_id["count-selected"]["data-count"] == "12" and page.text_by_id["count-selected"] == "12"
    assert page.by_id["count-incomplete"]["data-count"] == "2"
    assert page.by_id["count-subjects"]["data-count"] == "2"
    assert page.by_id["count-cells"]["data-count"] == "14"
    assert page.by_id["count-groups"]["data-count"] == "6"
    assert page.by_id["count-attempts"]["data-count"] == str(12 + 3 + 1)
    assert page.by_id["incomplete-cells"]["data-cells-incomplete"] == "2"


def test_the_page_fetches_nothing_and_has_no_script() -> None:
    text = render_html(results_of([cell("t0", "a"), cell("t1", "a", start=2000)]), status_of(w1=1),
                       timeline_from_results(results_of([cell("t0", "a"), cell("t1", "a", start=2000)])))
    page = Page(text)
    for tag, attrs in page.elements:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed"), tag
        for key in ("src", "href", "srcset", "action", "xlink:href"):
            assert key not in attrs or attrs[key].startswith("#"), (tag, key, attrs[key])
    assert "http:" not in text and "https:" not in text and "@import" not in text
    assert all(u.startswith("url(#") for u in [text[i:i + 5] for i in range(len(text)) if text.startswith("url(", i)])


def test_render_is_pure_and_leaves_its_inputs_alone() -> None:
    cells = [cell("t0", "a"), cell("t0", "b", start=100), cell("t1", "a", worker="w2", gen=2, attempts=2)]
    results, status = results_of(cells), status_of(w1=2, w2=1)
    timeline = timeline_from_results(results)
    before = copy.deepcopy((results, status, timeline))
    first = render_html(results, status, timeline)
    assert render_html(results, status, timeline) == first
    assert (results, status, timeline) == before


# ---- the timeline ---------------------------------------------------------------------------

def test_bars_pack_into_the_lowest_free_lane_by_time() -> None:
    timeline = timeline_from_results(results_of([
        cell("A", "s", start=0, dur=10_000), cell("B", "s", start=2_000, dur=6_000),
        cell("C", "s", start=10_000, dur=5_000), cell("D", "s", start=8_000, dur=1_000)]))
    bars = build_bars(timeline)
    for b in bars:
        b.start, b.end = b.cells[0]["started_ms"], b.cells[0]["finished_ms"]
    assert pack_lanes(bars) == 2
    assert {b.task: b.lane for b in bars} == {"A": 0, "B": 1, "D": 1, "C": 0}


def test_a_group_bar_spans_its_cells_and_holds_them_in_the_spec_order() -> None:
    cells = [cell("t0", "zeta", start=0, dur=300), cell("t0", "alpha", start=10, dur=2000)]
    lanes = layout(timeline_from_results(results_of(cells)), status_of(w1=1), {"zeta": 0, "alpha": 1})
    (wid, n_lanes, slots, bars), = lanes.workers
    assert (wid, n_lanes, slots, len(bars)) == ("w1", 1, 1, 1)
    assert (bars[0].start, bars[0].end) == (T0, T0 + 2010)
    assert [c["subject"] for c in bars[0].cells] == ["zeta", "alpha"]


def test_lanes_follow_the_slots_and_overlap_beyond_them_is_flagged() -> None:
    three_at_once = [cell(f"t{i}", "s", start=i * 10, dur=1000) for i in range(3)]
    page = render(three_at_once, status_of(w1=2, w2=1))
    w1, w2 = page.with_class("g", "worker")
    assert (w1["data-worker"], w1["data-lanes"], w1["data-slots"], w1["data-bars"]) == ("w1", "3", "2", "3")
    assert (w2["data-worker"], w2["data-lanes"], w2["data-bars"]) == ("w2", "1", "0"), "an idle worker keeps its lane"
    assert "w1: 3 overlapping lanes but 2 slots" in page.raw and "3 lanes &gt; 2 slots" in page.raw


def test_idle_gaps_are_drawn_between_bars_and_over_unused_slots() -> None:
    # w1 (2 slots): one lane busy 0-1 s and 3-4 s (one gap between), the other lane never used;
    # the run spans 0-4 s, so: lane 0 has 1 gap, lane 1 has 1 (whole), w2 (1 slot, no bars) 1.
    cells = [cell("t0", "s", start=0, dur=1000), cell("t1", "s", start=3000, dur=1000)]
    page = render(cells, status_of(w1=2, w2=1))
    idle = page.with_class("rect", "idle")
    assert page.by_id["report"]["data-idle-gaps"] == str(len(idle)) == "3"
    assert page.by_id["report"]["data-timeline-mode"] == "time"


def test_without_times_bars_are_placed_by_dispatch_order_and_the_page_says_so() -> None:
    cells = [cell("t0", "s", start=None, order=1), cell("t1", "s", start=None, order=2, worker="w2"),
             cell("t2", "s", start=0, order=3)]
    page = render(cells)
    assert page.by_id["report"]["data-timeline-mode"] == "dispatch-order"
    assert "dispatch order" in page.text_by_id["timeline-mode"]
    assert page.by_id["count-groups"]["data-count"] == "3"
    assert page.with_class("rect", "idle") == [], "idle time is unknown without times"


def test_retries_redispatches_and_late_reports_are_marked() -> None:
    cells = [cell("t0", "a", attempts=2, gen=2, start=2000), cell("t0", "b", start=0), cell("t1", "a", start=0,
                                                                                          worker="w2")]
    extra = [
        {"kind": "retried", "worker_id": "w1", "cell_id": "t0/r1/a", "assignment_id": "run-x:t0/r1:g1",
         "attempt_id": "run-x:t0/r1/a:a1", "generation": 1, "started_ms": T0, "finished_ms": T0 + 400},
        {"kind": "late", "worker_id": "w2", "cell_id": "t0/r1/b", "assignment_id": "run-x:t0/r1:g0",
         "attempt_id": "run-x:t0/r1/b:a0", "generation": 1, "started_ms": T0 + 100, "finished_ms": T0 + 2500},
        {"kind": "selected", "worker_id": "w1", "cell_id": "t0/r1/b", "attempt_id": "run-x:t0/r1/b:a1"},  # a copy
    ]
    page = render(cells, extra=extra, late_reports=1)
    redispatched = page.with_class("g", "redispatch")
    assert [b["data-assignment"] for b in redispatched] == ["run-x:t0/r1:g2"]
    assert len(page.with_class("rect", "had-retries")) == 1
    assert page.by_id["count-retried-cells"]["data-count"] == "1"
    assert [r["data-cell"] for r in page.with_class("rect", "retried")] == ["t0/r1/a"]
    assert [r["data-cell"] for r in page.with_class("rect", "late")] == ["t0/r1/b"]
    assert len(page.with_class("g", "late")) == 1, "a bar of late reports only is a late bar"
    assert page.by_id["extra-attempts"]["data-late"] == "1" and page.by_id["extra-attempts"]["data-retried"] == "1"
    assert "late-not-drawn" not in page.by_id
    assert "attempts-not-drawn" not in page.by_id, "4 attempts, 4 drawn"


def test_attempts_the_admin_api_does_not_list_are_counted_as_not_drawn() -> None:
    cells = [cell("t0", "a", attempts=3), cell("t1", "a", state="incomplete", reason="exhausted", attempts=2)]
    page = render(cells, late_reports=2)
    assert page.by_id["attempts-not-drawn"]["data-attempts"] == "4"
    assert page.by_id["late-not-drawn"]["data-late-reports"] == "2"


def test_load_attempts_reads_a_list_or_an_object_and_names_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "attempts.json"
    path.write_text(json.dumps({"attempts": [{"kind": "late", "worker_id": "w9", "cell_id": "t3/r2/x",
                                              "started_ms": 5, "finished_ms": 9}]}))
    (entry,) = load_attempts(path)
    assert (entry["task"], entry["repetition"], entry["subject"], entry["kind"]) == ("t3", 2, "x", "late")
    for bad, needle in [([{"kind": "odd", "worker_id": "w", "cell_id": "c"}], "kind"),
                        ([{"kind": "late", "worker_id": "w", "cell_id": "c", "colour": 1}], "colour"),
                        ([{"kind": "late", "cell_id": "c"}], "worker_id"),
                        ([{"kind": "late", "worker_id": "w", "cell_id": "c", "started_ms": "5"}], "started_ms"),
                        ({"nope": []}, "list")]:
        path.write_text(json.dumps(bad))
        with pytest.raises(AttemptsFileError, match=needle):
            load_attempts(path)
    path.write_text("[1,")
    with pytest.raises(AttemptsFileError, match="not JSON"):
        load_attempts(path)


# ---- scores, cost, incomplete cells ---------------------------------------------------------

def test_the_score_table_shows_the_clustered_intervals_of_tools_stats() -> None:
    cells = [cell(f"t{i}", s, start=i * 100, score=float((i + j) % 2), rep=r)
             for i in range(4) for r in (1, 2) for j, s in enumerate(("a", "b"))]
    page = render(cells)
    rows = {a["data-subject"]: a for t, a in page.elements if t == "tr" and "data-subject" in a}
    stats = {s.subject: s for s in subject_stats(cells)}
    assert set(rows) == {"a", "b"}
    for name, row in rows.items():
        assert row["data-selected"] == str(stats[name].selected) == "8"
        assert float(row["data-mean"]) == pytest.approx(stats[name].score.mean)
    low, high = stats["a"].score.low, stats["a"].score.high
    assert low is not None and f"[{low:.3f}, {high:.3f}]" in page.raw
    assert "paired" in page.by_id


def test_with_a_declared_score_range_the_axis_and_every_interval_stay_inside_it() -> None:
    # The README's `flaky`: nine tasks pass, one always fails; the t interval is [0.674, 1.126].
    cells = [cell(f"t{i}", "flaky", start=i * 100, score=0.0 if i == 0 else 1.0, rep=r)
             for i in range(10) for r in (1, 2)]
    unbounded = render(cells)
    assert float(unbounded.by_id["ci-method"]["data-axis-high"]) > 1.1, "no range declared: the axis follows t"
    page = render(cells, score_range=[0.0, 1.0])
    note = page.by_id["ci-method"]
    assert (float(note["data-axis-low"]), float(note["data-axis-high"])) == (0.0, 1.0)
    assert (note["data-score-method"], note["data-pass-method"]) == ("t_clustered_clipped", "wilson_clustered")
    assert "[0.674, 1.000]" in page.raw and "1.126" not in page.raw
    for line in page.with_class("line", "ci"):
        assert 4 <= float(line["x1"]) <= float(line["x2"]) <= 220 - 4


def test_cost_of_selected_results_against_everything_observed_and_usage_incomplete() -> None:
    cells = [cell("t0", "a", cost=0.25), cell("t1", "a", cost=None, start=10),
             cell("t2", "a", state="incomplete", reason="exhausted", attempts=2)]
    page = render(cells, observed_cost_usd=0.75, usage_complete=False)
    assert float(page.by_id["cost-selected"]["data-usd"]) == 0.25
    assert float(page.by_id["cost-observed"]["data-usd"]) == 0.75
    assert float(page.by_id["cost-other"]["data-usd"]) == 0.5
    assert page.by_id["usage-status"]["data-usage-complete"] == "false"
    assert "usage incomplete" in page.text_by_id["usage-status"]
    assert page.by_id["selected-cost-unknown"]["data-cells"] == "1"
    assert page.by_id["report"]["data-usage-complete"] == "false"
    complete = render([cell("t0", "a", cost=0.25)], observed_cost_usd=0.25, usage_complete=True)
    assert complete.by_id["usage-status"]["data-usage-complete"] == "true"


def test_incomplete_cells_are_listed_with_their_reasons_and_escaped() -> None:
    cells = [cell("t0", "a"),
             cell("t1", "a", state="incomplete", reason="exhausted", attempts=3),
             cell("t2", "a", state="incomplete", reason="exhausted", attempts=3),
             cell("t3", "a", state="incomplete", reason="<b>blocked</b>", attempts=0)]
    results = results_of(cells)
    text = render_html(results, status_of(w1=1), timeline_from_results(results))
    assert "<b>blocked</b>" not in text and "&lt;b&gt;blocked&lt;/b&gt;" in text
    page = Page(text)
    rows = [a for t, a in page.elements if t == "tr" and "data-cell-id" in a]
    assert [(r["data-cell-id"], r["data-reason"]) for r in rows] == [
        ("t1/r1/a", "exhausted"), ("t2/r1/a", "exhausted"), ("t3/r1/a", "<b>blocked</b>")]
    reasons = {a["data-reason"]: a["data-count"] for t, a in page.elements if t == "li" and "data-reason" in a}
    assert reasons == {"exhausted": "2", "<b>blocked</b>": "1"}
    none = render([cell("t0", "a")])
    assert none.by_id["no-incomplete"]["data-cells-incomplete"] == "0"


def test_an_empty_run_renders() -> None:
    page = render([cell("t0", "a", state="incomplete", reason="not_yet_run", attempts=0)], status_of(), state="running")
    assert page.by_id["report"]["data-cells-selected"] == "0"
    assert page.by_id["count-groups"]["data-count"] == "0"


# ---- the command ----------------------------------------------------------------------------

class FakeAdmin:
    def __init__(self, results: admin_pb2.GetResultsResponse, status: admin_pb2.GetStatusResponse) -> None:
        from common.fleetpb import admin_pb2

        self.responses = {"GetResults": results, "GetStatus": status,
                          "ListAttempts": admin_pb2.ListAttemptsResponse()}
        self.calls: list[tuple[str, object]] = []

    def call(self, name: str, request: object, timeout: float | None = None) -> object:
        self.calls.append((name, request))
        return self.responses[name]


def proto_results() -> admin_pb2.GetResultsResponse:
    resp = admin_pb2.GetResultsResponse()
    timed = admin_pb2.CellResult(cell_id="t0/r1/a", task_id="t0", repetition=1, subject_id="a", state="selected",
                                 score=1.0, status=common_pb2.STATUS_COMPLETED, attempt_id="run-x:t0/r1/a:a1",
                                 worker_id="w1", assignment_id="run-x:t0/r1:g1", generation=1, dispatch_order=1,
                                 attempts=1, cost_usd=0.5, usage=common_pb2.USAGE_COMPLETE,
                                 started_ms=T0, finished_ms=T0 + 800)
    untimed = admin_pb2.CellResult(cell_id="t1/r1/a", task_id="t1", repetition=1, subject_id="a", state="selected",
                                   score=0.0, status=common_pb2.STATUS_COMPLETED, attempt_id="run-x:t1/r1/a:a1",
                                   worker_id="w1", assignment_id="run-x:t1/r1:g1", generation=1, dispatch_order=2,
                                   attempts=1, usage=common_pb2.USAGE_COMPLETE)
    gap = admin_pb2.CellResult(cell_id="t2/r1/a", task_id="t2", repetition=1, subject_id="a", state="incomplete",
                               incomplete_reason="exhausted", attempts=3)
    resp.cells.extend([timed, untimed, gap])
    resp.summary.CopyFrom(admin_pb2.Summary(selected=2, incomplete=1, observed_cost_usd=0.7, usage_complete=False,
                                            state=admin_pb2.RUN_STATE_INCOMPLETE, late_reports=0))
    return resp


def test_fleetctl_report_reads_times_only_when_present_and_writes_the_page(tmp_path: Path, capsys) -> None:
    status = admin_pb2.GetStatusResponse(runs=[admin_pb2.RunStatus(run_id="run-x", cells_total=3)],
                                         workers=[admin_pb2.WorkerStatus(worker_id="w1", slots=2)])
    admin = FakeAdmin(proto_results(), status)
    out = tmp_path / "page.html"
    args = cli.build_parser().parse_args(["report", "run-x", "--html", str(out)])
    assert (args.cmd, args.run, args.html, args.attempts) == ("report", "run-x", out, None)
    assert report_command.run(admin, args) == 0
    assert [name for name, _ in admin.calls] == ["GetResults", "GetStatus", "ListAttempts"]
    assert all(req.run_id == "run-x" for _, req in admin.calls)
    results = views.results_json(proto_results())
    assert [(c["started_ms"], c["finished_ms"]) for c in results["cells"]] == [(T0, T0 + 800), (None, None),
                                                                                (None, None)]
    page = Page(out.read_text())
    main = page.by_id["report"]
    assert (main["data-cells-selected"], main["data-cells-incomplete"], main["data-run-id"]) == ("2", "1", "run-x")
    assert main["data-timeline-mode"] == "dispatch-order", "one selected cell has no times"
    assert "1 attempts without times" in capsys.readouterr().err


def test_fleetctl_report_draws_an_attempts_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    status = admin_pb2.GetStatusResponse(runs=[admin_pb2.RunStatus(run_id="run-x")])
    attempts = tmp_path / "attempts.json"
    attempts.write_text(json.dumps([{"kind": "late", "worker_id": "w2", "cell_id": "t0/r1/a",
                                     "attempt_id": "run-x:t0/r1/a:a0", "dispatch_order": 3}]))
    out = tmp_path / "page.html"
    args = SimpleNamespace(run="run-x", html=out, attempts=attempts)
    assert report_command.run(FakeAdmin(proto_results(), status), args) == 0
    assert Page(out.read_text()).by_id["extra-attempts"]["data-late"] == "1"
    attempts.write_text("{}")
    with pytest.raises(client.CtlError, match="list of attempts"):
        report_command.run(FakeAdmin(proto_results(), status), args)


# ---- dispatch order -------------------------------------------------------------------------

def test_the_page_says_which_order_the_run_used() -> None:
    ordered = status_of(w1=1)
    ordered["runs"][0]["order_from"] = "run-earlier"
    page = render([cell("t0", "a")], ordered)
    assert page.by_id["dispatch-order"]["data-order-from"] == "run-earlier"
    assert "longest first" in page.text_by_id["dispatch-order"] and "run-earlier" in page.text_by_id["dispatch-order"]
    plain = render([cell("t0", "a")], status_of(w1=1))
    assert plain.by_id["dispatch-order"]["data-order-from"] == ""
    assert plain.text_by_id["dispatch-order"] == "spec order"
