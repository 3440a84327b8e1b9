"""The console's run page read (issue 24) gives what the old full walk gave: on runs the core
itself brought to mixed states (selected at several scores, retried, out of attempts, lost with
a worker that went, reported late, running, waiting out a backoff, not yet run; paused; blocked),
the view that ReadRunPage's parts fold into (coordinator/views.py run_part and part_cells,
coordinator/console/runview.py) equals the view of the full listing (GetResults and ListAttempts
through the same Admin servicer), field by field and floating-point sum by sum, for filters and
pages of the cells table, with parts that end inside a group and with the limits lowered so that
the matrix aggregates, the timeline is left out and the table pages; the page drawn from each is
the same bytes; each part's cells are GetResults' cells as results_json reads them; and a cell's
own read (ReadCell) is its cell and attempts as the full listing has them. Method: the core
harness, the real Admin servicer over a fake actor that steps the core in memory, the console's
LocalAdmin."""
from __future__ import annotations

import asyncio

import pytest

from common.evidence import Cleanup, Execution, Usage, Verification
from common.fleetpb import admin_pb2
from common.report.shapes import results_json, status_json
from coordinator import views
from coordinator.admin_service import AdminServicer
from coordinator.console import limits, pages, runview
from coordinator.console.admin import LocalAdmin
from coordinator.console.auth import Principal
from coordinator.core.summary import Tally
from coordinator.edge import Hub
from coordinator.paging import Position
from tests.unit.core_helpers import EVIDENCE, Core, make_policy, make_report, make_spec
from tests.unit.test_provider_views import Context, CoreActor, Tokens

ADMIN = Principal("admin", "session", "admin session 1", "csrf-token-1")
SCORES = (1.0, 0.0, 0.5, 1.0, 0.25)
FILTERS = [({}, 0), ({}, 1), ({}, 99), ({"state": "incomplete"}, 0), ({"state": "waiting"}, 1),
           ({"state": "pass"}, 0), ({"worker": "w1"}, 0), ({"subject": "s1", "task": "t3"}, 0),
           ({"reason": "exhausted"}, 0), ({"reason": "retry_pending"}, 0), ({"state": "nothing-matches"}, 3)]


def mixed_run(ending: str = "running") -> Core:
    """A run of 8 tasks x 2 repetitions x 3 subjects on w1 and w2 (2 slots each), left mid-way:
    w1 reports scores, infrastructure failures (retried after a backoff) and, for two cells, an
    invalid verification until they are out of attempts; w2 reports one cell of its first group
    and goes, so that its other cells are lost and one of them reports late. `ending`: "running",
    "paused" (an operator paused it) or "blocked" (a deterministic environment failure)."""
    k = Core(make_spec(tasks=8, subjects=3, repetitions=2, cap=4),
             make_policy(max_attempts_per_cell=2, quarantine_after_failures=0, retry_backoff_ms=15,
                         retry_backoff_max_ms=15))
    k.register("w1", slots=2)
    k.register("w2", slots=2)
    n = 0
    for rnd in range(6):
        for a in [a for a in k.state.assignments.values() if a.authoritative and a.worker_id == "w1"]:
            for tid in a.attempts:
                if k.attempt(tid).report is not None:
                    continue
                n += 1
                cid = k.attempt(tid).cell_id
                if ending == "blocked" and rnd == 3:
                    report = EVIDENCE["environment-failure"][0]
                elif cid.endswith("s2") and cid.startswith(("t1/", "t3/")):
                    report = EVIDENCE["invalid-verification"][0]
                elif n % 7 == 0:
                    report = make_report(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.UNKNOWN,
                                         detail="lost the VM")
                else:
                    report = make_report(score=SCORES[n % len(SCORES)], cost_usd=0.001 * (n % 4) if n % 5 else None,
                                         started_ms=1000 + n * 10, finished_ms=1000 + n * 10 + 7, detail=f"ran {n}")
                k.report(tid, report)
        if rnd == 1:
            [a, *_] = [a for a in k.state.assignments.values() if a.authoritative and a.worker_id == "w2"]
            k.report(a.attempts[0], make_report(score=1.0, started_ms=5, finished_ms=9))
            late = a.attempts[1]
            k.gone("w2")
            k.report(late, make_report(score=0.5, cost_usd=0.2))
        k.tick(10)
    if ending == "paused":
        k.pause()
    return k


def listing(k: Core) -> tuple[dict, list, dict]:
    """GetResults, ListAttempts and GetStatus as the console read them before (pages of 5,000)."""
    admin = AdminServicer(CoreActor(k), Hub(), Tokens(), None)  # type: ignore[arg-type]

    async def read() -> tuple:
        r = await admin.GetResults(admin_pb2.GetResultsRequest(run_id=k.run_id, page_size=5_000), Context())
        a = await admin.ListAttempts(admin_pb2.ListAttemptsRequest(run_id=k.run_id, page_size=5_000), Context())
        s = await admin.GetStatus(admin_pb2.GetStatusRequest(run_id=k.run_id), Context())
        assert not r.next_page_token and not a.next_page_token
        return results_json(r), list(a.attempts), status_json(s)

    return asyncio.run(read())


def local(k: Core) -> LocalAdmin:
    return LocalAdmin(AdminServicer(CoreActor(k), Hub(), Tokens(), None), "admin")  # type: ignore[arg-type]


def test_the_mixed_run_has_every_state_the_page_tells_apart() -> None:
    results, attempts, _ = listing(mixed_run())
    reasons = {c["incomplete_reason"] for c in results["cells"]}
    assert {"running", "exhausted", "retry_pending", "not_yet_run", None} <= reasons, reasons
    assert {a.kind for a in attempts} == {"selected", "retried", "late", "lost", "pending"}
    assert {c["score"] for c in results["cells"]} >= {0.0, 0.5, 1.0}
    assert any(c["state"] == "selected" and c["attempts"] > 1 for c in results["cells"])
    assert results["summary"]["executed_more_than_once"] and not results["summary"]["usage_complete"]
    assert {c["incomplete_reason"] for c in listing(mixed_run("paused"))[0]["cells"]} >= {"paused"}
    assert {c["incomplete_reason"] for c in listing(mixed_run("blocked"))[0]["cells"]} >= {"blocked"}


@pytest.mark.parametrize("ending", ["running", "paused", "blocked"])
@pytest.mark.parametrize("limited", [False, True], ids=["limits", "lowered-limits"])
def test_the_run_page_read_gives_the_full_walks_view_and_page(monkeypatch, ending: str, limited: bool) -> None:
    k = mixed_run(ending)
    results, attempts, status = listing(k)
    monkeypatch.setattr(views, "RUN_PART_CELLS_MAX", 7)  # parts end inside groups of 3 cells
    if limited:  # the matrix aggregates, the timeline is left out, the cells table pages by 5
        monkeypatch.setattr(limits, "MATRIX_CELLS_MAX", 20)
        monkeypatch.setattr(limits, "MATRIX_ROWS_MAX", 3)
        monkeypatch.setattr(limits, "TIMELINE_CELLS_MAX", 10)
        monkeypatch.setattr(limits, "TABLE_ROWS_MAX", 5)
    admin = local(k)
    for f, page in FILTERS:
        old = runview.from_listing(results, attempts, f, page)
        new = asyncio.run(admin.run_view(k.run_id, f, page))
        for name in runview.RunView.__slots__:
            assert getattr(new, name) == getattr(old, name), (f, page, name)
        assert new == old
        assert (old.matrix_cells is None) == limited and (old.timeline is None) == limited
        html = pages.run_live_view(k.run_id, new, status, f, None, ADMIN, 1000)
        assert html == pages.run_live(k.run_id, results, status, attempts, f, page, None, ADMIN, 1000)
    assert new.summary == results["summary"]


def test_each_parts_cells_are_the_listings_cells() -> None:
    k = mixed_run()
    results, _, _ = listing(k)
    at, tally, cells, summary = Position(), Tally(), [], None
    while at is not None:
        part = views.run_part(k.state, k.run_id, at, 5, tally)
        assert part is not None and len(part.cells) <= 5
        got = views.part_cells(part)
        cells.extend(got.cells)
        at, summary = part.next_at, got.summary
    keys = runview.PAGE_CELL_KEYS
    assert [{key: c[key] for key in keys} for c in results["cells"]] == cells
    assert results_json(admin_pb2.GetResultsResponse(summary=summary))["summary"]["observed_cost_usd"] == \
        results["summary"]["observed_cost_usd"]


def test_a_cells_read_is_its_cell_and_attempts_from_the_listing() -> None:
    k = mixed_run()
    results, attempts, _ = listing(k)
    admin = local(k)
    for c in results["cells"]:
        cell, mine = asyncio.run(admin.cell(k.run_id, c["cell_id"]))
        assert cell == c
        assert mine == [a for a in attempts if a.cell_id == c["cell_id"]]
    assert asyncio.run(admin.cell(k.run_id, "t0/r1/nobody")) == (None, [])
    with pytest.raises(Exception, match="UNKNOWN_RUN"):
        asyncio.run(admin.cell("no-such-run", "t0/r1/s0"))
    with pytest.raises(Exception, match="UNKNOWN_RUN"):
        asyncio.run(admin.run_view("no-such-run", {}, 0))
