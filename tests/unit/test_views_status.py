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


def test_the_worker_summary_of_ten_thousand_workers_is_small_and_names_the_slowest_and_refused() -> None:
    """GetStatus with WORKERS_VIEW_SUMMARY: counts by state, the longest unheard registered
    workers (an expired one is counted, never 'slowest'), the refused with their total, and
    the workers themselves only for a fleet of at most `listed_max`; stepped without the
    invariant monitor (10,000 workers)."""
    from common.fleetpb import admin_pb2
    from common.ids import WorkerId
    from coordinator.core import commands as c
    from coordinator.core import new_state, step
    from coordinator.core.state import Refusal

    s, now = new_state(), 1_000_000
    for i in range(10_000):
        s, _ = step(s, c.WorkerRegistered(now, WorkerId(f"w{i:05d}"), 1, 2, "env"))
    s, _ = step(s, c.WorkerDisconnected(now, WorkerId("w00000")))
    now += 2_000
    for i in range(2, 10_000):  # w00001 stays silent, so it is the slowest registered worker
        s, _ = step(s, c.HeartbeatReceived(now, WorkerId(f"w{i:05d}"), ()))
    s, _ = step(s, c.WorkerGone(now, WorkerId("w00000")))
    for i in range(0, 10_000, 1_000):
        s.workers[WorkerId(f"w{i + 7:05d}")].refusal = Refusal("run-x", "environment differs", (), now)
    out = views.status(s, None, now + 1_000, admin_pb2.WORKERS_VIEW_SUMMARY, 5, 20)
    ws = out.worker_summary
    assert not out.workers and out.ByteSize() < 10_000
    assert ws.total == 10_000 and {c.state: c.count for c in ws.counts} == {"active": 9_999, "gone": 1}
    assert ws.counts[0].state == "active" and ws.slots == 20_000 and ws.busy_slots == 0
    assert [w.worker_id for w in ws.slowest][0] == "w00001" and len(ws.slowest) == 5
    assert "w00000" not in [w.worker_id for w in ws.slowest]
    assert ws.slowest[0].last_heartbeat_age_ms == 3_000
    assert ws.refused_total == 10 and [w.worker_id for w in ws.refused] == [f"w0{k}007" for k in range(5)]
    assert ws.refused[0].refused_run_id == "run-x"
    full = views.status(s, None, now, admin_pb2.WORKERS_VIEW_ALL)
    assert len(full.workers) == 10_000 and not full.HasField("worker_summary")
    small = new_state()
    small, _ = step(small, c.WorkerRegistered(now, WorkerId("w1"), 1, 1, "env"))
    listed = views.status(small, None, now, admin_pb2.WORKERS_VIEW_SUMMARY, 5, 20)
    assert [w.worker_id for w in listed.workers] == ["w1"] and listed.worker_summary.total == 1


def test_run_counts_kept_by_the_core_equal_one_walk_after_a_restart_forgot_them() -> None:
    """Status reads counts the core keeps as cells change; a restart (soft state forgotten)
    builds them by one walk, and both say the same: selected, running, exhausted, retries."""
    from tests.unit.core_helpers import UNKNOWN, pushes

    k = Core(make_spec(tasks=4, subjects=2), make_policy(max_attempts_per_cell=2))
    t = k.register("w1", slots=2)
    first, second = (p.assignment_id for p in pushes(t))
    k.report_all(first)  # selected
    k.report_all(second, UNKNOWN)  # retryable: its group goes back and is tried again
    k.tick(k.now + 10_000)

    def shown() -> tuple:
        (run,) = views.status(k.state, None, k.now).runs
        return (run.cells_selected, run.cells_running, run.cells_incomplete, run.cells_exhausted, run.retries,
                [(g.state, g.count) for g in run.group_counts])

    kept = shown()
    assert kept[0] == 2 and kept[4] >= 1, kept
    k.state.soft = Soft()
    assert shown() == kept
