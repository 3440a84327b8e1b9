"""The console's pages (coordinator/console/pages.py) as pure functions of synthetic results:
a cell's colour follows its state and reason; a small run is drawn cell by cell and a large one
aggregated, and the run page of 100,000 cells (1,000,000 with FLEET_LONG_TESTS=1) stays under
the response limit, its tables paged; the fleet page pages 10,000 workers and counts them by
state; a viewer's pages carry no action and an admin's carry the CSRF token; every value shown
is escaped."""
from __future__ import annotations

import os
import re

import pytest

from coordinator.console import limits, pages
from coordinator.console.auth import Principal

ADMIN = Principal("admin", "session", "admin session 1", "csrf-token-1")
VIEWER = Principal("viewer", "session", "viewer session 2", "csrf-token-2")


def cell(g: int, s: str, i: int, **kw) -> dict:
    sel = i % 3 == 0
    c = {"cell_id": f"t{g:06d}/r1/{s}", "task": f"t{g:06d}", "repetition": 1, "subject": s,
         "state": "selected" if sel else "incomplete", "score": (1.0 if i % 2 else 0.0) if sel else None,
         "status": "completed" if sel else None, "attempt_id": None, "worker_id": f"w{i % 7}" if sel else None,
         "assignment_id": f"a{g}" if sel else None, "generation": 1 if sel else None, "dispatch_order": g + 1,
         "attempts": 1, "cost_usd": 0.001 if sel else None, "usage": "complete" if sel else None,
         "incomplete_reason": None if sel else ("running" if i % 5 == 0 else "not_yet_run"), "incomplete_detail": None,
         "started_ms": None, "finished_ms": None, "artifacts": [], "throttled": 0, "executions": 1 if sel else 0,
         "extra_execution_cost_usd": 0.0}
    c.update(kw)
    return c


def results(n_groups: int, subjects: str = "abcde") -> dict:
    cells = [cell(g, s, g * len(subjects) + k) for g in range(n_groups) for k, s in enumerate(subjects)]
    return {"cells": cells, "summary": {
        "selected": sum(1 for c in cells if c["state"] == "selected"), "incomplete": 0, "observed_cost_usd": 1.0,
        "usage_complete": True, "state": "running", "blocked_reason": "", "peak_concurrent_groups": 4,
        "slots_offered": 8, "late_reports": 0, "selected_cost_usd": 1.0, "run_observed_cost_usd": 1.0,
        "cost_cap_usd": None, "score_range": None}}


def status(n: int) -> dict:
    return {"runs": [{"run_id": "r", "state": "running", "cells_total": n, "groups": {"waiting": 1}, "cells_running": 0,
                      "environment": {"reference_id": "env1", "reference_keys": 3, "pin_id": None}}],
            "workers": [], "providers": []}


@pytest.mark.parametrize("c, expected", [
    (cell(0, "a", 0, score=1.0), "pass"), (cell(0, "a", 0, score=0.5), "partial"), (cell(0, "a", 0, score=0.0), "zero"),
    (cell(0, "a", 0, score=None), "unscored"), (cell(0, "a", 1, incomplete_reason="running"), "running"),
    (cell(0, "a", 1, incomplete_reason="retry_pending"), "waiting"),
    (cell(0, "a", 1, incomplete_reason="not_yet_run"), "waiting"), (cell(0, "a", 1, incomplete_reason="paused"), "held"),
    (cell(0, "a", 1, incomplete_reason="provider_throttled"), "held"),
    (cell(0, "a", 1, incomplete_reason="exhausted"), "exhausted"),
])
def test_a_cells_colour_follows_its_state(c: dict, expected: str) -> None:
    assert pages.cell_class(c) == expected


def test_a_small_run_is_drawn_cell_by_cell_with_its_actions_for_an_admin_only() -> None:
    r = results(4, "ab")
    html = pages.run_live("r", r, status(8), [], {}, 0, None, ADMIN, 1000)
    assert 'data-mode="cells"' in html and len(re.findall(r'<a class="m ', html)) == 8
    assert 'href="/runs/r/cells/t000000/r1/a"' in html
    assert html.count('name="csrf" value="csrf-token-1"') >= 1  # the per-cell retry buttons of an admin
    page = pages.run_page("r", html, status(8)["runs"][0], {}, ADMIN)
    assert 'id="run-actions"' in page and 'id="bulk-form"' in page
    viewer = pages.run_page("r", pages.run_live("r", r, status(8), [], {}, 0, None, VIEWER, 1000),
                            status(8)["runs"][0], {}, VIEWER)
    assert 'id="run-actions"' not in viewer and "/retry" not in viewer and "csrf-token-1" not in viewer


@pytest.mark.parametrize("groups", [20_000] + ([200_000] if os.environ.get("FLEET_LONG_TESTS") == "1" else []))
def test_a_large_run_page_is_aggregated_paged_and_under_the_limit(groups: int) -> None:
    r = results(groups)
    html = pages.run_live("r", r, status(groups * 5), [], {"state": "waiting"}, 3, None, ADMIN, 1000)
    page = pages.run_page("r", html, status(groups * 5)["runs"][0], {"state": "waiting"}, ADMIN)
    assert len(page.encode()) < limits.RESPONSE_BYTES_MAX, len(page.encode())
    rows = int(re.search(r'id="matrix" data-mode="aggregated" data-cells="\d+" data-rows="(\d+)"', page).group(1))
    assert rows <= limits.MATRIX_ROWS_MAX
    assert page.count('<tr data-cell-id=') <= limits.TABLE_ROWS_MAX + 20  # the cells page and the incomplete top 20
    assert 'data-page="3"' in page and 'id="timeline-omitted"' in page
    waiting = sum(1 for c in r["cells"] if pages.cell_class(c) == "waiting")
    assert f'<table id="cells" class="list" data-cells="{waiting}">' in page


def test_the_fleet_page_pages_ten_thousand_workers_and_counts_them() -> None:
    workers = [{"worker_id": f"w{i:05d}", "status": "expired" if i % 10 == 0 else "active", "slots": 4,
                "busy_slots": i % 5, "last_heartbeat_age_ms": 100, "serves_runs": ["r"], "refusal": None,
                "quarantine": None} for i in range(10_000)]
    html = pages.fleet_live({"runs": []}, workers, 7, {}, [], ADMIN, 1000)
    assert len(html.encode()) < limits.RESPONSE_BYTES_MAX
    assert html.count('<tr data-worker-id=') == limits.TABLE_ROWS_MAX
    assert '<li data-worker-state="expired"><b data-count="1000">' in html
    assert 'data-worker-id="w00700"' in html and 'data-page="7"' in html
    assert 'data-workers="10000"' in html and "lost" in html


def test_values_are_escaped() -> None:
    r = results(1, "a")
    r["cells"][0]["subject"] = '<script>alert(1)</script>'
    r["cells"][0]["worker_id"] = '"><img src=x>'
    html = pages.run_live("r<b>", r, status(1), [], {}, 0, None, ADMIN, 1000)
    assert "<script>alert" not in html and '"><img' not in html
    assert "&lt;script&gt;" in html
    assert "<b>" not in pages.login_page("<b>bad</b>", "/<b>")
