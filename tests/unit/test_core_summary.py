"""The run summary tells selected results apart from everything observed and names every gap:
table-driven cases drive small runs through the `Core` harness into each incomplete reason
and each run state, then compare `summarize` with the attempts the core recorded."""
from __future__ import annotations

import pytest

from common.evidence import Execution, Usage, Verification
from coordinator.core.state import GroupStatus
from tests.unit.core_helpers import (
    ENV_FAILURE,
    EVIDENCE,
    EXPIRE_MS,
    OK,
    UNKNOWN,
    Core,
    make_policy,
    make_report,
    make_spec,
    pushes,
)


def single(**policy) -> tuple[Core, object]:
    k = Core(make_spec(tasks=1, subjects=1), make_policy(**policy))
    [push] = pushes(k.register("w1"))
    k.advance(10)
    return k, push


# --- provenance -------------------------------------------------------------------------------

def test_selected_results_carry_their_provenance():
    k = Core(make_spec(tasks=2, subjects=2))
    [p0] = pushes(k.register("w1"))
    [p1] = pushes(k.register("w2"))
    k.advance(10)
    # Group 0 is taken back from w1 by a reconnect that owns nothing, and runs again (generation 2).
    [p0b] = pushes(k.register("w1"))
    assert p0b.generation == 2
    reports = {}
    for push in (p0b, p1):
        for i, cd in enumerate(push.cells):
            r = make_report(score=float(i), cost_usd=0.001 * (i + 1), started_ms=100 + i, finished_ms=200 + i,
                            input_tokens=10, output_tokens=5, detail=f"d{i}")
            reports[cd.attempt_id] = r
            k.report(cd.attempt_id, r)
    s = k.summary()
    assert s.state == "complete" and len(s.selected) == 4 and s.incomplete == ()
    for result in s.selected:
        a = k.attempt(result.attempt_id)
        r = reports[result.attempt_id]
        assert (result.worker_id, result.assignment_id, result.generation, result.dispatch_order) == (
            a.worker_id, a.assignment_id, a.generation, a.dispatch_order)
        assert (result.score, result.status, result.cost_usd, result.usage) == (r.score, "completed", r.cost_usd,
                                                                               "complete")
        assert (result.started_ms, result.finished_ms) == (r.started_ms, r.finished_ms)
        assert result.cell_id == a.cell_id and result.subject_id == result.cell_id.rsplit("/", 1)[1]
    regen = [r for r in s.selected if r.cell_id.startswith("t0/")]
    assert {r.generation for r in regen} == {2} and {r.attempts for r in regen} == {2}
    assert {r.task_id for r in regen} == {"t0"} and {r.repetition for r in regen} == {1}
    orders = sorted(r.dispatch_order for r in s.selected)
    assert orders == sorted(set(orders)), "dispatch orders are unique"
    assert s.attempts_dispatched == 6 and s.lost_attempts == 2


def test_a_subject_failure_is_reported_as_such():
    k, push = single()
    k.report(push.cells[0].attempt_id, EVIDENCE["subject-failed-valid-verification"][0])
    [result] = k.summary().selected
    assert result.status == "subject_failed" and result.score == 0.0


# --- incomplete reasons and run states --------------------------------------------------------

def _exhausted():
    k, push = single(max_attempts_per_cell=1)
    k.report(push.cells[0].attempt_id, make_report(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN,
                                                   detail="killed by the OOM killer"))
    return k


def _blocked():
    k, push = single()
    k.report(push.cells[0].attempt_id, EVIDENCE["environment-failure"][0])
    return k


def _blocked_and_paused():
    k = _blocked()
    k.pause()
    return k


def _paused():
    k = Core(make_spec(tasks=1, subjects=1))
    k.pause()
    return k


def _running():
    k, _ = single()
    return k


def _retry_pending():
    k, push = single(retry_backoff_ms=5_000, retry_backoff_max_ms=5_000)
    k.report(push.cells[0].attempt_id, UNKNOWN)
    return k


def _not_yet_run():
    return Core(make_spec(tasks=1, subjects=1))


@pytest.mark.parametrize("build, reason, state", [
    pytest.param(_exhausted, "exhausted", "incomplete", id="exhausted"),
    pytest.param(_blocked, "blocked", "blocked", id="blocked"),
    pytest.param(_blocked_and_paused, "blocked", "blocked", id="blocked wins over paused"),
    pytest.param(_paused, "paused", "paused", id="paused"),
    pytest.param(_running, "running", "running", id="running"),
    pytest.param(_retry_pending, "retry_pending", "running", id="retry pending"),
    pytest.param(_not_yet_run, "not_yet_run", "running", id="not yet run"),
])
def test_incomplete_reasons_and_run_states(build, reason, state):
    k = build()
    s = k.summary()
    assert s.selected == ()
    [inc] = s.incomplete
    assert inc.reason == reason
    assert s.state == state
    assert inc.attempts == len(k.cell(inc.cell_id).attempts)
    assert s.blocked_reason == (ENV_FAILURE if reason == "blocked" else "")


def test_an_exhausted_cell_keeps_the_last_detail_and_no_score():
    s = _exhausted().summary()
    [inc] = s.incomplete
    assert inc.detail == "killed by the OOM killer" and inc.attempts == 1
    assert s.selected == () and s.selected_cost_usd == 0


@pytest.mark.parametrize("report, state", [
    pytest.param(OK, "complete", id="everything selected"),
    pytest.param(UNKNOWN, "incomplete", id="settled with an exhausted cell"),
])
def test_a_settled_run_is_complete_or_incomplete_even_when_paused(report, state):
    k, push = single(max_attempts_per_cell=1)
    k.report(push.cells[0].attempt_id, report)
    assert k.summary().state == state
    k.pause()
    assert k.summary().state == state


# --- cost and usage ---------------------------------------------------------------------------

def test_observed_cost_includes_late_and_retried_reports_and_selected_cost_stands_apart():
    k = Core(make_spec(tasks=1, subjects=1))
    [old] = pushes(k.register("w1"))
    k.register("w2")
    k.clock(EXPIRE_MS, alive=("w2",))
    [new_aid] = k.held("w2")
    new_tid = k.attempts_of(new_aid)[0]
    k.report(new_tid, make_report(Execution.UNKNOWN, usage=Usage.PARTIAL, cost_usd=0.125))  # retried
    [third] = k.held("w2")
    k.report(k.attempts_of(third)[0], make_report(score=1.0, cost_usd=0.25))  # selected
    k.report(old.cells[0].attempt_id, make_report(score=0.0, cost_usd=0.5))  # late
    s = k.summary()
    assert s.late_reports == 1
    assert s.observed_cost_usd == pytest.approx(0.875)
    assert s.selected_cost_usd == pytest.approx(0.25)
    assert s.selected[0].score == 1.0 and s.selected[0].generation == 3
    assert s.usage_complete is False, "the retried attempt's usage was only partial"


@pytest.mark.parametrize("reports, complete", [
    pytest.param([OK], True, id="all complete"),
    pytest.param([EVIDENCE["missing-usage-alone"][0]], False, id="selected with missing usage"),
    pytest.param([EVIDENCE["partial-usage"][0]], False, id="selected with partial usage"),
    pytest.param([make_report(Execution.UNKNOWN, cost_usd=0.01), OK], True, id="a retry with complete usage"),
    pytest.param([UNKNOWN, OK], False, id="a retry with unknown usage"),
    pytest.param([None], False, id="an attempt still running"),
    pytest.param(["lost", OK], False, id="a lost attempt"),
])
def test_usage_is_complete_only_when_every_dispatched_attempt_reported_complete_usage(reports, complete):
    k, push = single()
    tid = push.cells[0].attempt_id
    for r in reports:
        if r is None:
            break
        if r == "lost":
            t = k.finish(k.attempt(tid).assignment_id)
        else:
            t = k.report(tid, r)
        if pushes(t):
            tid = pushes(t)[0].cells[0].attempt_id
    assert k.summary().usage_complete is complete


def test_an_unknown_cost_is_not_counted_as_zero_but_flagged():
    k, push = single()
    k.report(push.cells[0].attempt_id, make_report(usage=Usage.MISSING))
    s = k.summary()
    assert s.observed_cost_usd == 0 and s.usage_complete is False and s.selected[0].cost_usd is None


# --- counters ---------------------------------------------------------------------------------

def test_counters_follow_the_groups():
    k = Core(make_spec(tasks=4, subjects=2, cap=2))
    k.register("w1", slots=3)
    s = k.summary()
    assert (s.cells_total, s.max_concurrent_groups) == (8, 2)
    assert (s.groups_waiting, s.groups_assigned, s.groups_settled) == (2, 2, 0)
    assert s.peak_concurrent_groups == 2 and s.slots_offered == 3
    [first] = k.held("w1")[:1]
    k.report_all(first)
    s = k.summary()
    assert (s.groups_waiting, s.groups_assigned, s.groups_settled) == (1, 2, 1)
    assert s.attempts_dispatched == 6
    k.drive_to_completion()
    s = k.summary()
    assert (s.groups_waiting, s.groups_assigned, s.groups_settled) == (0, 0, 4)
    assert all(g.status == GroupStatus.SETTLED for g in k.run.groups)
    assert s.peak_concurrent_groups == 2


def test_slots_offered_counts_workers_registered_before_the_run():
    # The usual order: the coordinator starts, workers connect, then an operator submits the
    # run. `peak_slots_offered` is raised only in the WorkerRegistered handler, so a run
    # submitted after its workers reports slots_offered 0 while 3 groups ran at once.
    k = Core(make_spec(tasks=3, subjects=1, cap=3), submit=False)
    k.register("w1", slots=2)
    k.register("w2", slots=1)
    k.submit()
    k.drive_to_completion()
    s = k.summary()
    assert s.peak_concurrent_groups == 3
    assert s.slots_offered == 3
