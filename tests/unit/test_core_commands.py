"""Every command class of the pure core along its accepted paths: table-driven cases build a
small run with the `Core` harness, apply one command, and compare the outcome, the effects,
the derived durable commands and the state that follows (the harness also checks the
invariants after every step, and most cases check that the durable log replays)."""
from __future__ import annotations

import heapq
from dataclasses import replace

import pytest

from common import limits

from common.evidence import Execution, Usage, Verification
from common.ids import AssignmentId, WorkerId, attempt_id_for, run_id_for
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core import machine, push_for, step
from coordinator.core.effects import ACCEPTED, DUPLICATE, LATE, NotifyRunState, OutcomeKind, RevokeAssignment
from coordinator.core.invariants import Monitor
from coordinator.core.state import GroupStatus, WorkerStatus
from tests.unit.core_helpers import (
    MANIFEST,
    WORKER_KEYS,
    DEADLINE_MS,
    ENV,
    ENV_FAILURE,
    EVIDENCE,
    EXPIRE_MS,
    HEARTBEAT_MS,
    OK,
    OTHER_ENV,
    RECOVERY_GRACE_MS,
    SUSPECT_MS,
    UNKNOWN,
    Core,
    artifact,
    durable_types,
    emits,
    make_policy,
    make_report,
    make_spec,
    notifies,
    pushes,
    revokes,
    unavailable,
)


def rejected_with(t, reason: Rejection) -> bool:
    return t.outcome.kind == OutcomeKind.REJECTED and t.outcome.rejection == reason


# --- every command class, one accepted path each ----------------------------------------------

def _one_run_one_worker(**policy):
    k = Core(make_spec(tasks=2, subjects=1), make_policy(**policy))
    k.register("w1", slots=2)
    return k


def _case_run_submitted():
    k = Core(submit=False)
    return k, c.RunSubmitted(0, k.run_id, k.spec, k.policy), OutcomeKind.ACCEPTED


def _case_worker_registered():
    k = Core()
    return k, c.WorkerRegistered(0, WorkerId("w1"), 1, 1, ENV), OutcomeKind.ACCEPTED


def _case_heartbeat():
    k = _one_run_one_worker()
    return k, c.HeartbeatReceived(10, WorkerId("w1"), tuple(k.held("w1"))), OutcomeKind.ACCEPTED


def _case_disconnected():
    k = _one_run_one_worker()
    return k, c.WorkerDisconnected(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_cell_reported():
    k = _one_run_one_worker()
    tid = k.attempts_of(k.held("w1")[0])[0]
    a = k.attempt(tid)
    return k, c.CellReported(10, a.worker_id, tid, a.assignment_id, a.generation, OK), OutcomeKind.ACCEPTED


def _case_artifact_stored():
    ref, _ = artifact()
    return Core(), c.ArtifactStored(0, ref.digest, ref.size_bytes), OutcomeKind.ACCEPTED


def _case_group_finished():
    k = _one_run_one_worker()
    return k, c.GroupFinished(10, WorkerId("w1"), k.held("w1")[0]), OutcomeKind.ACCEPTED


def _case_run_paused():
    k = Core()
    return k, c.RunPaused(0, k.run_id), OutcomeKind.ACCEPTED


def _case_run_recovered():
    k = Core()
    k.pause()
    return k, c.RunRecovered(0, k.run_id), OutcomeKind.ACCEPTED


def _case_run_repaired():
    k = Core(make_spec(tasks=1, subjects=1))
    k.register("w1")
    k.report(k.attempts_of(k.held("w1")[0])[0], EVIDENCE["environment-failure"][0])
    return k, c.RunRepaired(10, k.run_id, ENV_FAILURE), OutcomeKind.ACCEPTED


def _case_cell_retry_granted():
    k = Core(make_spec(tasks=1, subjects=1), make_policy(max_attempts_per_cell=1))
    k.register("w1")
    tid = k.attempts_of(k.held("w1")[0])[0]
    k.report(tid, UNKNOWN)
    return k, c.CellRetryGranted(10, k.run_id, k.attempt(tid).cell_id), OutcomeKind.ACCEPTED


def _case_worker_drained():
    k = _one_run_one_worker()
    return k, c.WorkerDrained(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_worker_gone():
    k = _one_run_one_worker()
    return k, c.WorkerGone(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_clock_ticked():
    k = _one_run_one_worker()
    return k, c.ClockTicked(10), OutcomeKind.ACCEPTED


def _case_coordinator_recovered():
    k = _one_run_one_worker()
    return k, c.CoordinatorRecovered(10), OutcomeKind.ACCEPTED


def _case_coordinator_stalled():
    k = _one_run_one_worker()
    return k, c.CoordinatorStalled(10, 20_000), OutcomeKind.ACCEPTED


def _case_coordinator_restored():
    k = _one_run_one_worker()
    return k, c.CoordinatorRestored(10, "backup-1", "e1"), OutcomeKind.ACCEPTED


def _case_result_offered():
    k = _one_run_one_worker()
    aid = k.held("w1")[0]
    tid = k.attempts_of(aid)[0]
    return k, c.ResultOffered(10, WorkerId("w1"), tid, aid, 1, OK), OutcomeKind.ACCEPTED


def _case_worker_degraded():
    k = _one_run_one_worker()
    return k, c.WorkerDegraded(10, WorkerId("w1"), "the disk is full"), OutcomeKind.ACCEPTED


def _quarantined_worker():
    from tests.unit.test_core_quarantine import black_hole_beside_a_healthy_worker
    k = black_hole_beside_a_healthy_worker()
    return k


def _case_worker_quarantined():
    from tests.unit.test_core_quarantine import black_hole_beside_a_healthy_worker
    k = black_hole_beside_a_healthy_worker(tick=False)
    return k, c.WorkerQuarantined(k.now, WorkerId("bad")), OutcomeKind.ACCEPTED


def _case_worker_probed():
    k = _quarantined_worker()
    k.advance(10 ** 7)
    return k, c.WorkerProbed(k.now, WorkerId("bad")), OutcomeKind.ACCEPTED


def _case_worker_released():
    k = _quarantined_worker()
    return k, c.WorkerReleased(k.now, WorkerId("bad")), OutcomeKind.ACCEPTED


def _case_worker_suspected():
    k = _one_run_one_worker()
    return k, c.WorkerSuspected(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_worker_resumed():
    k = _one_run_one_worker()
    k.disconnect("w1")
    return k, c.WorkerResumed(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_worker_expired():
    k = _one_run_one_worker()
    k.disconnect("w1")
    return k, c.WorkerExpired(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_time_advanced():
    k = _one_run_one_worker()
    return k, c.TimeAdvanced(10), OutcomeKind.ACCEPTED


def _case_run_environment_measured():
    k = Core()
    k.auto_measure = False
    k.register("w1")
    return k, c.RunEnvironmentMeasured(0, WorkerId("w1"), 1, k.run_id, k.measurement("w1", k.run_id)), \
        OutcomeKind.ACCEPTED


def _case_run_pin_released():
    k = _one_run_one_worker()
    aid = k.held("w1")[0]
    k.disconnect("w1")
    k.tick(EXPIRE_MS)  # expires w1; the tick itself releases the pin as a derived command
    assert k.run.pin is None and aid not in k.held("w1")
    k.register("w2")  # pins again
    assert k.run.pinned_by == "w2"
    k.apply(c.WorkerGone(k.now, WorkerId("w2")))
    return k, c.RunPinReleased(k.now, k.run_id, WorkerId("w2")), OutcomeKind.ACCEPTED
def _case_stream_ended():
    k = _one_run_one_worker()
    return k, c.WorkerStreamEnded(10, WorkerId("w1")), OutcomeKind.ACCEPTED


def _case_streams_alive():
    k = _one_run_one_worker()
    return k, c.StreamsAlive(10, ((WorkerId("w1"), ()),)), OutcomeKind.ACCEPTED


def _case_worker_lost():
    k = _one_run_one_worker()
    k.apply(c.WorkerStreamEnded(10, WorkerId("w1")))
    return k, c.WorkerLost(20, WorkerId("w1")), OutcomeKind.ACCEPTED


ONE_OF_EACH = {
    c.RunEnvironmentMeasured: _case_run_environment_measured,
    c.RunPinReleased: _case_run_pin_released,
    c.RunSubmitted: _case_run_submitted,
    c.WorkerRegistered: _case_worker_registered,
    c.HeartbeatReceived: _case_heartbeat,
    c.WorkerDisconnected: _case_disconnected,
    c.CellReported: _case_cell_reported,
    c.ArtifactStored: _case_artifact_stored,
    c.GroupFinished: _case_group_finished,
    c.RunPaused: _case_run_paused,
    c.RunRecovered: _case_run_recovered,
    c.RunRepaired: _case_run_repaired,
    c.CellRetryGranted: _case_cell_retry_granted,
    c.WorkerDrained: _case_worker_drained,
    c.WorkerGone: _case_worker_gone,
    c.ClockTicked: _case_clock_ticked,
    c.CoordinatorRecovered: _case_coordinator_recovered,
    c.CoordinatorStalled: _case_coordinator_stalled,
    c.CoordinatorRestored: _case_coordinator_restored,
    c.ResultOffered: _case_result_offered,
    c.WorkerDegraded: _case_worker_degraded,
    c.WorkerQuarantined: _case_worker_quarantined,
    c.WorkerProbed: _case_worker_probed,
    c.WorkerReleased: _case_worker_released,
    c.WorkerSuspected: _case_worker_suspected,
    c.WorkerResumed: _case_worker_resumed,
    c.WorkerExpired: _case_worker_expired,
    c.TimeAdvanced: _case_time_advanced,
    c.WorkerStreamEnded: _case_stream_ended,
    c.WorkerLost: _case_worker_lost,
    c.StreamsAlive: _case_streams_alive,
}


def test_the_table_covers_every_command_class():
    assert set(ONE_OF_EACH) == set(c.Command.__args__)


@pytest.mark.parametrize("cls", list(ONE_OF_EACH), ids=lambda cls: cls.__name__)
def test_every_command_class_has_an_accepted_path(cls):
    k, command, kind = ONE_OF_EACH[cls]()
    assert type(command) is cls
    t = k.apply(command)
    assert t.outcome.kind == kind, t.outcome
    if cls in c.SOFT_COMMANDS:
        assert command not in t.durable, "a soft command is never logged itself"
    elif cls is c.RunSubmitted:
        assert t.durable == (replace(command, order=()),), "logged with its order resolved (spec order)"
    elif t.durable:
        assert t.durable == (command,), "a durable command is logged as itself"
    k.assert_replays()


def test_a_command_without_a_handler_is_a_bug_not_a_rejection():
    k = Core()
    with pytest.raises(AssertionError, match="no handler"):
        step(k.state, object())


# --- RunSubmitted -----------------------------------------------------------------------------

def test_run_submitted_freezes_groups_and_cells_and_dispatches_nothing_without_workers():
    k = Core(make_spec(tasks=3, subjects=2, repetitions=2), submit=False)
    t = k.submit()
    assert t.outcome == ACCEPTED
    assert durable_types(t) == ["RunSubmitted"]
    assert [e.event for e in emits(t)] == ["run_submitted"]
    assert pushes(t) == []
    run = k.run
    assert len(run.groups) == 6 and len(run.cells) == 12
    assert all(g.status == GroupStatus.WAITING and g.generation == 0 for g in run.groups)
    assert sorted(run.ready) == list(range(6))
    assert run.manifest == dict(MANIFEST) and run.worker_keys == WORKER_KEYS and run.pin is None


@pytest.mark.parametrize("cap, slots, expected", [
    pytest.param(2, (2, 2), 2, id="cap below the slots offered"),
    pytest.param(4, (1, 1), 2, id="slots below the cap"),
    pytest.param(3, (2, 2), 3, id="cap across two workers"),
], )
def test_run_submitted_dispatches_at_once_to_waiting_workers_within_the_cap(cap, slots, expected):
    k = Core(make_spec(tasks=5, subjects=1, cap=cap), submit=False)
    for i, n in enumerate(slots):
        k.register(f"w{i + 1}", slots=n)
    t = k.submit()
    assert len(pushes(t)) == expected
    assert k.run.active == expected
    # Each worker gets work as soon as its measurement of the new run arrives (w1's first),
    # never more than its slots.
    workers = [p.worker_id for p in pushes(t)]
    assert workers[0] == "w1"
    assert all(workers.count(f"w{i + 1}") <= n for i, n in enumerate(slots))
    k.assert_replays()


@pytest.mark.parametrize("change, outcome", [
    pytest.param("same spec and policy", DUPLICATE, id="idempotent resubmit"),
    pytest.param("other spec", Rejection.SPEC_CONFLICT, id="different spec same id"),
    pytest.param("other policy", Rejection.SPEC_CONFLICT, id="different policy same id"),
])
def test_resubmitting_a_run_id(change, outcome):
    k = Core()
    k.register("w1")
    before = k.snapshot()
    spec, policy = k.spec, k.policy
    if change == "other spec":
        spec = make_spec(tasks=3)
    elif change == "other policy":
        policy = make_policy(max_attempts_per_cell=5)
    t = k.submit(spec, policy, run_id=k.run_id)
    if outcome == DUPLICATE:
        assert t.outcome == DUPLICATE
    else:
        assert rejected_with(t, outcome) and t.outcome.detail
    assert t.effects == () and t.durable == ()
    assert k.snapshot() == before


@pytest.mark.parametrize("resubmitted_grace, outcome", [
    pytest.param(limits.STREAM_END_GRACE_MS_DEFAULT, DUPLICATE, id="today's default resumes"),
    pytest.param(500, Rejection.SPEC_CONFLICT, id="another explicit value conflicts"),
])
def test_a_run_frozen_under_a_former_default_resumes_with_its_own_policy(resubmitted_grace, outcome):
    # A run frozen by a release whose default grace was 3 s; the same document submitted
    # today parses at today's default. It is the same run, and it keeps what it was frozen with.
    k = Core(policy=make_policy(stream_end_grace_ms=3_000))
    before = k.snapshot()
    t = k.submit(policy=make_policy(stream_end_grace_ms=resubmitted_grace))
    if outcome == DUPLICATE:
        assert t.outcome == DUPLICATE
    else:
        assert rejected_with(t, outcome) and "policy (streamEndGraceMs)" in t.outcome.detail
    assert k.snapshot() == before and k.run.policy.stream_end_grace_ms == 3_000


# --- WorkerRegistered: admission --------------------------------------------------------------

ADMISSION = [
    # id, policy overrides, register keyword arguments, expected outcome
    ("required environment matches", {}, dict(env=ENV), None),
    ("no environment identity", {}, dict(env=""), Rejection.ENVIRONMENT_MISMATCH),
    ("zero slots", {}, dict(slots=0), Rejection.CAPACITY_INVALID),
    ("negative slots", {}, dict(slots=-1), Rejection.CAPACITY_INVALID),
    ("slots at the maximum", {}, dict(slots=1024), None),
    ("slots above the maximum", {}, dict(slots=1025), Rejection.CAPACITY_INVALID),
    ("reservation fits exactly", dict(group_cpu_millis=1000, group_memory_mb=512),
     dict(slots=2, cpu_millis=2000, memory_mb=1024), None),
    ("cpu below the reservation", dict(group_cpu_millis=1000, group_memory_mb=512),
     dict(slots=2, cpu_millis=1999, memory_mb=1024), Rejection.CAPACITY_INVALID),
    ("memory below the reservation", dict(group_cpu_millis=1000, group_memory_mb=512),
     dict(slots=2, cpu_millis=2000, memory_mb=1023), Rejection.CAPACITY_INVALID),
    ("reservation for one slot only", dict(group_cpu_millis=1000),
     dict(slots=4, cpu_millis=1000), Rejection.CAPACITY_INVALID),
]


@pytest.mark.parametrize("policy, kwargs, reason", [pytest.param(p, kw, r, id=i) for i, p, kw, r in ADMISSION])
def test_worker_admission(policy, kwargs, reason):
    k = Core(policy=make_policy(**policy))
    before = k.snapshot()
    t = k.register("w1", **kwargs)
    if reason is None:
        assert t.outcome == ACCEPTED
        assert k.worker("w1").status == WorkerStatus.ACTIVE
        assert pushes(t, "w1"), "an admitted worker gets work in the same step"
        assert durable_types(t) == ["WorkerRegistered"]
    else:
        assert rejected_with(t, reason) and t.outcome.detail
        assert t.effects == () and t.durable == () and k.snapshot() == before
        assert WorkerId("w1") not in k.state.workers


def test_without_an_open_run_any_environment_and_capacity_is_admitted():
    k = Core(policy=make_policy(group_cpu_millis=1000), submit=False)
    t = k.register("w1", env=OTHER_ENV, cpu_millis=0)
    assert t.outcome == ACCEPTED and pushes(t) == []


# --- WorkerRegistered: incarnations -----------------------------------------------------------

@pytest.mark.parametrize("incarnation, outcome, still_draining", [
    pytest.param(1, None, False, id="older incarnation is stale"),
    pytest.param(2, ACCEPTED, True, id="same incarnation reconnects and stays draining"),
    pytest.param(3, ACCEPTED, False, id="newer incarnation ends the drain"),
])
def test_incarnations(incarnation, outcome, still_draining):
    k = Core()
    k.register("w1", incarnation=2)
    k.drain("w1")
    before = k.snapshot()
    t = k.register("w1", incarnation=incarnation, owned=tuple(k.held("w1")))
    if outcome is None:
        assert rejected_with(t, Rejection.INCARNATION_STALE)
        assert t.effects == () and k.snapshot() == before
        return
    assert t.outcome == outcome
    assert k.worker("w1").incarnation == incarnation
    assert k.worker("w1").draining == still_draining


# --- WorkerRegistered: reconciliation ---------------------------------------------------------

def _two_groups_on_w1():
    k = Core(make_spec(tasks=2, subjects=2))
    t = k.register("w1", slots=2)
    a0, a1 = (p.assignment_id for p in pushes(t))
    k.advance(10)
    return k, a0, a1


@pytest.mark.parametrize("owned, buffered, kept", [
    pytest.param((0, 1), (), (0, 1), id="owned assignments are kept"),
    pytest.param((0,), (1,), (0, 1), id="buffered reports keep their assignment"),
    pytest.param((), (0, 1), (0, 1), id="buffered alone keeps both"),
    pytest.param((0,), (), (0,), id="neither owned nor buffered is released"),
    pytest.param((), (), (), id="nothing held releases everything"),
])
def test_reconnect_reconciles_what_the_worker_still_holds(owned, buffered, kept):
    k, a0, a1 = _two_groups_on_w1()
    aids = (a0, a1)
    owned_ids = tuple(aids[i] for i in owned)
    buffered_ids = tuple(k.attempts_of(aids[i])[0] for i in buffered)
    # The worker reports the buffered attempts after its hello; what matters here is the hello.
    t = k.register("w1", slots=2, owned=owned_ids, buffered=buffered_ids)
    assert t.outcome == ACCEPTED
    assert revokes(t) == []
    for i, aid in enumerate(aids):
        a = k.state.assignments[aid]
        if i in kept:
            assert a.authoritative and aid in k.held("w1")
            continue
        assert not a.authoritative and a.ended_reason == "not held by the worker when it reconnected"
        assert all(k.attempt(tid).lost for tid in a.attempts)
        group = k.group_of(aid)
        # Redispatched at once (backoff 0) with a new generation and new attempt ids.
        assert group.generation == 2 and group.status == GroupStatus.ASSIGNED
        [push] = [p for p in pushes(t) if p.group_id == group.group_id]
        assert push.generation == 2 and push.assignment_id != aid
        for cd in push.cells:
            assert cd.attempt_id not in a.attempts and cd.attempt_id.endswith(":a2")
    assert len(pushes(t)) == 2 - len(kept)
    k.assert_replays()


def test_a_reconnect_with_fewer_slots_never_leaves_the_worker_over_its_slots():
    # The worker restarts with --slots 1 while it still runs two groups. Either answer keeps
    # the per-worker cap: refuse the hello (CAPACITY_INVALID), or keep at most one group and
    # release the other. Today the core keeps both, and `invariants.check` reports
    # "worker w1 holds 2 groups with 1 slots" (the harness asserts it after every step).
    k, a0, a1 = _two_groups_on_w1()
    t = k.register("w1", slots=1, incarnation=2, owned=(a0, a1))
    held = [aid for aid in (a0, a1) if k.state.assignments[aid].authoritative]
    assert t.outcome.kind == OutcomeKind.REJECTED or len(held) <= 1


def test_a_buffered_attempt_of_another_worker_keeps_nothing():
    k = Core(make_spec(tasks=2, subjects=1))
    a0 = pushes(k.register("w1"))[0].assignment_id
    a1 = pushes(k.register("w2"))[0].assignment_id
    t = k.register("w1", buffered=(k.attempts_of(a1)[0],))
    assert not k.state.assignments[a0].authoritative
    assert k.state.assignments[a1].authoritative and a1 in k.held("w2")
    assert t.outcome == ACCEPTED


@pytest.mark.parametrize("which, reason_starts", [
    pytest.param("unknown", "unknown assignment", id="unknown to the coordinator"),
    pytest.param("superseded", "superseded", id="superseded by a redispatch"),
    pytest.param("other worker", "assignment belongs to another worker", id="another worker's"),
])
def test_owned_assignments_the_coordinator_does_not_grant_are_revoked(which, reason_starts):
    k = Core(make_spec(tasks=2, subjects=1))
    a0 = pushes(k.register("w1"))[0].assignment_id
    a1 = pushes(k.register("w2"))[0].assignment_id
    if which == "unknown":
        claimed = AssignmentId(f"{k.run_id}:t9/r1:g7")
    elif which == "superseded":
        k.register("w1")  # reconnect owning nothing: a0 is released and redispatched
        assert not k.state.assignments[a0].authoritative
        claimed = a0
    else:
        claimed = a1
    t = k.register("w1", owned=(claimed,) + tuple(k.held("w1")))
    assert t.outcome == ACCEPTED
    [revoke] = revokes(t)
    assert revoke.worker_id == "w1" and revoke.assignment_id == claimed
    assert revoke.reason.startswith(reason_starts)
    assert k.state.assignments[a1].authoritative, "another worker's assignment is untouched"


def test_a_first_registration_claiming_assignments_gets_them_revoked():
    k = Core()
    t = k.register("w9", owned=(AssignmentId("run-x:t0/r1:g1"),))
    assert [r.assignment_id for r in revokes(t)] == ["run-x:t0/r1:g1"]


# --- HeartbeatReceived ------------------------------------------------------------------------

def test_heartbeat_re_pushes_an_authoritative_assignment_the_worker_does_not_list():
    k = Core(make_spec(tasks=1, subjects=2))
    [original] = pushes(k.register("w1"))
    k.advance(HEARTBEAT_MS)
    before = k.fingerprint()
    t = k.heartbeat("w1", owned=())
    assert t.outcome == ACCEPTED and t.durable == ()
    assert pushes(t) == [original], "the re-push is the same assignment, generation and attempts"
    assert push_for(k.state, original.assignment_id) == original
    assert k.fingerprint() == before


def test_heartbeat_revokes_what_the_worker_lists_but_does_not_hold():
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))
    k.report_all(push.assignment_id)  # completes and releases the assignment
    t = k.heartbeat("w1", owned=(push.assignment_id, AssignmentId("bogus")))
    assert t.outcome == ACCEPTED and t.durable == ()
    assert [(r.assignment_id, r.reason.split(":")[0]) for r in revokes(t)] == [
        (push.assignment_id, "superseded"), ("bogus", "unknown assignment")]


def test_heartbeat_otherwise_changes_nothing_durable_and_refreshes_liveness():
    k = Core()
    k.register("w1", slots=2)
    k.advance(SUSPECT_MS - 1)
    before = k.fingerprint()
    t = k.heartbeat("w1")
    assert t == type(t)(ACCEPTED), "no effects, no durable commands"
    assert k.fingerprint() == before
    assert k.state.soft.last_heard_ms["w1"] == k.now
    # The refreshed liveness holds suspicion off for another SUSPECT_MS.
    assert k.tick(SUSPECT_MS - 1).durable == ()
    assert k.worker("w1").status == WorkerStatus.ACTIVE


def test_a_suspected_worker_resumes_on_its_heartbeat_and_the_resume_is_durable():
    k = Core(make_spec(tasks=3, subjects=1, cap=3))
    k.register("w1")
    k.disconnect("w1")
    assert k.worker("w1").status == WorkerStatus.SUSPECTED
    k.register("w2")  # takes group 1; group 2 waits for a free slot
    k.report_all(k.held("w1")[0])  # a suspected worker's report is accepted; its slot frees
    assert k.held("w1") == [] and WorkerId("w1") not in k.state.free_workers
    k.advance(50)
    t = k.heartbeat("w1")
    assert t.durable == (c.WorkerResumed(k.now, WorkerId("w1")),)
    assert k.worker("w1").status == WorkerStatus.ACTIVE
    assert [p.group_id for p in pushes(t, "w1")] == [k.run.groups[2].group_id], "resumed and refilled at once"
    k.assert_replays()


# --- WorkerDisconnected -----------------------------------------------------------------------

def test_disconnect_suspects_an_active_worker_once():
    k = Core()
    k.register("w1")
    t = k.disconnect("w1")
    assert t.durable == (c.WorkerSuspected(0, WorkerId("w1")),)
    assert k.worker("w1").status == WorkerStatus.SUSPECTED and k.held("w1")
    again = k.disconnect("w1")
    assert again.outcome == ACCEPTED and again.durable == () and again.effects == ()


# --- ClockTicked: suspicion, expiry, deadlines, backoff ---------------------------------------

def test_ticks_before_suspicion_change_nothing():
    k = Core()
    k.register("w1")
    before = k.fingerprint()
    t = k.tick(SUSPECT_MS - 1)
    assert t.outcome == ACCEPTED and t.durable == () and t.effects == ()
    assert k.fingerprint() == before


def test_suspicion_gives_no_new_work_and_a_heartbeat_resumes():
    k = Core(make_spec(tasks=3, subjects=1, cap=3))
    k.register("w1")
    k.register("w2")
    ticks = k.clock(SUSPECT_MS + HEARTBEAT_MS, alive=("w2",))
    suspected = [d for t in ticks for d in t.durable]
    assert suspected == [c.WorkerSuspected(suspected[0].now_ms, WorkerId("w1"))]
    assert suspected[0].now_ms >= SUSPECT_MS
    assert k.worker("w1").status == WorkerStatus.SUSPECTED
    assert k.worker("w1").assignments, "suspicion keeps the assignments"
    t = k.report(k.attempts_of(k.held("w1")[0])[0])
    assert t.outcome == ACCEPTED and pushes(t) == [], "the freed slot of a suspected worker is not refilled"
    assert k.run.groups[2].status == GroupStatus.WAITING


def test_expiry_after_the_grace_redispatches_with_a_new_generation():
    k = Core(make_spec(tasks=2, subjects=2))
    [p0] = pushes(k.register("w1"))
    k.register("w2", slots=2)
    ticks = k.clock(EXPIRE_MS, alive=("w2",))
    expiring = [t for t in ticks if any(isinstance(d, c.WorkerExpired) for d in t.durable)]
    assert len(expiring) == 1
    [t] = expiring
    assert t.durable[-1] == c.WorkerExpired(EXPIRE_MS, WorkerId("w1"))
    assert revokes(t) == [RevokeAssignment(WorkerId("w1"), p0.assignment_id, "worker expired")]
    [again] = pushes(t)
    assert again.worker_id == "w2" and again.group_id == p0.group_id and again.generation == 2
    assert {cd.cell_id for cd in again.cells} == {cd.cell_id for cd in p0.cells}
    assert all(cd.attempt_id.endswith(":a2") for cd in again.cells)
    assert min(cd.dispatch_order for cd in again.cells) > max(cd.dispatch_order for cd in p0.cells)
    assert k.worker("w1").status == WorkerStatus.EXPIRED and k.worker("w1").assignments == {}
    assert k.state.assignments[p0.assignment_id].ended_reason == "worker expired"
    k.assert_replays()


def test_one_long_tick_lists_every_derived_durable_command_in_order():
    k = Core(make_spec(tasks=1, subjects=1))
    k.register("w1")
    t = k.tick(EXPIRE_MS)
    assert t.durable[:2] == (c.WorkerSuspected(EXPIRE_MS, WorkerId("w1")), c.WorkerExpired(EXPIRE_MS, WorkerId("w1")))
    assert set(durable_types(t)) <= {"WorkerSuspected", "WorkerExpired", "RunPinReleased", "TimeAdvanced"}
    assert all(d.now_ms == EXPIRE_MS for d in t.durable)
    k.assert_replays()


def test_a_paused_run_freezes_expiry_until_recovered_plus_a_fresh_window():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1"))
    k.pause()
    k.tick(10 * EXPIRE_MS)
    assert k.worker("w1").status == WorkerStatus.SUSPECTED, "suspected, but not expired while paused"
    assert k.state.assignments[p0.assignment_id].authoritative
    k.recover()
    recovered_at = k.now
    k.tick(EXPIRE_MS - 1)
    assert k.worker("w1").status == WorkerStatus.SUSPECTED
    t = k.tick(1)
    assert c.WorkerExpired(recovered_at + EXPIRE_MS, WorkerId("w1")) in t.durable
    k.assert_replays()


def test_a_group_past_its_deadline_is_revoked_and_redispatched_although_the_worker_heartbeats():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1"))
    assert p0.deadline_ms == DEADLINE_MS
    ticks = k.clock(DEADLINE_MS, alive=("w1",))
    assert all(t.durable == () for t in ticks[:-1])
    t = ticks[-1]
    assert "TimeAdvanced" in durable_types(t)
    assert revokes(t) == [RevokeAssignment(WorkerId("w1"), p0.assignment_id, "group deadline exceeded")]
    [again] = pushes(t)
    assert again.generation == 2 and again.deadline_ms == DEADLINE_MS + DEADLINE_MS
    assert k.worker("w1").status == WorkerStatus.ACTIVE
    k.assert_replays()


def test_a_paused_run_defers_its_deadlines_until_the_recovery_grace_has_passed():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1"))
    k.pause()
    k.clock(DEADLINE_MS + 500, alive=("w1",))
    assert k.state.assignments[p0.assignment_id].authoritative
    k.recover()
    k.clock(k.now + RECOVERY_GRACE_MS - HEARTBEAT_MS, alive=("w1",))
    assert k.state.assignments[p0.assignment_id].authoritative
    k.clock(k.now + HEARTBEAT_MS, alive=("w1",))
    assert not k.state.assignments[p0.assignment_id].authoritative
    k.assert_replays()


def test_retries_wait_out_an_exponential_capped_backoff():
    k = Core(make_spec(tasks=1, subjects=1),
             make_policy(retry_backoff_ms=100, retry_backoff_max_ms=250, max_attempts_per_cell=4))
    [push] = pushes(k.register("w1"))
    waits = []
    for _ in range(3):
        t = k.report(push.cells[0].attempt_id, UNKNOWN)
        assert pushes(t) == [] and k.run.groups[0].status == GroupStatus.WAITING
        reported_at = k.now
        for _ in range(100):
            [t] = k.clock(k.now + 10, alive=("w1",))
            if pushes(t):
                break
        assert "TimeAdvanced" in durable_types(t)
        [push] = pushes(t)
        waits.append(k.now - reported_at)
    assert waits == [100, 200, 250]
    assert push.generation == 4 and push.cells[0].attempt_id.endswith(":a4")
    k.assert_replays()


# --- CellReported -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(EVIDENCE))
def test_the_evidence_decides_selection_retry_or_block(name):
    report, selectable, blocks = EVIDENCE[name]
    k = Core(make_spec(tasks=1, subjects=1), make_policy(retry_backoff_ms=100, retry_backoff_max_ms=1000))
    [push] = pushes(k.register("w1"))
    [cd] = push.cells
    k.advance(10)
    t = k.report(cd.attempt_id, report)
    assert t.outcome == ACCEPTED and durable_types(t) == ["CellReported"]
    cell = k.cell(cd.cell_id)
    assert not k.state.assignments[push.assignment_id].authoritative, "the group's only cell settled"
    if selectable:
        assert cell.selected == cd.attempt_id
        assert [e.subject for e in emits(t, "cell_selected")] == [cd.cell_id]
        assert k.run.settled and pushes(t) == []
        [result] = k.summary().selected
        assert result.score == report.score and result.attempts == 1
        return
    assert cell.selected is None
    assert emits(t, "cell_retryable") and pushes(t) == []
    group = k.run.groups[0]
    assert group.status == GroupStatus.WAITING and group.eligible_ms == k.now + 100
    if blocks:
        assert k.run.blocked_reason == ENV_FAILURE
        assert notifies(t) == [NotifyRunState(k.run_id, False, ENV_FAILURE)]
        assert pushes(k.tick(1_000)) == [], "a blocked run dispatches nothing"
        assert k.summary().state == "blocked"
        return
    assert k.run.blocked_reason == ""
    [again] = pushes(k.tick(100))
    assert again.generation == 2 and again.cells[0].attempt_id == attempt_id_for(k.run_id, cd.cell_id, 2)
    k.assert_replays()


def test_an_identical_resend_is_a_duplicate_that_changes_nothing():
    k = Core(make_spec(tasks=1, subjects=2))
    [push] = pushes(k.register("w1"))
    tid = push.cells[0].attempt_id
    assert k.report(tid, OK).outcome == ACCEPTED
    before = k.snapshot()
    t = k.report(tid, OK)
    assert t.outcome == DUPLICATE and t.effects == () and t.durable == ()
    assert k.snapshot() == before


@pytest.mark.parametrize("second", [
    pytest.param(make_report(score=0.5), id="another score"),
    pytest.param(make_report(cost_usd=0.02), id="another cost"),
    pytest.param(UNKNOWN, id="other evidence"),
    pytest.param(make_report(detail="again"), id="another detail"),
])
def test_different_content_for_a_reported_attempt_is_a_conflict(second):
    k = Core(make_spec(tasks=1, subjects=2))
    [push] = pushes(k.register("w1"))
    tid = push.cells[0].attempt_id
    k.report(tid, OK)
    before = k.snapshot()
    t = k.report(tid, second)
    assert rejected_with(t, Rejection.CONFLICTING_REPORT) and t.effects == () and t.durable == ()
    assert k.snapshot() == before
    assert k.attempt(tid).report == OK


def _superseded_on_w1():
    """w1 goes silent and expires; its group is redispatched to w2 (generation 2)."""
    k = Core(make_spec(tasks=1, subjects=1))
    [old] = pushes(k.register("w1"))
    k.register("w2")
    k.clock(EXPIRE_MS, alive=("w2",))
    [new_aid] = k.held("w2")
    return k, old.cells[0].attempt_id, k.attempts_of(new_aid)[0]


@pytest.mark.parametrize("order", ["late first", "new first"])
def test_a_superseded_report_is_late_kept_counted_and_never_selected(order):
    k, old_tid, new_tid = _superseded_on_w1()
    late = make_report(score=1.0, cost_usd=0.5)
    fresh = make_report(score=0.0, cost_usd=0.25)
    if order == "new first":
        assert k.report(new_tid, fresh).outcome == ACCEPTED
    t = k.report(old_tid, late)
    assert t.outcome == LATE and durable_types(t) == ["CellReported"] and pushes(t) == []
    assert [e.event for e in emits(t)] == ["late_report"]
    old = k.attempt(old_tid)
    assert old.late and old.report == late
    assert k.run.late_reports == 1
    if order == "late first":
        assert k.cell(old.cell_id).selected is None, "late evidence is not selected even when nothing else is"
        assert k.report(new_tid, fresh).outcome == ACCEPTED
    assert k.cell(old.cell_id).selected == new_tid
    s = k.summary()
    assert s.observed_cost_usd == pytest.approx(0.75) and s.selected_cost_usd == pytest.approx(0.25)
    assert s.late_reports == 1 and s.selected[0].score == 0.0
    # Resent, the late report is acknowledged as late again and changes nothing.
    before = k.snapshot()
    again = k.report(old_tid, late)
    assert again.outcome == LATE and again.durable == () and again.effects == ()
    assert k.snapshot() == before
    k.assert_replays()


@pytest.mark.parametrize("name", ["completed-score-0", "subject-failed-valid-verification"])
def test_a_selected_zero_or_subject_failure_is_a_result_not_a_retry(name):
    report = EVIDENCE[name][0]
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))
    k.report(push.cells[0].attempt_id, report)
    assert k.run.settled and pushes(k.tick(60_000)) == []
    assert k.summary().state == "complete" and k.summary().selected[0].score == 0.0
    assert k.summary().attempts_dispatched == 1


def test_missing_usage_alone_is_selected_with_usage_incomplete():
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))
    k.report(push.cells[0].attempt_id, EVIDENCE["missing-usage-alone"][0])
    s = k.summary()
    assert len(s.selected) == 1 and s.selected[0].usage == "missing" and s.selected[0].cost_usd is None
    assert s.usage_complete is False and s.state == "complete"


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
@pytest.mark.parametrize("failure", ["unknown-execution", "unknown-cleanup", "invalid-verification", "not-started"])
def test_retries_are_bounded_and_exhaustion_is_never_a_score(max_attempts, failure):
    report = EVIDENCE[failure][0]
    k = Core(make_spec(tasks=1, subjects=1), make_policy(max_attempts_per_cell=max_attempts))
    t = k.register("w1")
    dispatches = 0
    while pushes(t):
        [push] = pushes(t)
        dispatches += 1
        t = k.report(push.cells[0].attempt_id, report)
    assert dispatches == max_attempts
    assert [e.event for e in emits(t) if e.event.startswith("cell_exhausted")] == ["cell_exhausted"]
    assert k.run.settled and pushes(k.tick(60_000)) == []
    s = k.summary()
    assert s.selected == () and s.state == "incomplete"
    [inc] = s.incomplete
    assert inc.reason == "exhausted" and inc.attempts == max_attempts


def test_redispatch_carries_only_cells_without_a_selected_result():
    k = Core(make_spec(tasks=1, subjects=3))
    [push] = pushes(k.register("w1"))
    a, b, cc = push.cells
    k.report(a.attempt_id, OK)
    k.report(b.attempt_id, EVIDENCE["completed-score-0"][0])
    t = k.report(cc.attempt_id, UNKNOWN)
    [again] = pushes(t)
    assert [cd.cell_id for cd in again.cells] == [cc.cell_id]
    assert again.cells[0].attempt_id.endswith(":a2")


def test_an_environment_failure_blocks_the_run_until_repaired_with_the_same_reason():
    k = Core(make_spec(tasks=3, subjects=1, cap=2))
    [p0, p1] = pushes(k.register("w1", slots=2))
    t = k.report(p0.cells[0].attempt_id, EVIDENCE["environment-failure"][0])
    assert k.run.blocked_reason == ENV_FAILURE
    assert [e.event for e in emits(t)] == ["cell_retryable", "run_blocked"]
    assert pushes(t) == [], "no new group while blocked, though a slot and the cap allow one"
    # A second environment failure with another reason does not replace the first.
    # Running groups still settle while blocked.
    t = k.report(p1.cells[0].attempt_id, OK)
    assert t.outcome == ACCEPTED and k.cell(p1.cells[0].cell_id).selected == p1.cells[0].attempt_id
    assert pushes(t) == [] and not any(pushes(t) for t in k.clock(5_000, alive=("w1",)))
    assert {i.reason for i in k.summary().incomplete} == {"blocked"}
    wrong = k.repair("some other reason")
    assert rejected_with(wrong, Rejection.REPAIR_REASON_MISMATCH) and ENV_FAILURE in wrong.outcome.detail
    t = k.repair(ENV_FAILURE)
    assert t.outcome == ACCEPTED and durable_types(t) == ["RunRepaired"]
    assert notifies(t) == [NotifyRunState(k.run_id, False, "")]
    assert {p.group_id for p in pushes(t)} == {p0.group_id, k.run.groups[2].group_id}
    assert k.run.blocked_reason == "" and k.summary().state == "running"
    k.assert_replays()


def test_while_blocked_another_environment_failure_keeps_the_first_reason():
    k = Core(make_spec(tasks=2, subjects=1))
    [p0, p1] = pushes(k.register("w1", slots=2))
    k.report(p0.cells[0].attempt_id, EVIDENCE["environment-failure"][0])
    other = make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING, environment_failure="disk full")
    t = k.report(p1.cells[0].attempt_id, other)
    assert t.outcome == ACCEPTED and notifies(t) == []
    assert k.run.blocked_reason == ENV_FAILURE


# --- ArtifactStored ---------------------------------------------------------------------------

def test_artifacts_are_stored_once_and_reports_may_then_reference_them():
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))
    ref, _ = artifact("stdout")
    t = k.store(ref)
    assert t.outcome == ACCEPTED and durable_types(t) == ["ArtifactStored"]
    before = k.snapshot()
    again = k.store(ref)
    assert again.outcome == DUPLICATE and again.durable == () and k.snapshot() == before
    report = make_report(artifacts=(ref,), unavailable=(unavailable(),))
    assert k.report(push.cells[0].attempt_id, report).outcome == ACCEPTED
    assert k.cell(push.cells[0].cell_id).selected == push.cells[0].attempt_id


def test_an_empty_artifact_is_a_valid_artifact():
    k = Core()
    ref, _ = artifact("empty", b"")
    assert k.store(ref).outcome == ACCEPTED and k.state.artifacts[ref.digest] == 0


# --- GroupFinished ----------------------------------------------------------------------------

def test_group_finished_loses_unreported_attempts_and_retries_them():
    k = Core(make_spec(tasks=1, subjects=2))
    [push] = pushes(k.register("w1"))
    a, b = push.cells
    k.report(a.attempt_id, OK)
    t = k.finish(push.assignment_id)
    assert t.outcome == ACCEPTED and durable_types(t) == ["GroupFinished"]
    assert k.attempt(b.attempt_id).lost and not k.attempt(a.attempt_id).lost
    assert k.state.assignments[push.assignment_id].ended_reason == "finished by the worker"
    [again] = pushes(t)
    assert again.generation == 2 and [cd.cell_id for cd in again.cells] == [b.cell_id]
    assert k.summary().lost_attempts == 1
    k.assert_replays()


def test_group_finished_for_an_assignment_no_longer_authoritative_is_a_duplicate():
    k = Core(make_spec(tasks=1, subjects=1))
    [push] = pushes(k.register("w1"))
    k.report_all(push.assignment_id)  # completion already released it
    before = k.snapshot()
    t = k.finish(push.assignment_id)
    assert t.outcome == DUPLICATE and t.durable == () and k.snapshot() == before


# --- RunPaused / RunRecovered -----------------------------------------------------------------

def test_pause_stops_dispatch_lets_running_groups_settle_and_recover_resumes():
    k = Core(make_spec(tasks=3, subjects=1, cap=3))
    [p0] = pushes(k.register("w1"))
    t = k.pause()
    assert t.outcome == ACCEPTED and notifies(t) == [NotifyRunState(k.run_id, True, "")]
    assert k.pause().outcome == DUPLICATE
    assert pushes(k.register("w2")) == [], "no dispatch while paused"
    t = k.report(p0.cells[0].attempt_id, OK)
    assert t.outcome == ACCEPTED and k.cell(p0.cells[0].cell_id).selected and pushes(t) == []
    s = k.summary()
    assert s.state == "paused" and {i.reason for i in s.incomplete} == {"paused"}
    t = k.recover()
    assert t.outcome == ACCEPTED and notifies(t) == [NotifyRunState(k.run_id, False, "")]
    assert len(pushes(t)) == 2 and k.run.recovered_ms == k.now
    k.assert_replays()


# --- CellRetryGranted -------------------------------------------------------------------------

def test_a_retry_grant_reopens_an_exhausted_cell_for_exactly_one_more_attempt():
    k = Core(make_spec(tasks=1, subjects=1), make_policy(max_attempts_per_cell=1))
    [push] = pushes(k.register("w1"))
    cell_id = push.cells[0].cell_id
    k.report(push.cells[0].attempt_id, UNKNOWN)
    assert k.run.settled and k.summary().state == "incomplete"
    t = k.grant(cell_id)
    assert t.outcome == ACCEPTED and durable_types(t) == ["CellRetryGranted"]
    [again] = pushes(t)
    assert again.generation == 2 and again.cells[0].attempt_id.endswith(":a2")
    assert not k.run.settled and k.cell(cell_id).grants == 1
    t = k.report(again.cells[0].attempt_id, UNKNOWN)
    assert pushes(t) == [] and k.run.settled, "one grant, one attempt"
    [third] = pushes(k.grant(cell_id))
    k.report(third.cells[0].attempt_id, OK)
    s = k.summary()
    assert s.state == "complete" and s.selected[0].attempts == 3
    k.assert_replays()


# --- WorkerDrained ----------------------------------------------------------------------------

def test_a_drained_worker_keeps_its_groups_and_gets_no_new_work():
    k = Core(make_spec(tasks=3, subjects=1, cap=3))
    [p0] = pushes(k.register("w1", slots=1))
    t = k.drain("w1")
    assert t.outcome == ACCEPTED and durable_types(t) == ["WorkerDrained"]
    assert WorkerId("w1") not in k.state.free_workers
    assert k.drain("w1").outcome == DUPLICATE
    assert k.state.assignments[p0.assignment_id].authoritative
    t = k.report(p0.cells[0].attempt_id, OK)
    assert t.outcome == ACCEPTED and pushes(t) == []
    assert k.heartbeat("w1").outcome == ACCEPTED
    assert k.held("w1") == [] and WorkerId("w1") not in k.state.free_workers
    assert pushes(k.register("w2", slots=2), "w2"), "other workers take the rest"


# --- WorkerGone -------------------------------------------------------------------------------

def test_a_gone_worker_releases_its_groups_at_once_and_its_reports_are_late():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1", slots=2))
    k.register("w2")
    slots_before = k.state.slots_active
    t = k.gone("w1")
    assert t.outcome == ACCEPTED and durable_types(t) == ["WorkerGone"]
    assert k.worker("w1").status == WorkerStatus.GONE and k.state.slots_active == slots_before - 2
    assert k.state.assignments[p0.assignment_id].ended_reason == "worker gone"
    [again] = pushes(t, "w2")
    assert again.group_id == p0.group_id and again.generation == 2
    assert k.gone("w1").outcome == DUPLICATE
    assert k.report(p0.cells[0].attempt_id, OK).outcome == LATE
    k.assert_replays()


# --- CoordinatorRecovered ---------------------------------------------------------------------

def test_after_a_coordinator_restart_workers_must_say_hello_again():
    k = Core(make_spec(tasks=2, subjects=1))
    [p0] = pushes(k.register("w1"))
    [p1] = pushes(k.register("w2"))
    k.advance(100)
    t = k.coordinator_recovered()
    assert t.outcome == ACCEPTED and durable_types(t) == ["CoordinatorRecovered"]
    assert {w.status for w in k.state.workers.values()} == {WorkerStatus.RECONCILING}
    assert k.state.free_workers == {} and k.state.slots_active == 0
    hb = k.heartbeat("w1")
    assert rejected_with(hb, Rejection.WORKER_NOT_ACTIVE)
    t = k.register("w1", owned=(p0.assignment_id,))
    assert t.outcome == ACCEPTED and k.worker("w1").status == WorkerStatus.ACTIVE
    assert k.state.assignments[p0.assignment_id].authoritative
    assert k.heartbeat("w1").outcome == ACCEPTED
    k.assert_replays()


# --- CoordinatorStalled -----------------------------------------------------------------------

def test_a_stall_of_the_coordinator_expires_nobody_for_the_silence_it_caused():
    k = Core(make_spec(tasks=2, subjects=1), make_policy(group_deadline_ms=EXPIRE_MS))
    [p0] = pushes(k.register("w1"))
    [p1] = pushes(k.register("w2"))
    k.advance(EXPIRE_MS * 3)  # frozen: nobody heard, every deadline passed
    stalled_at = k.now
    t = k.apply(c.CoordinatorStalled(k.now, EXPIRE_MS * 3))
    assert t.outcome == ACCEPTED and durable_types(t) == ["CoordinatorStalled"]
    assert any(getattr(e, "event", "") == "coordinator_stalled" for e in t.effects)
    t = k.tick()
    assert not any(isinstance(d, (c.WorkerExpired, c.WorkerSuspected)) for d in t.durable)
    assert k.state.assignments[p0.assignment_id].authoritative and k.state.assignments[p1.assignment_id].authoritative
    # w1 is heard again; w2 really is gone: it expires once the grace is out, not before.
    ticks = k.clock(stalled_at + RECOVERY_GRACE_MS - 1, alive=("w1",))
    assert not any(isinstance(d, c.WorkerExpired) for t in ticks for d in t.durable)
    ticks = k.clock(stalled_at + RECOVERY_GRACE_MS + HEARTBEAT_MS, alive=("w1",))
    expired = [d.worker_id for t in ticks for d in t.durable if isinstance(d, c.WorkerExpired)]
    assert expired == ["w2"]
    k.assert_replays()


def test_a_stream_that_ends_right_after_a_stall_is_silence_not_a_worker_that_left():
    k = Core(make_spec(tasks=1, subjects=1), make_policy(stream_end_grace_ms=500))
    [p0] = pushes(k.register("w1"))
    k.advance(EXPIRE_MS * 2)
    k.apply(c.CoordinatorStalled(k.now, EXPIRE_MS * 2))
    k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1"), quiet_ms=10))
    ticks = k.clock(k.now + RECOVERY_GRACE_MS - HEARTBEAT_MS)  # well past the 500 ms stream-end grace
    assert not any(isinstance(d, (c.WorkerLost, c.WorkerExpired)) for t in ticks for d in t.durable)
    assert k.state.assignments[p0.assignment_id].authoritative
    k.register("w1", owned=(p0.assignment_id,))  # back: it keeps its group
    assert k.state.assignments[p0.assignment_id].authoritative
    k.assert_replays()


def test_the_recovery_grace_holds_expiry_and_deadlines_off():
    k = Core(make_spec(tasks=2, subjects=1), make_policy(group_deadline_ms=RECOVERY_GRACE_MS // 2))
    [p0] = pushes(k.register("w1"))
    [p1] = pushes(k.register("w2"))
    k.coordinator_recovered()
    recovered_at = k.now
    k.register("w2", owned=(p1.assignment_id,))
    ticks = k.clock(recovered_at + RECOVERY_GRACE_MS - 1, alive=("w2",), every_ms=HEARTBEAT_MS)
    assert not any(isinstance(d, c.WorkerExpired) for t in ticks for d in t.durable)
    assert k.state.assignments[p0.assignment_id].authoritative, "the silent worker is within its grace"
    assert k.state.assignments[p1.assignment_id].authoritative, "deadlines wait out the grace"
    t = k.tick(1)
    assert c.WorkerExpired(recovered_at + RECOVERY_GRACE_MS, WorkerId("w1")) in t.durable
    assert not k.state.assignments[p0.assignment_id].authoritative
    assert not k.state.assignments[p1.assignment_id].authoritative, "the deadline fires once the grace ends"
    k.assert_replays()


@pytest.mark.parametrize("hold", ["coordinator recovered", "run paused", "run recovered"])
def test_overdue_deadlines_that_cannot_release_are_left_in_the_heap_until_they_can(hold, monkeypatch):
    # At a million cells a restart left 40,000 overdue deadlines that every tick of the grace
    # popped and pushed back (60 ms a tick). While none can release, the heap is not touched;
    # once one can, each fires as before.
    k = Core(make_spec(tasks=40, subjects=1, cap=40), make_policy(group_deadline_ms=RECOVERY_GRACE_MS // 4))
    aids = [p.assignment_id for i in range(40) for p in pushes(k.register(f"w{i:02d}"))]
    assert len(aids) == 40
    alive = tuple(f"w{i:02d}" for i in range(40))
    {"coordinator recovered": k.coordinator_recovered, "run paused": k.pause, "run recovered": k.recover}[hold]()
    if hold == "coordinator recovered":
        for wid, aid in zip(alive, aids):
            k.register(wid, owned=(aid,))
    if hold == "run recovered":
        k.pause()
        k.recover()
    pops = []

    class CountingHeapq:  # machine's heapq, counting the pops of the deadlines heap
        def __getattr__(self, name):
            return getattr(heapq, name)

        @staticmethod
        def heappop(h):
            pops.append(h is k.state.deadlines)
            return heapq.heappop(h)

    monkeypatch.setattr(machine, "heapq", CountingHeapq())
    k.clock(k.now + RECOVERY_GRACE_MS // 2, alive=alive)
    assert k.state.deadlines[0][0] < k.now and len(k.state.deadlines) == 40, "every deadline is overdue"
    assert not any(pops), f"{sum(pops)} pops of deadlines that could not release"
    assert all(k.state.assignments[a].authoritative for a in aids)
    if hold == "run paused":
        k.recover()
    k.clock(k.now + RECOVERY_GRACE_MS, alive=alive)
    assert not any(k.state.assignments[a].authoritative for a in aids), "the deadlines fire once they can"
    assert any(pops)
    k.assert_replays()


# --- derived durable commands, applied as on replay -------------------------------------------

@pytest.mark.parametrize("make, status, outcome", [
    pytest.param(lambda w: c.WorkerSuspected(5, w), WorkerStatus.ACTIVE, ACCEPTED, id="suspect an active worker"),
    pytest.param(lambda w: c.WorkerSuspected(5, w), WorkerStatus.SUSPECTED, DUPLICATE, id="suspect twice"),
    pytest.param(lambda w: c.WorkerResumed(5, w), WorkerStatus.SUSPECTED, ACCEPTED, id="resume a suspected worker"),
    pytest.param(lambda w: c.WorkerResumed(5, w), WorkerStatus.ACTIVE, DUPLICATE, id="resume an active worker"),
    pytest.param(lambda w: c.WorkerExpired(5, w), WorkerStatus.SUSPECTED, ACCEPTED, id="expire a suspected worker"),
    pytest.param(lambda w: c.WorkerExpired(5, w), WorkerStatus.RECONCILING, ACCEPTED,
                 id="expire a reconciling worker"),
    pytest.param(lambda w: c.WorkerExpired(5, w), WorkerStatus.ACTIVE, DUPLICATE, id="expire an active worker"),
])
def test_derived_commands_are_idempotent(make, status, outcome):
    k = Core()
    k.register("w1")
    if status == WorkerStatus.SUSPECTED:
        k.disconnect("w1")
    elif status == WorkerStatus.RECONCILING:
        k.coordinator_recovered()
    before = k.snapshot()
    t = k.apply(make(WorkerId("w1")))
    assert t.outcome == outcome
    if outcome == DUPLICATE:
        assert t.durable == () and t.effects == () and k.snapshot() == before
    k.assert_replays()


def test_time_advanced_with_nothing_due_is_not_logged():
    k = Core()
    k.register("w1")
    before = k.snapshot()
    t = k.apply(c.TimeAdvanced(50))
    assert t.outcome == ACCEPTED and t.durable == () and k.snapshot() == before


# --- several runs on one coordinator ----------------------------------------------------------

def _second_run(k: Core, task_prefix: str = "u"):
    spec = make_spec(tasks=1, subjects=1, name="second", task_prefix=task_prefix)
    run_id = run_id_for(spec.canonical, k.policy.canonical())
    return run_id, k.apply(c.RunSubmitted(k.now, run_id, spec, k.policy))


def test_a_second_run_is_dispatched_after_the_first_in_submission_order():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1", slots=2))
    other, t = _second_run(k)
    [p1] = pushes(t)
    assert (p0.run_id, p1.run_id) == (k.run_id, other) and p1.worker_id == "w1"
    k.report(p0.cells[0].attempt_id, OK)
    k.report(p1.cells[0].attempt_id, OK)
    assert k.run.settled and k.state.runs[other].settled
    k.assert_replays()


def test_a_settled_paused_run_does_not_freeze_expiry_for_another_run():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1"))
    k.pause()
    k.report(p0.cells[0].attempt_id, OK)  # the paused run settles: nothing of it is running
    assert k.run.settled and k.run.paused
    other, t = _second_run(k)
    [p1] = pushes(t, "w1")
    k.register("w2")
    # w1 falls silent holding the second run's group; w2 heartbeats and could take it over.
    ticks = k.clock(EXPIRE_MS + HEARTBEAT_MS, alive=("w2",))
    assert any(isinstance(d, c.WorkerExpired) and d.worker_id == "w1" for t in ticks for d in t.durable)
    assert k.held("w2") and k.state.assignments[k.held("w2")[0]].run_id == other


def test_the_monitor_tells_the_cells_of_two_runs_apart():
    k = Core(make_spec(tasks=1, subjects=1))
    [p0] = pushes(k.register("w1", slots=2))
    k.report(p0.cells[0].attempt_id, OK)
    # Same cell ids ("t0/r1/s0") in another run: a valid state, checked by a fresh monitor
    # that has seen the first run's selection.
    monitor = Monitor()
    assert monitor.observe(k.state) == []
    spec = make_spec(tasks=1, subjects=1, name="second")
    other = run_id_for(spec.canonical, k.policy.canonical())
    k.state, _ = step(k.state, c.RunSubmitted(k.now, other, spec, k.policy))
    assert monitor.observe(k.state) == []


def test_a_whole_run_drives_to_completion_and_replays():
    k = Core(make_spec(tasks=3, subjects=2, repetitions=2, cap=3))
    k.register("w1", slots=2)
    k.register("w2", slots=2)
    k.drive_to_completion()
    s = k.summary()
    assert s.state == "complete" and len(s.selected) == 12 and s.peak_concurrent_groups == 3
    k.assert_replays()


def test_a_cell_out_of_attempts_is_granted_while_its_group_runs_another_of_its_cells():
    """A bulk retry grants the cells of one group one by one: the first grant dispatches the
    group with that cell alone, and the second cell's grant joins the group's next dispatch."""
    k = Core(make_spec(tasks=1, subjects=2), make_policy(max_attempts_per_cell=1))
    [p0] = pushes(k.register("w1"))
    k.report_all(p0.assignment_id, UNKNOWN)
    assert k.run.settled
    a, b = (cell.cell_id for cell in p0.cells)
    assert k.grant(a).outcome == ACCEPTED
    [running] = [x for x in k.state.assignments.values() if x.authoritative]
    assert [k.attempt(t).cell_id for t in running.attempts] == [a]
    assert rejected_with(k.grant(a), Rejection.CELL_NOT_INCOMPLETE), "a is running"
    assert k.grant(b).outcome == ACCEPTED
    k.report_all(running.assignment_id, OK)
    [again] = [x for x in k.state.assignments.values() if x.authoritative]
    assert [k.attempt(t).cell_id for t in again.attempts] == [b]
    k.report_all(again.assignment_id, OK)
    assert k.run.settled and k.run.selected_cells == 2
    k.assert_replays()
