"""Goal: the transport's word that streams are up (StreamsAlive, one command for many sessions)
keeps idle workers active and only them; method: the pure core driven through the test Core,
virtual time, checked against what heartbeats and silence do."""
from __future__ import annotations

from common.ids import WorkerId
from coordinator.core import commands as c
from coordinator.core import machine
from coordinator.core.effects import EndSession
from coordinator.core.state import WorkerStatus
from common.policy import Policy
from tests.unit.core_helpers import HEARTBEAT_MS, SUSPECT_MS, Core, make_spec, pushes

# Without a run the core's liveness timing is the default policy's.
IDLE = Policy()


def alive(k: Core, *wids: str, owned: tuple = ()):
    return k.apply(c.StreamsAlive(k.now, tuple((WorkerId(w), owned) for w in wids)))


def test_an_idle_worker_whose_stream_is_up_stays_active_without_heartbeats() -> None:
    k = Core(submit=False)
    k.register("w1")
    k.register("w2")
    before = k.fingerprint()
    while k.now < 3 * IDLE.expire_after_ms:
        k.advance(IDLE.heartbeat_interval_ms)
        t = alive(k, "w1")
        assert t.effects == () and t.durable == ()
        k.tick()
    assert k.worker("w1").status == WorkerStatus.ACTIVE
    assert k.state.soft.last_heard_ms["w1"] == k.state.soft.contact_ms["w1"] == k.now
    assert k.worker("w2").status == WorkerStatus.EXPIRED, "silence without the transport's word: as before"
    k.assert_replays()
    assert before != k.fingerprint()


def test_a_worker_holding_a_group_is_not_vouched_for_and_is_suspected_by_its_silence() -> None:
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))
    assert k.held("w1") == [push.assignment_id]
    suspected_at = None
    while k.now < SUSPECT_MS + 2 * HEARTBEAT_MS:
        k.advance(HEARTBEAT_MS // 2)
        alive(k, "w1")
        k.tick()
        if suspected_at is None and k.worker("w1").status == WorkerStatus.SUSPECTED:
            suspected_at = k.now
    assert suspected_at is not None and SUSPECT_MS <= suspected_at < SUSPECT_MS + HEARTBEAT_MS
    # Its stream being up does not resume it either; its own heartbeat does.
    t = alive(k, "w1")
    assert t.durable == () and k.worker("w1").status == WorkerStatus.SUSPECTED
    k.heartbeat("w1")
    assert k.worker("w1").status == WorkerStatus.ACTIVE
    k.assert_replays()


def test_a_suspected_idle_worker_resumes_durably() -> None:
    k = Core(submit=False)
    k.register("w1")
    k.tick(IDLE.suspect_after_ms)
    assert k.worker("w1").status == WorkerStatus.SUSPECTED
    t = alive(k, "w1")
    assert [type(d) for d in t.durable] == [c.WorkerResumed]
    assert k.worker("w1").status == WorkerStatus.ACTIVE
    k.assert_replays()


def test_a_worker_that_must_register_again_has_its_session_ended_and_nothing_changes() -> None:
    k = Core(submit=False)
    k.register("w1")
    k.register("w2")
    k.tick(IDLE.suspect_after_ms)
    k.tick(IDLE.expire_after_ms)
    assert k.worker("w1").status == WorkerStatus.EXPIRED
    k.gone("w2")
    before = k.fingerprint()
    t = alive(k, "w1", "w2", "nobody")
    assert [(e.worker_id, e.reason.split(":")[0]) for e in t.effects if isinstance(e, EndSession)] == [
        ("w1", "worker w1 is expired"), ("w2", "worker w2 is gone"), ("nobody", "worker nobody has not registered")]
    assert t.durable == () and k.fingerprint() == before


def test_a_stream_that_ended_is_not_vouched_for_and_the_worker_is_lost_after_the_grace() -> None:
    k = Core(submit=False)
    k.register("w1")
    k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    assert k.worker("w1").status == WorkerStatus.SUSPECTED
    k.advance(IDLE.stream_end_grace_ms)
    alive(k, "w1")
    k.tick()
    assert k.worker("w1").status == WorkerStatus.EXPIRED


def test_a_group_the_worker_did_not_say_it_holds_is_pushed_again_and_liveness_is_not_stamped() -> None:
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))  # lost on its way, say: the worker's session says it owns nothing
    heard = k.state.soft.last_heard_ms["w1"]
    k.advance(HEARTBEAT_MS)
    t = alive(k, "w1")
    assert [p.assignment_id for p in pushes(t)] == [push.assignment_id] and t.durable == ()
    assert k.state.soft.last_heard_ms["w1"] == heard
    t = alive(k, "w1", owned=(push.assignment_id,))
    assert t.effects == ()


def test_the_tick_walks_only_when_a_decision_can_be_due_and_suspects_on_time() -> None:
    walked = []
    original = machine._walk_workers

    def counted(*args):  # noqa: ANN002
        walked.append(args[2])
        original(*args)

    machine._walk_workers = counted
    try:
        k = Core(submit=False)
        k.register("w1")
        k.tick(10)  # walks (the registration can make a decision due); the bound: w1's suspicion
        suspected_at = None
        while k.now < 4_000:
            k.tick(100)
            if suspected_at is None and k.worker("w1").status == WorkerStatus.SUSPECTED:
                suspected_at = k.now
        # On the first tick at or past the suspicion window, as a walk at every tick decides;
        # then once more after that decision, and not again before the expiry's bound.
        assert suspected_at == 3_510 and walked == [10, 3_510, 3_610], walked
    finally:
        machine._walk_workers = original
