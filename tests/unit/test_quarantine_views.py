"""Quarantine and work paid for twice, as the operator sees them (issue 23): GetStatus names a
quarantined worker "quarantined" with its reason, until when, probation and streak, the summary of
a large fleet counts and names them, `fleetctl status` prints the evidence and `--json` carries
it, ReleaseWorker reaches the core as WorkerReleased (and its refusal comes back), and GetResults,
`fleetctl results` and the HTML report count the cells executed more than once and the cost of
their extra executions, summed over pages; method: core states built by the core itself (a broken
worker beside a healthy one; a worker that expires while its cell runs and reports late) or set by
hand, read through the real views, formatters, page tokens and Admin servicer (a fake actor that
steps the core in memory)."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json

import pytest

from common.evidence import Cleanup, Execution, Usage, Verification
from common.fleetpb import admin_pb2, common_pb2
from common.ids import WorkerId
from coordinator.admin_service import AdminServicer
from coordinator.edge import Hub
from coordinator import views
from coordinator.core import commands as c
from coordinator.core.summary import executed
from tests.unit.core_helpers import EXPIRE_MS, Core, make_policy, make_report, make_spec
from tests.unit.test_core_quarantine import BACKOFF_MS, black_hole_beside_a_healthy_worker
from tests.unit.test_provider_views import Context, CoreActor, Tokens, ctl_admin  # noqa: F401 (a fixture)
from tests.unit.test_results_out import pages_of
from tools.fleetctl import results_out
from tools.fleetctl import views as ctl
from tools.fleetctl.report_page import render_html, timeline_from_results


def printed_status(k: Core, view: int = admin_pb2.WORKERS_VIEW_ALL, listed_max: int = 0) -> tuple[dict, str]:
    data = ctl.status_json(views.status(k.state, None, k.now, view, 5, listed_max))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ctl.print_status(data)
    return data, out.getvalue()


# ---- quarantine in status ----------------------------------------------------------------------

def test_status_names_a_quarantined_worker_with_its_reason_and_until_when() -> None:
    k = black_hole_beside_a_healthy_worker()
    bad = k.worker("bad")
    assert bad.quarantined_until_ms, "the core quarantined it"
    ws = {w.worker_id: w for w in views.status(k.state, None, k.now).workers}
    assert ws["bad"].status == "quarantined" and ws["good"].status == "active"
    assert ws["bad"].quarantined_until_ms == bad.quarantined_until_ms
    assert ws["bad"].quarantine_left_ms == bad.quarantined_until_ms - k.now == BACKOFF_MS
    assert "No space left on device" in ws["bad"].quarantine_reason and ws["bad"].quarantines == 1
    assert not ws["bad"].probation and not ws["good"].quarantine_reason

    data, text = printed_status(k)
    w = next(w for w in data["workers"] if w["worker_id"] == "bad")
    assert w["status"] == "quarantined"
    assert w["quarantine"] == {"until_ms": bad.quarantined_until_ms, "left_ms": BACKOFF_MS,
                               "reason": bad.quarantine_reason, "probation": False, "quarantines": 1}
    assert next(w for w in data["workers"] if w["worker_id"] == "good")["quarantine"] is None
    json.dumps(data)
    header = next(line for line in text.splitlines() if line.startswith("worker "))
    assert header.split()[-1] == "quarantine"
    row = next(line for line in text.splitlines() if line.startswith("bad "))
    assert row.split()[1] == "quarantined" and row.rstrip().endswith("5.0s left")
    assert bad.quarantined_until_ms == 5_100
    assert ("worker bad quarantined, no new work for 5.0s more (until 1970-01-01T00:00:05Z on the "
            f"coordinator's clock; quarantine 1 in a row): {bad.quarantine_reason}; lift with: "
            "fleetctl release bad") in text


def test_status_shows_probation_after_the_backoff() -> None:
    k = black_hole_beside_a_healthy_worker()
    k.clock(k.worker("bad").quarantined_until_ms, alive=("good", "bad"))
    assert k.worker("bad").probation
    data, text = printed_status(k)
    w = next(w for w in data["workers"] if w["worker_id"] == "bad")
    assert w["status"] != "quarantined" and w["quarantine"]["probation"] and w["quarantine"]["until_ms"] is None
    assert "worker bad on probation after quarantine 1: its next infrastructure failure quarantines it again" in text
    assert next(line for line in text.splitlines() if line.startswith("bad ")).rstrip().endswith("probation")


def test_a_fleet_of_more_than_twenty_counts_and_names_its_quarantined_workers() -> None:
    k = black_hole_beside_a_healthy_worker()
    for i in range(25):
        k.register(f"w{i:02}")
    bad = k.worker("bad")
    summary = views.status(k.state, None, k.now, admin_pb2.WORKERS_VIEW_SUMMARY, 5, 20).worker_summary
    assert {x.state: x.count for x in summary.counts}["quarantined"] == 1
    assert summary.quarantined_total == 1 and [w.worker_id for w in summary.quarantined] == ["bad"]
    assert summary.quarantined[0].quarantine_reason == bad.quarantine_reason
    data, text = printed_status(k, admin_pb2.WORKERS_VIEW_SUMMARY, 20)
    assert data["workers"] == [] and data["worker_summary"]["quarantined_total"] == 1
    assert "27 workers: 26 active, 1 quarantined; " in text
    assert "1 workers quarantined or on probation:" in text and "worker bad quarantined, no new work" in text
    # The client's own summary of a full list (a coordinator that sends only the list) says the same.
    full = ctl.status_json(views.status(k.state, None, k.now))
    mine = ctl.summarise_workers(full["workers"])
    assert mine["counts"]["quarantined"] == 1 and [w["worker_id"] for w in mine["quarantined"]] == ["bad"]


# ---- ReleaseWorker, through the Admin servicer and fleetctl ------------------------------------

def test_release_worker_reaches_the_core_and_a_second_release_is_refused() -> None:
    k = black_hole_beside_a_healthy_worker()
    actor = CoreActor(k)
    admin = AdminServicer(actor, Hub(), Tokens(), None)  # type: ignore[arg-type]

    async def scenario() -> tuple:
        first = await admin.ReleaseWorker(admin_pb2.ReleaseWorkerRequest(worker_id="bad"), Context())
        again = await admin.ReleaseWorker(admin_pb2.ReleaseWorkerRequest(worker_id="bad"), Context())
        status = await admin.GetStatus(admin_pb2.GetStatusRequest(), Context())
        return first, again, status

    first, again, status = asyncio.run(scenario())
    assert first.outcome == common_pb2.ACK_OUTCOME_ACCEPTED
    assert [cmd for cmd in actor.commands if isinstance(cmd, c.WorkerReleased)] == [
        c.WorkerReleased(k.now, WorkerId("bad"))] * 2
    assert k.worker("bad").quarantined_until_ms == 0 and not k.worker("bad").probation
    assert again.outcome == common_pb2.ACK_OUTCOME_REJECTED
    assert again.rejection == common_pb2.REJECTION_REASON_WORKER_NOT_QUARANTINED
    assert "not quarantined" in again.detail
    bad = next(w for w in status.workers if w.worker_id == "bad")
    assert bad.status == "active" and bad.quarantined_until_ms == 0 and not bad.quarantine_reason


def test_fleetctl_release_sends_release_worker_and_prints_a_refusal(ctl_admin, capsys) -> None:  # noqa: F811
    main, calls, answers = ctl_admin
    assert main("release", "w-7") == 0
    assert calls == [("ReleaseWorker", admin_pb2.ReleaseWorkerRequest(worker_id="w-7"))]
    assert capsys.readouterr().out == "accepted\n"
    answers["ReleaseWorker"] = admin_pb2.ActionResponse(
        outcome=common_pb2.ACK_OUTCOME_REJECTED, rejection=common_pb2.REJECTION_REASON_WORKER_NOT_QUARANTINED,
        detail="worker w-7 is not quarantined")
    assert main("release", "w-7") == 1
    assert "refused: WORKER_NOT_QUARANTINED: worker w-7 is not quarantined" in capsys.readouterr().err


# ---- work paid for twice -------------------------------------------------------------------------

LATE_COST, REDISPATCH_COST, OTHER_COST = 0.25, 0.5, 0.05


def executed_twice() -> tuple[Core, str]:
    """Two cells. w1 runs t0 and falls silent; it expires while its cell runs, t0 is redispatched
    to w2, then w1's report of the first attempt arrives late (the subject ran: paid for), and the
    redispatch is selected. t1 ran once on w2."""
    k = Core(make_spec(tasks=2, subjects=1), make_policy())
    k.register("w1")
    k.register("w2", slots=2)
    [first] = [a for a in k.state.assignments.values() if a.worker_id == "w1"]
    [late_tid] = first.attempts
    [other] = [a for a in k.state.assignments.values() if a.worker_id == "w2"]
    k.report_all(other.assignment_id, make_report(cost_usd=OTHER_COST))
    k.clock(k.now + EXPIRE_MS + 500, alive=("w2",))
    assert k.worker("w1").status.name == "EXPIRED"
    [redispatch] = [a for a in k.state.assignments.values() if a.authoritative]
    assert redispatch.worker_id == "w2"
    assert k.report(late_tid, make_report(cost_usd=LATE_COST)).outcome.kind.name == "LATE"
    k.report_all(redispatch.assignment_id, make_report(cost_usd=REDISPATCH_COST))
    assert k.run.settled
    return k, k.attempt(late_tid).cell_id


def test_the_summary_counts_a_cell_executed_twice_and_the_cost_of_the_extra_execution() -> None:
    k, twice = executed_twice()
    s = k.summary()
    assert (s.executed_more_than_once, s.extra_execution_cost_usd, s.late_reports) == (1, LATE_COST, 1)
    assert s.observed_cost_usd == LATE_COST + REDISPATCH_COST + OTHER_COST, "the extra is inside the observed"
    cells = {cell.cell_id: cell for p in pages_of(k, 1) for cell in p.cells}
    assert (cells[twice].executions, cells[twice].extra_execution_cost_usd) == (2, LATE_COST)
    assert cells[twice].cost_usd == REDISPATCH_COST, "the selected attempt's cost is not extra"
    (once,) = set(cells) - {twice}
    assert (cells[once].executions, cells[once].extra_execution_cost_usd) == (1, 0.0)


def test_what_counts_as_an_execution_and_which_one_is_not_extra_without_a_selection() -> None:
    assert executed(make_report()) and executed(make_report(Execution.SUBJECT_FAILED, score=0.0))
    assert executed(make_report(Execution.UNKNOWN, Verification.NOT_RUN, Usage.COMPLETE, Cleanup.UNKNOWN))
    assert not executed(make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING))
    assert not executed(None)
    assert not executed(make_report(Execution.COMPLETED, Verification.NOT_RUN, throttled="429 slow down"))
    # An incomplete cell: two unknown executions (the first counts, the second is extra) and an
    # attempt that never started (neither).
    k = Core(make_spec(tasks=1, subjects=1), make_policy(max_attempts_per_cell=3))
    k.register("w1")
    costs = iter([0.1, 0.2])
    for report in ("unknown", "unknown", "not-started"):
        [a] = [x for x in k.state.assignments.values() if x.authoritative]
        r = (make_report(Execution.UNKNOWN, Verification.NOT_RUN, Usage.COMPLETE, Cleanup.UNKNOWN,
                         cost_usd=next(costs)) if report == "unknown"
             else make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.COMPLETE, cost_usd=0.4))
        k.report_all(a.assignment_id, r)
        k.tick(1)
    assert k.run.settled
    [cell] = pages_of(k, 10)[0].cells
    assert cell.state == "incomplete" and (cell.executions, cell.extra_execution_cost_usd) == (2, 0.2)
    assert cell.worker_id == "w1", "an incomplete cell names the worker of its last attempt"
    assert (k.summary().executed_more_than_once, k.summary().extra_execution_cost_usd) == (1, 0.2)


def results_through_tokens(k: Core, page_size: int) -> list:
    """GetResults page by page through the Admin servicer: the tally rides the real page tokens."""
    admin = AdminServicer(CoreActor(k), Hub(), Tokens(), None)  # type: ignore[arg-type]

    async def pages() -> list:
        out, token = [], ""
        while True:
            page = await admin.GetResults(admin_pb2.GetResultsRequest(run_id=k.run_id, page_size=page_size,
                                                                       page_token=token), Context())
            out.append(page)
            token = page.next_page_token
            if not token:
                return out

    return asyncio.run(pages())


@pytest.mark.parametrize("page_size", [1, 100])
def test_fleetctl_results_shows_the_cells_executed_twice_and_their_extra_cost_summed_over_pages(page_size) -> None:
    k, twice = executed_twice()
    pages = results_through_tokens(k, page_size)
    assert len(pages) == (2 if page_size == 1 else 1)
    out = io.StringIO()
    results_out.write_json(pages, out)
    doc = json.loads(out.getvalue())
    assert (doc["summary"]["executed_more_than_once"], doc["summary"]["extra_execution_cost_usd"]) == (1, LATE_COST)
    cell = next(x for x in doc["cells"] if x["cell_id"] == twice)
    assert (cell["executions"], cell["extra_execution_cost_usd"]) == (2, LATE_COST)
    out = io.StringIO()
    results_out.write_jsonl(pages, out)
    last = json.loads(out.getvalue().splitlines()[-1])["summary"]
    assert (last["executed_more_than_once"], last["extra_execution_cost_usd"]) == (1, LATE_COST)
    out = io.StringIO()
    results_out.write_table(pages, out)
    assert ("executed more than once: 1 cells; their extra executions cost $0.2500 (known subtotal, in the "
            "observed cost)") in out.getvalue()


def test_results_of_a_run_executed_once_say_so() -> None:
    k = Core(make_spec(tasks=2, subjects=1), make_policy())
    k.register("w1", slots=2)
    k.drive_to_completion()
    out = io.StringIO()
    results_out.write_table(results_through_tokens(k, 1), out)
    assert "executed more than once: 0 cells (no work paid for twice)" in out.getvalue()


def test_the_report_shows_the_cells_executed_twice_and_their_extra_cost() -> None:
    k, _ = executed_twice()
    whole = admin_pb2.GetResultsResponse()
    for p in results_through_tokens(k, 1):
        whole.cells.extend(p.cells)
        if p.HasField("summary"):
            whole.summary.CopyFrom(p.summary)
    results = ctl.results_json(whole)
    assert (results["summary"]["executed_more_than_once"], results["summary"]["extra_execution_cost_usd"]) == (
        1, LATE_COST)
    page = render_html(results, ctl.status_json(views.status(k.state, k.run_id, k.now)),
                       timeline_from_results(results))
    assert '<b id="count-executed-twice" data-count="1">1</b>' in page
    assert ('<dd id="executed-twice" data-cells="1" data-usd="0.25">1 cells executed more than once; their extra '
            'executions cost $0.2500</dd>') in page
