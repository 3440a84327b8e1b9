"""`fleetctl status` from the core state: a gone or expired worker's last-heard age counts
from when it was really last heard (also after a restart forgot soft state), a refused worker
shows its refusal with the keys that differ, and a run shows its reference and pin; method:
drive the core with the test harness and read `coordinator.views.status`."""
from __future__ import annotations

from coordinator import views
from coordinator.core.state import Soft
from tests.unit.core_helpers import EXPIRE_MS, Core, make_policy, make_spec


def workers(k: Core) -> dict:
    return {w.worker_id: w for w in views.status(k.state, None, k.now).workers}


def test_a_gone_workers_last_heard_age_grows_from_when_it_left() -> None:
    k = Core(make_spec(tasks=2, subjects=1), make_policy(required_environment_id=""))
    k.register("w1")
    k.advance(1_000)
    k.gone("w1")
    k.advance(60_000)
    assert workers(k)["w1"].last_heartbeat_age_ms == 61_000
    k.state.soft = Soft()  # a coordinator restart forgets liveness; the departure is durable
    assert workers(k)["w1"].last_heartbeat_age_ms == 60_000


def test_an_expired_worker_is_not_shown_as_just_heard_after_a_restart() -> None:
    k = Core(make_spec(tasks=2, subjects=1), make_policy(required_environment_id=""))
    k.register("w1")
    k.disconnect("w1")
    k.tick(EXPIRE_MS)
    k.advance(120_000)
    k.state.soft = Soft()
    k.coordinator_recovered()  # shifts liveness for expiry; the displayed age must not reset
    assert workers(k)["w1"].last_heartbeat_age_ms >= 120_000


def test_status_shows_a_refusal_with_both_values_and_the_runs_pin() -> None:
    k = Core(make_spec(tasks=2, subjects=1), make_policy(required_environment_id=""))
    k.register("w1")
    k.measurements["w2"] = {"bench.file:solve.py": "digest-other"}
    k.register("w2")
    out = views.status(k.state, None, k.now)
    w2 = {w.worker_id: w for w in out.workers}["w2"]
    assert w2.refused_run_id == k.run_id and list(w2.serves_runs) == []
    (d,) = w2.refused_differences
    assert (d.key, d.run_value, d.worker_value) == ("bench.file:solve.py", "digest-solve-1", "digest-other")
    (run,) = out.runs
    assert run.environment_id.startswith("env-") and run.reference_keys == 2
    assert run.pinned_by == "w1" and run.pin_environment_id.startswith("env-")
