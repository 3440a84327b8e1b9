"""Model providers in the core (coordinator/core/providers.py): the fleet-wide limit at
dispatch, throttled attempts that are not attempts, the limit that adapts, and the spend cap.
Every scenario runs through the `Core` harness, which checks the invariants (the providers'
running counts against a walk, every dispatch under the effective limit) after every step and
that the log replays to the same durable state."""
from __future__ import annotations

from common import limits
from common.evidence import Cleanup, Execution, Usage, Verification
from common.policy import ProviderLimit
from common.spec import parse_spec
from coordinator.core import commands as c
from coordinator.core.summary import summarize
from tests.unit.core_helpers import OK, Core, make_policy, make_report, pushes, spec_doc


def throttled(retry_after_ms: int = 0, cost_usd=None):
    return make_report(Execution.SUBJECT_FAILED, Verification.NOT_RUN, Usage.PARTIAL if cost_usd else Usage.MISSING,
                       Cleanup.CONFIRMED, cost_usd=cost_usd, throttled="provider fake throttled: 429",
                       retry_after_ms=retry_after_ms)


def provider_spec(tasks: int, subjects: int = 3, provider: str | None = "fake", cap: int = 100, name: str = "toy"):
    doc = spec_doc(tasks=tasks, subjects=subjects, cap=cap, name=name)
    if provider:
        for s in doc["subjects"]:
            s["provider"] = provider
    return parse_spec(doc)


def core(tasks: int = 6, subjects: int = 3, limit: int = 0, workers: int = 4, provider: str | None = "fake",
         **policy) -> Core:
    provs = (ProviderLimit("fake", limit),) if provider and limit else ()
    k = Core(provider_spec(tasks, subjects, provider), make_policy(providers=provs, **policy))
    for i in range(workers):
        k.register(f"w{i}")
    return k


def running(k: Core, name: str = "fake") -> int:
    return k.state.providers[name].running


def held(k: Core) -> list:
    return [a for a in k.state.assignments.values() if a.authoritative]


def test_a_declared_limit_holds_across_every_worker():
    k = core(tasks=6, limit=6)  # 4 free slots, groups of 3 cells: two groups fit
    assert len(held(k)) == 2 and running(k) == 6
    assert k.state.providers["fake"].effective == 6 and k.state.providers["fake"].declared == 6
    k.report_all(held(k)[0].assignment_id)
    assert len(held(k)) == 2 and running(k) == 6  # the freed group's room went to the next
    k.drive_to_completion()
    assert k.run.selected_cells == 18 and running(k) == 0
    assert k.state.providers["fake"].peak_running == 6
    k.assert_replays()


def test_cells_free_room_one_at_a_time_and_a_waiting_group_starts_when_it_fits():
    k = core(tasks=4, limit=4)  # one group of 3 at a time (3 + 3 > 4)
    [a] = held(k)
    tids = k.attempts_of(a.assignment_id)
    k.report(tids[0])
    assert running(k) == 2 and len(held(k)) == 1  # 2 + 3 > 4: still waits
    k.report(tids[1])
    assert running(k) == 4 and len(held(k)) == 2  # 1 + 3 fits while the first group still runs


def test_a_group_larger_than_the_limit_runs_alone():
    k = core(tasks=3, limit=2)
    assert len(held(k)) == 1 and running(k) == 3
    k.drive_to_completion()
    assert k.run.selected_cells == 9


def test_the_limit_is_fleet_wide_across_runs_and_another_run_that_fits_goes_first():
    k = Core(provider_spec(4, 3, "fake"), make_policy(providers=(ProviderLimit("fake", 3),)))
    other = provider_spec(4, 1, "other", name="other")
    second = c.RunSubmitted(k.now, "run-second", other, make_policy(), k.manifest, k.worker_keys)
    assert k.apply(second).outcome.ok
    for i in range(4):
        k.register(f"w{i}")
    by_run = {}
    for a in held(k):
        by_run[a.run_id] = by_run.get(a.run_id, 0) + 1
    assert by_run == {k.run_id: 1, "run-second": 3}  # the first run's provider is full: the second fills
    # A third run on the same provider shares its limit.
    third = c.RunSubmitted(k.now, "run-third", provider_spec(2, 1, "fake", name="third"), make_policy(),
                           k.manifest, k.worker_keys)
    assert k.apply(third).outcome.ok
    assert running(k) == 3


def test_a_throttled_attempt_is_not_an_attempt_and_waits_its_retry_after():
    k = core(tasks=1, subjects=1, limit=4, workers=1, max_attempts_per_cell=1)
    [a] = held(k)
    [tid] = k.attempts_of(a.assignment_id)
    t = k.report(tid, throttled(retry_after_ms=5_000))
    assert any(getattr(e, "event", "") == "cell_throttled" for e in t.effects)
    cell = k.run.cells[k.attempt(tid).cell_id]
    assert cell.throttled == 1 and cell.selected is None
    assert held(k) == []  # waits out the retry-after, although max_attempts_per_cell is 1
    start = k.now
    k.clock(start + 4_900, alive=("w0",))
    assert held(k) == []
    k.clock(start + 5_000, alive=("w0",))
    [again] = held(k)
    [tid2] = k.attempts_of(again.assignment_id)
    k.report(tid2, OK)
    assert cell.selected == tid2 and len(cell.attempts) == 2
    assert k.state.providers["fake"].retry_after_ms_total == 5_000
    k.assert_replays()


def test_a_provider_that_never_admits_ends_its_cells_incomplete_as_provider_throttled():
    k = core(tasks=2, subjects=1, limit=4, workers=2, max_throttled_attempts_per_cell=3)
    for _ in range(20):  # the lowered limit (1 cell) runs them one at a time
        for a in held(k):
            k.report_all(a.assignment_id, throttled())
        k.clock(k.now + limits.THROTTLE_RETRY_AFTER_MS_DEFAULT, alive=("w0", "w1"))
    assert k.state.providers["fake"].effective == 1
    assert k.run.settled and k.run.selected_cells == 0
    summary = summarize(k.state, k.run_id)
    reasons = {cell.reason for cell in summary.incomplete}
    assert reasons == {"provider_throttled"}
    assert all(len(cell.attempts) == 3 for cell in k.run.cells.values())
    # An operator's retry grants one more try of either kind.
    cid = next(iter(k.run.cells))
    assert k.grant(cid).outcome.ok and len(held(k)) == 1
    k.assert_replays()


def test_an_undeclared_provider_starts_small_grows_and_is_lowered_to_what_was_running_less_one():
    k = core(tasks=20, subjects=3, workers=8)  # named, no declared limit: starts at 8 cells
    p = k.state.providers["fake"]
    assert p.effective == limits.PROVIDER_INITIAL_CELLS and p.slow_start
    assert running(k) == 6  # two groups of 3; a third would make 9
    first = held(k)[0]
    k.report_all(first.assignment_id)  # three successes while in use: slow start grows by one each
    assert p.effective == limits.PROVIDER_INITIAL_CELLS + 3
    assert running(k) == 9  # 3 + 3 + 3 <= 11
    victim = held(k)[-1]
    before = running(k)
    t = k.report(k.attempts_of(victim.assignment_id)[0], throttled())
    assert p.effective == before - 1 and not p.slow_start and p.throttled == 1
    assert any(getattr(e, "event", "") == "provider_limit_lowered" for e in t.effects)
    k.assert_replays()


def test_after_throttling_the_limit_grows_by_one_per_probe_factor_times_itself():
    k = core(tasks=60, subjects=1, workers=4)
    p = k.state.providers["fake"]
    [first, *_] = held(k)
    k.report_all(first.assignment_id, throttled())  # 4 running: lowered to 3
    assert p.effective == 3
    reports = 0
    while p.effective == 3 and reports < 100:
        a = held(k)[0]
        k.report_all(a.assignment_id)
        reports += 1
    assert p.effective == 4 and reports == limits.PROVIDER_PROBE_FACTOR * 3


def test_the_unnamed_default_provider_has_no_limit_until_it_throttles():
    k = core(tasks=6, subjects=3, workers=4, provider=None)
    p = k.state.providers["default"]
    assert p.effective == 0 and running(k, "default") == 12
    a = held(k)[0]
    k.report(k.attempts_of(a.assignment_id)[0], throttled())
    assert p.effective == 11


def test_a_late_throttled_report_is_evidence_only():
    k = core(tasks=1, subjects=1, limit=4, workers=2)
    [a] = held(k)
    [tid] = k.attempts_of(a.assignment_id)
    k.clock(limits.EXPIRE_AFTER_MS_DEFAULT, alive=("w1",))  # w0 expires, w1 runs the group again
    t = k.report(tid, throttled())
    cell = k.run.cells[k.attempt(tid).cell_id]
    assert k.attempt(tid).late and cell.throttled == 0
    assert k.state.providers["fake"].throttled == 1 and running(k) == 1


def test_the_spend_cap_pauses_the_run_and_a_recover_with_a_higher_cap_resumes_it():
    k = core(tasks=4, subjects=1, limit=10, workers=1, max_observed_cost_usd=0.025)
    for _ in range(3):
        for a in held(k):
            k.report_all(a.assignment_id)  # 0.01 a cell
    assert k.run.paused and k.run.pause_reason.startswith("spend cap reached: observed $0.0300 of $0.0250")
    assert held(k) == [] and k.run.selected_cells == 3
    assert not k.apply(c.RunRecovered(k.now, k.run_id)).outcome.ok
    assert k.apply(c.RunRecovered(k.now, k.run_id, 1.0)).outcome.ok
    assert not k.run.paused and k.run.cost_cap_usd == 1.0 and len(held(k)) == 1
    k.drive_to_completion()
    assert k.run.selected_cells == 4
    k.assert_replays()


def test_throttled_cost_is_observed_cost():
    k = core(tasks=1, subjects=1, limit=4, workers=1)
    [a] = held(k)
    k.report_all(a.assignment_id, throttled(cost_usd=0.004))
    assert abs(k.run.observed_cost_usd - 0.004) < 1e-12


def test_the_dispatch_check_flags_cells_dispatched_beside_others_over_the_limit():
    """The core's `dispatch_problems` (run after every step by the harness's Monitor) has
    teeth: cells dispatched beside others over the limit are flagged; a group alone over it is
    not (nothing else ran against it). That an attempt rebuilt from a restore's offer is no
    dispatch is kept by seed 2360 in tests/sim/test_faults_sim.py."""
    from coordinator.core.invariants import dispatch_problems

    k = core(tasks=6, limit=2)  # groups of 3 cells: one group alone, over the limit
    [first] = held(k)
    alone = [k.attempt(t) for t in first.attempts]
    assert running(k) == 3 and dispatch_problems(k.state, alone) == []
    k.state.providers["fake"].running = 6  # as if it had been dispatched beside another group
    assert dispatch_problems(k.state, alone) == ["provider fake runs 6 cells over its effective limit 2"]
