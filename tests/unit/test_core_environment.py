"""A run's environment, table-driven over the core: the submitter's manifest is the reference
every worker's own measurement must equal; what only workers measure is pinned at the first
dispatch and released when its worker is gone and nothing depends on it; two runs of two
benchmarks are each served only by their own workers. Every case also replays its log."""
from __future__ import annotations

from dataclasses import replace

import pytest

from common.identity import cell_environment_id
from common.ids import WorkerId
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core.effects import DUPLICATE, OutcomeKind
from common.identity import NOT_MEASURED
from coordinator.core.state import WorkerStatus
from tests.unit.core_helpers import (
    EXPIRE_MS,
    MANIFEST,
    Core,
    durable_types,
    emits,
    make_policy,
    make_spec,
    offers,
    pushes,
    refusals,
)

PY311 = (("platform.system", "Linux"), ("python.version", "3.11.7"))
PY312 = (("platform.system", "Linux"), ("python.version", "3.12.1"))
NODE = (("node.version", "20.1"), ("platform.system", "Linux"))


def fresh(**policy) -> Core:
    return Core(make_spec(tasks=4, subjects=1), make_policy(required_environment_id="", **policy))


@pytest.mark.parametrize("key, value, serves", [
    ("bench.file:solve.py", "digest-solve-1", True),  # the submitter's own bytes
    ("bench.file:solve.py", "digest-solve-OLD", False),  # an older build of the subject
    ("bench.taskdir:t0", NOT_MEASURED, False),  # a worker that did not measure a key
    ("bench.file:unrelated.log", "anything", True),  # a file the run does not use: ignored
])
def test_a_worker_serves_a_run_only_when_its_measurement_equals_the_submitters(key, value, serves) -> None:
    k = fresh()
    k.measurements["w1"] = {key: value} if value != NOT_MEASURED else {}
    if value == NOT_MEASURED:
        k.auto_measure = False
        k.register("w1", environment=PY311)
        measured = tuple(kv for kv in k.measurement("w1", k.run_id) if kv[0] != key)
        t = k.measure("w1", measured=measured)
    else:
        t = k.register("w1", environment=PY311)
    assert t.outcome.kind == OutcomeKind.ACCEPTED
    if serves:
        assert pushes(t, "w1") and refusals(t) == []
        assert k.run.pinned_by == "w1"
    else:
        assert pushes(t) == [] and k.run.pin is None, "a worker never pins a run it cannot serve"
        (refusal,) = refusals(t, "w1")
        want = dict(MANIFEST)[key]
        assert refusal.differences == ((key, want, value),)
        assert k.worker("w1").refusal.differences == ((key, want, value),)
    k.assert_replays()


def test_the_policys_required_environment_id_is_still_honoured() -> None:
    k = Core(make_spec(tasks=2, subjects=1), make_policy(required_environment_id="env-test"))
    t = k.register("w1", env="env-other")
    assert pushes(t) == [] and refusals(t)[0].differences == (("environment_id", "env-test", "env-other"),)
    assert pushes(k.register("w2", env="env-test"))


def test_the_first_dispatch_pins_what_only_workers_measure_and_other_builds_are_refused() -> None:
    k = fresh()
    assert pushes(k.register("w1", environment=PY311))
    assert dict(k.run.pin)["python.version"] == "3.11.7" and dict(k.run.pin)["tool:solve"] == "digest-tool-1"
    t = k.register("w2", environment=PY312)
    assert pushes(t) == []
    (refusal,) = refusals(t, "w2")
    assert ("python.version", "3.11.7", "3.12.1") in refusal.differences and "pinned by worker w1" in refusal.reason
    assert pushes(k.register("w3", environment=PY311)), "the same build joins the pinned run"
    k.assert_replays()


def test_nothing_is_pinned_before_the_first_dispatch() -> None:
    k = fresh()
    k.pause()
    k.register("w1", environment=PY311)
    t = k.register("w2", environment=PY312)
    assert refusals(t) == [] and k.run.pin is None, "registering pins nothing"
    t = k.recover()
    assert k.run.pin is not None
    # Whichever worker took the first group pinned the run; the other build was told why.
    other = "w2" if k.run.pinned_by == "w1" else "w1"
    assert refusals(t, other) and not any(p.worker_id == other for p in pushes(t))


def test_a_stale_worker_that_pinned_and_died_releases_the_pin_and_the_right_build_runs() -> None:
    # The measured case: an older build takes the first groups, is killed before it
    # reports anything and never comes back; a correct worker joins afterwards.
    k = fresh()
    k.measurements["stale"] = {"tool:solve": "digest-tool-OLD"}
    assert pushes(k.register("stale", environment=PY311))
    t = k.register("good", environment=PY311)
    assert pushes(t) == [] and refusals(t, "good")
    k.disconnect("stale")
    ticks = k.clock(EXPIRE_MS, alive=("good",))
    assert k.worker("stale").status == WorkerStatus.EXPIRED
    (t,) = [t for t in ticks if "RunPinReleased" in durable_types(t)]  # its own logged command
    assert pushes(t, "good") and k.run.pinned_by == "good"
    k.drive_to_completion()
    assert all(k.state.attempts[cell.selected].worker_id == "good" for cell in k.run.cells.values())
    k.assert_replays()


def test_a_dispatch_whose_pin_is_released_in_the_same_tick_is_no_environment_violation() -> None:
    # Found by the stateful property test: one tick expires the pinning worker, redispatches its
    # group to a worker of the same build, expires that one too and releases the pin. The
    # dispatch matched the pin of its moment; the monitor must judge it against that pin, not
    # against the empty pin at the end of the step.
    k = Core(make_spec(tasks=1, subjects=1, cap=1), make_policy(required_environment_id=""))
    k.register("w1", environment=PY311)
    k.register("w2", environment=PY311)
    assert k.held("w1") and k.run.pinned_by == "w1"
    t = k.tick(EXPIRE_MS)  # neither heartbeats: both expire in this one tick
    assert durable_types(t).count("WorkerExpired") == 2 and "RunPinReleased" in durable_types(t)
    assert [p.worker_id for p in pushes(t)] == ["w2"] and k.run.pin is None
    k.assert_replays()


@pytest.mark.parametrize("released", [False, True])
def test_the_monitor_catches_a_dispatch_to_another_build_even_when_the_pin_is_released_after(released) -> None:
    # The other side of the case above: a dispatch in this step to a worker of another build
    # than the pin of its moment is a violation, whether or not the pin is gone by the step's end.
    k = Core(make_spec(tasks=1, subjects=1, cap=1), make_policy(required_environment_id=""))
    k.measurements["w2"] = {"tool:solve": "digest-tool-OLD"}
    k.register("w1", environment=PY311)
    k.register("w2", environment=PY311)
    (a1,) = k.state.attempts.values()
    planted = replace(a1, attempt_id=a1.attempt_id + "-planted", worker_id=WorkerId("w2"))
    k.state.attempts[planted.attempt_id] = planted
    if released:
        k.state.runs[k.run_id].pin = None
        k.state.assignments[a1.assignment_id].authoritative = False
    bad = k.monitor.observe(k.state)
    assert f"attempt {planted.attempt_id} dispatched to w2, whose environment is not the run's pin" in bad


def test_a_pin_that_a_selected_result_depends_on_is_kept() -> None:
    k = fresh()
    k.measurements["w1"] = {"tool:solve": "digest-tool-OLD"}
    k.register("w1", environment=PY311)
    k.report_all(k.held("w1")[0])
    k.disconnect("w1")
    t = k.tick(EXPIRE_MS)
    assert "RunPinReleased" not in durable_types(t) and k.run.pinned_by == "w1"
    assert pushes(k.register("w2", environment=PY311)) == [], "environments never mix in one run"


def test_a_pin_is_kept_while_another_worker_of_the_same_build_runs_a_group() -> None:
    k = fresh()
    k.register("w1", environment=PY311)
    k.register("w2", environment=PY311)
    assert k.held("w2")
    k.disconnect("w1")
    t = k.clock(EXPIRE_MS, alive=("w2",))
    assert k.worker("w1").status == WorkerStatus.EXPIRED
    assert all("RunPinReleased" not in durable_types(x) for x in t) and k.run.pinned_by == "w1"


def test_two_runs_of_two_benchmarks_are_each_served_only_by_their_own_workers() -> None:
    k = Core(make_spec(tasks=3, subjects=1, name="A"), make_policy(required_environment_id=""),
             manifest=(("bench.file:subject.py", "digest-A"),))
    run_a = k.run_id
    spec_b = make_spec(tasks=3, subjects=1, name="B")
    run_b = "run-b"
    k.apply(c.RunSubmitted(k.now, run_b, spec_b, k.policy, (("bench.file:subject.py", "digest-B"),), k.worker_keys))
    k.measurements["wa"] = {"bench.file:subject.py": "digest-A"}
    k.measurements["wb"] = {"bench.file:subject.py": "digest-B"}
    # The harness measures each run's own manifest, then these overrides: wa fits A only.
    ta = k.register("wa", slots=2, environment=PY311)
    tb = k.register("wb", slots=2, environment=PY311)
    assert {p.run_id for p in pushes(ta)} == {run_a}
    assert {p.run_id for p in pushes(tb)} == {run_b}
    assert [r.run_id for r in refusals(ta, "wa")] == [run_b] and [r.run_id for r in refusals(tb, "wb")] == [run_a]
    for _ in range(20):
        held = [a for a in k.state.assignments.values() if a.authoritative]
        if not held:
            break
        for a in held:
            k.report_all(a.assignment_id)
    for run_id, wid in ((run_a, "wa"), (run_b, "wb")):
        run = k.state.runs[run_id]
        assert run.settled and all(k.state.attempts[cell.selected].worker_id == wid for cell in run.cells.values())
    k.assert_replays()


@pytest.mark.parametrize("match, second, serves", [
    ("worker", PY311, True),
    ("worker", NODE, False),  # another implementation: refused by default
    ("cell", NODE, True),  # another implementation, same cell environment: serves
    ("cell", (("node.version", "20.1"), ("platform.system", "Darwin")), False),  # another platform
])
def test_environment_match_cell_pins_only_the_cell_environment(match, second, serves) -> None:
    k = fresh(environment_match=match)
    assert pushes(k.register("w1", environment=PY311))
    t = k.register("w2", environment=second)
    assert bool(pushes(t, "w2")) == serves
    assert bool(refusals(t, "w2")) != serves
    k.assert_replays()


def test_a_new_registration_measures_again_before_any_new_work() -> None:
    k = fresh()
    k.register("w1", slots=2, environment=PY311)
    k.auto_measure = False
    t = k.register("w1", slots=2, incarnation=2, environment=PY311, owned=tuple(k.held("w1")))
    assert offers(t, "w1") and k.worker("w1").fits == {}
    aid = k.held("w1")[0]
    t = k.report_all(aid)[-1]
    assert pushes(t) == [], "no new group before the new process measured the run"
    t = k.measure("w1")
    assert pushes(t, "w1")


def test_a_heartbeat_offers_again_a_run_the_worker_has_not_measured() -> None:
    k = fresh()
    k.auto_measure = False
    k.register("w1", environment=PY311)
    t = k.heartbeat("w1")
    assert [o.run_id for o in offers(t, "w1")] == [k.run_id]
    k.measure("w1")
    assert offers(k.heartbeat("w1")) == []


def test_the_same_measurement_again_changes_nothing_and_is_not_logged() -> None:
    k = fresh()
    k.register("w1", environment=PY311)
    before = k.snapshot()
    t = k.measure("w1")
    assert t.outcome == DUPLICATE and t.durable == () and k.snapshot() == before


def test_a_submit_offers_the_run_to_every_connected_worker() -> None:
    k = Core(make_spec(tasks=2, subjects=1), make_policy(required_environment_id=""), submit=False)
    k.register("w1")
    k.register("w2")
    k.auto_measure = False
    t = k.submit()
    assert sorted(o.worker_id for o in offers(t)) == ["w1", "w2"]
    assert all(o.keys == tuple(dict(MANIFEST)) + k.worker_keys for o in offers(t))


def test_a_stale_measurement_is_refused() -> None:
    k = fresh()
    k.register("w1", incarnation=3)
    t = k.measure("w1", incarnation=2)
    assert t.outcome.rejection == Rejection.INCARNATION_STALE


def test_refusal_effects_name_the_keys_that_differ_with_both_values() -> None:
    k = fresh()
    k.measurements["w1"] = {"bench.file:solve.py": "x", "bench.taskdir:t0": "y"}
    t = k.register("w1")
    (r,) = refusals(t)
    assert r.differences == (("bench.file:solve.py", "digest-solve-1", "x"), ("bench.taskdir:t0", "digest-t0-1", "y"))
    assert emits(t, "worker_refused")


def test_the_cell_environment_ignores_the_implementation() -> None:
    python = {"platform.system": "Linux", "python.version": "3.11.7", "fleet.source": "x"}
    node = {"platform.system": "Linux", "node.version": "20", "node_worker.source": "y"}
    assert cell_environment_id(python) == cell_environment_id(node)
    assert cell_environment_id(python).startswith("cenv-")
    assert cell_environment_id(dict(python, **{"platform.system": "Darwin"})) != cell_environment_id(python)
    assert cell_environment_id(dict(python, **{"tool:sh": "1"})) != cell_environment_id(python)


def test_a_released_pin_emits_an_event_that_names_its_worker() -> None:
    k = fresh()
    k.register("w1")
    k.disconnect("w1")
    t = k.tick(EXPIRE_MS)
    (e,) = emits(t, "run_pin_released")
    assert e.subject == WorkerId("w1")


def test_two_commits_of_the_same_worker_code_serve_one_run() -> None:
    # fleet.revision moves with any commit; fleet.source digests the code workers run.
    k = fresh()
    a = (("fleet.revision", "a" * 40), ("fleet.source", "src-1"), ("python.version", "3.11.7"))
    b = (("fleet.revision", "b" * 40), ("fleet.source", "src-1"), ("python.version", "3.11.7"))
    c_ = (("fleet.revision", "a" * 40), ("fleet.source", "src-2"), ("python.version", "3.11.7"))
    assert pushes(k.register("w1", environment=a))
    assert pushes(k.register("w2", environment=b)), "another commit of the same code joins the run"
    t = k.register("w3", environment=c_)
    assert pushes(t) == [] and ("fleet.source", "src-1", "src-2") in refusals(t, "w3")[0].differences
