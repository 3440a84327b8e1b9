"""A broken worker is quarantined, not fed (issue 23): a worker whose attempts fail fast (a
full disk, a missing tool) beside one whose attempts succeed is quarantined at the next tick
(a logged WorkerQuarantined), the attempts of its streak are given back to their cells (none
is exhausted by it), it is probed again after the backoff, and an operator can lift it. A
streak that no other worker contradicts is the run's problem: cells run out as before."""
from __future__ import annotations

from common.evidence import Cleanup, Execution, Usage, Verification
from common.ids import WorkerId
from coordinator.core import commands as c
from coordinator.core.state import GroupStatus, WorkerStatus, counted_attempts
from tests.unit.core_helpers import HEARTBEAT_MS, OK, Core, make_policy, make_report, make_spec

FAILED = make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING, Cleanup.CONFIRMED,
                     detail="cannot create the output dir: No space left on device")
BOUND = 3
BACKOFF_MS = 5_000


def held_by(k: Core, wid: str) -> list:
    return [a for a in k.state.assignments.values() if a.authoritative and a.worker_id == wid]


def fail_until_streak(k: Core, wid: str = "bad", n: int = BOUND) -> None:
    while len(k.worker(wid).streak) < n:
        [a] = held_by(k, wid)
        k.report_all(a.assignment_id, FAILED)


def black_hole_beside_a_healthy_worker(tick: bool = True, tasks: int = 12) -> Core:
    """`good` has produced a selectable report; `bad` has failed BOUND attempts in a row since."""
    k = Core(make_spec(tasks=tasks, subjects=1), make_policy(quarantine_after_failures=BOUND,
                                                         quarantine_backoff_ms=BACKOFF_MS, max_attempts_per_cell=3))
    k.register("good")
    [a] = held_by(k, "good")
    k.report_all(a.assignment_id, OK)
    k.register("bad")
    fail_until_streak(k)
    if tick:
        k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
    return k


def test_a_worker_failing_where_another_succeeds_is_quarantined_and_its_attempts_given_back():
    k = black_hole_beside_a_healthy_worker(tick=False)
    streak = list(k.worker("bad").streak)
    burned: dict[str, int] = {}
    for t in streak:
        burned[k.attempt(t).cell_id] = burned.get(k.attempt(t).cell_id, 0) + 1
    counted = {cid: counted_attempts(k.run.cells[cid]) for cid in burned}
    t = k.tick()
    assert c.WorkerQuarantined(k.now, WorkerId("bad")) in t.durable
    bad = k.worker("bad")
    assert bad.quarantined_until_ms == k.now + BACKOFF_MS and "No space left on device" in bad.quarantine_reason
    assert "bad" not in k.state.free_workers
    # The group it claimed before the tick fails too, and is given back at once.
    for a in held_by(k, "bad"):
        [tid] = k.attempts_of(a.assignment_id)
        cell = k.run.cells[k.attempt(tid).cell_id]
        before = counted_attempts(cell)
        k.report(tid, FAILED)
        assert counted_attempts(cell) == before - 1 and cell.forgiven >= 1
    assert held_by(k, "bad") == [], "no new work while quarantined"
    for cid, n in burned.items():
        assert k.run.cells[cid].forgiven == n and counted_attempts(k.run.cells[cid]) == counted[cid] - n
    assert any(getattr(e, "event", "") == "worker_quarantined" for e in t.effects)
    k.assert_replays()


def test_the_run_completes_on_the_healthy_worker_and_no_cell_is_exhausted_by_the_broken_one():
    k = black_hole_beside_a_healthy_worker()
    rounds = 0
    while not k.run.settled and rounds < 200:
        rounds += 1
        for a in held_by(k, "good"):
            k.report_all(a.assignment_id, OK)
        for a in held_by(k, "bad"):  # probed after its backoff: fails again
            k.report_all(a.assignment_id, FAILED)
        k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
    assert k.run.settled and k.run.selected_cells == 12
    k.assert_replays()


def test_a_probe_that_fails_quarantines_again_for_twice_as_long_and_a_success_clears_it():
    k = black_hole_beside_a_healthy_worker(tasks=40)
    first = k.worker("bad").quarantined_until_ms
    k.clock(first, alive=("good", "bad"))
    bad = k.worker("bad")
    assert bad.quarantined_until_ms == 0 and bad.probation
    if not held_by(k, "bad"):  # the good worker may have taken the ready group first
        [a] = held_by(k, "good")
        k.report_all(a.assignment_id, OK)
    [a] = held_by(k, "bad")
    k.report_all(a.assignment_id, FAILED)
    k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
    assert bad.quarantined_until_ms == k.now + 2 * BACKOFF_MS  # doubled
    k.clock(bad.quarantined_until_ms, alive=("good", "bad"))
    while not held_by(k, "bad"):
        [a] = held_by(k, "good")
        k.report_all(a.assignment_id, OK)
    [a] = held_by(k, "bad")
    k.report_all(a.assignment_id, OK)
    assert not bad.probation and bad.quarantines == 0 and bad.streak == []
    k.assert_replays()


def test_an_operator_lifts_a_quarantine():
    k = black_hole_beside_a_healthy_worker()
    assert k.worker("bad").quarantined_until_ms
    t = k.apply(c.WorkerReleased(k.now, WorkerId("bad")))
    assert t.outcome.ok and k.worker("bad").quarantined_until_ms == 0 and not k.worker("bad").probation
    assert held_by(k, "bad"), "free again: it takes work at once"
    k.assert_replays()


def test_a_streak_no_other_worker_contradicts_is_the_runs_problem_and_cells_run_out():
    k = Core(make_spec(tasks=2, subjects=1), make_policy(quarantine_after_failures=BOUND, max_attempts_per_cell=2))
    k.register("a")
    k.register("b")
    for _ in range(50):
        if k.run.settled:
            break
        for a in [x for x in k.state.assignments.values() if x.authoritative]:
            k.report_all(a.assignment_id, FAILED)
        k.clock(k.now + HEARTBEAT_MS, alive=("a", "b"))
    assert k.run.settled and k.run.selected_cells == 0
    assert not any(w.quarantined_until_ms for w in k.state.workers.values())


def test_quarantine_off_with_a_zero_bound():
    k = Core(make_spec(tasks=12, subjects=1), make_policy(quarantine_after_failures=0))
    k.register("good")
    [a] = held_by(k, "good")
    k.report_all(a.assignment_id, OK)
    k.register("bad")
    for _ in range(5):
        [a] = held_by(k, "bad")
        k.report_all(a.assignment_id, FAILED)
    k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
    assert not k.worker("bad").quarantined_until_ms


def test_a_subject_that_fails_on_every_worker_quarantines_nobody_and_its_cells_run_out():
    """The other subjects succeed on every worker, but one subject fails everywhere (its tool is
    broken, its provider down): that is the run's problem, not a worker's. Without this rule
    every worker was quarantined in turn, the failing cells got their attempts back for ever, and
    the run never settled (found by tests/integration/test_report_chromium.py)."""
    k = Core(make_spec(tasks=6, subjects=2), make_policy(quarantine_after_failures=2, max_attempts_per_cell=2,
                                                        quarantine_backoff_ms=BACKOFF_MS))
    for wid in ("a", "b"):
        k.register(wid)
    for _ in range(200):
        if k.run.settled:
            break
        for a in [x for x in k.state.assignments.values() if x.authoritative]:
            for tid in k.attempts_of(a.assignment_id):
                k.report(tid, OK if k.attempt(tid).cell_id.endswith("/s0") else FAILED)
        k.clock(k.now + HEARTBEAT_MS, alive=("a", "b"))
    assert k.run.settled and k.run.selected_cells == 6
    assert not any(w.quarantined_until_ms or w.quarantines for w in k.state.workers.values())
    assert all(cell.forgiven == 0 for cell in k.run.cells.values())
    k.assert_replays()


def test_a_black_holes_failures_of_a_subject_that_first_succeeds_after_its_quarantine_are_given_back_then():
    """Found by `python -m tools.sim --seed 3364 --check --providers --faults ops,stall,blackhole`:
    at the quarantine, subject s1 had not succeeded anywhere yet (its provider was slow), so the
    black hole's failures of it stayed counted, as a broken subject's are, and one exhausted its
    cell; s1's first success came half a second later. They wait now, and that success gives them
    back: every cell the black hole failed runs again on the healthy worker."""
    k = Core(make_spec(tasks=8, subjects=2), make_policy(quarantine_after_failures=BOUND, max_attempts_per_cell=1,
                                                        quarantine_backoff_ms=60_000))
    k.register("good")
    [first] = held_by(k, "good")
    s0, s1 = sorted(k.attempts_of(first.assignment_id), key=lambda tid: k.attempt(tid).cell_id)
    k.report(s0, OK)  # s0 has succeeded; good's s1 cell runs on
    k.register("bad")
    quarantined = []
    for _ in range(20):
        for a in held_by(k, "bad"):
            k.report_all(a.assignment_id, FAILED)
        quarantined += [d for t in k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
                        for d in t.durable if isinstance(d, c.WorkerQuarantined)]
        if quarantined:
            break
    assert quarantined and k.worker("bad").quarantined_until_ms
    burned = [k.run.cells[cid] for cid in {k.attempt(t).cell_id for t in k.state.attempts
                                            if k.attempt(t).worker_id == "bad" and k.attempt(t).reported}]
    of_s1 = [cell for cell in burned if cell.subject_id == "s1"]
    assert of_s1 and all(counted_attempts(cell) == 1 and cell.selected is None for cell in of_s1), \
        "s1 never succeeded: its failures stay counted at the quarantine"
    assert sorted(k.run.withheld) == ["s1"]
    t = k.report(s1, OK)  # s1's first success
    assert not k.run.withheld and all(cell.forgiven == 1 for cell in of_s1)
    assert held_by(k, "good"), "the free slot takes a reopened group at once"
    for _ in range(200):
        if k.run.settled:
            break
        for a in held_by(k, "good"):
            k.report_all(a.assignment_id, OK)
        for a in held_by(k, "bad"):  # what it claimed before the quarantine fails too
            k.report_all(a.assignment_id, FAILED)
        k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
    assert k.run.settled and k.run.selected_cells == 16, k.run.selected_cells
    k.assert_replays()


# --- a group handed back before it started counts for nothing --------------------------------

def test_a_group_handed_back_unstarted_costs_its_cells_no_attempt():
    """A group pushed to a worker that is draining (stopped by its host, the push already on its
    way) is handed back before any cell starts (GroupFinished "not_started"): nothing ran, so
    none of its cells loses an attempt. Before, each lost one: with maxAttemptsPerCell 1, the
    whole group ended exhausted without ever running. The word is not taken from an assignment
    that reported a cell."""
    from tests.unit.core_helpers import Core, make_policy, make_spec

    k = Core(make_spec(tasks=2, subjects=2), make_policy(max_attempts_per_cell=1))
    k.register("w1")
    [a] = held_by(k, "w1")
    cells = [k.run.cells[k.attempt(t).cell_id] for t in k.attempts_of(a.assignment_id)]
    t = k.apply(c.GroupFinished(k.now, WorkerId("w1"), a.assignment_id, unstarted=True))
    assert t.outcome.ok and all(cell.forgiven == 1 and counted_attempts(cell) == len(cell.attempts) - 1
                                for cell in cells)
    group = k.run.groups[cells[0].group_index]
    assert group.status != GroupStatus.SETTLED, "its cells ran out of attempts without running"
    [again] = held_by(k, "w1")  # the freed slot takes it (or the other group) at once
    tids = k.attempts_of(again.assignment_id)
    k.report(tids[0], OK)  # a cell of it ran: "not started" is not its word
    k.apply(c.GroupFinished(k.now, WorkerId("w1"), again.assignment_id, unstarted=True))
    other = k.run.cells[k.attempt(tids[1]).cell_id]
    assert counted_attempts(other) == len(other.attempts) - other.forgiven and k.attempt(tids[1]).lost
    assert other.forgiven == (1 if other in cells else 0), "a group that reported a cell was forgiven"
    k.assert_replays()


def test_the_wire_says_not_started_and_a_full_disk_as_the_commands_hear_them():
    """The servicer's codec: GroupFinished.reason "not_started" (and only it) makes the command
    unstarted; Hello.degraded is carried, cut to the id bound as a heartbeat's is."""
    from common import limits
    from common.fleetpb import coordinator_pb2
    from coordinator import codec

    def finished(reason: str) -> c.GroupFinished:
        body = coordinator_pb2.GroupFinished(assignment_id="run-1:t0/r1:g1", reason=reason)
        return codec.frame_command("group_finished", body, WorkerId("w1"), 1)(5)

    assert finished("not_started").unstarted
    assert not finished("handed_back").unstarted and not finished("completed").unstarted
    hello = coordinator_pb2.Hello(worker_id="w1", incarnation=1, slots=1, environment_id="env",
                                  degraded="d" * (limits.ID_CHARS_MAX + 50))
    assert codec.hello_command(WorkerId("w1"), hello, ())(5).degraded == "d" * limits.ID_CHARS_MAX


# --- a worker whose disk is full says so and gets no work ------------------------------------

def test_a_worker_whose_disk_is_full_gets_no_work_until_its_heartbeat_says_it_has_room():
    from tests.unit.core_helpers import Core, make_policy, make_spec, pushes, durable_types

    k = Core(make_spec(tasks=4, subjects=1), make_policy())
    k.register("full", slots=1)
    k.register("ok", slots=1)
    first = {wid: k.held(wid)[0] for wid in ("full", "ok")}
    t = k.apply(c.HeartbeatReceived(k.now, WorkerId("full"), tuple(k.held("full")), "the disk is full"))
    assert durable_types(t) == ["WorkerDegraded"] and k.worker("full").degraded == "the disk is full"
    assert "full" not in k.state.free_workers
    # It keeps what it holds; when that group ends, nothing new goes to it, all to the other.
    k.report_all(first["full"])
    assert k.held("full") == []
    for _ in range(3):
        aid = k.held("ok")[0] if k.held("ok") else None
        if aid is None:
            break
        t_all = k.report_all(aid)
        assert not any(pushes(x, "full") for x in t_all)
    assert k.held("full") == []
    # Room again: the next heartbeat says so and it gets work at once.
    t = k.apply(c.HeartbeatReceived(k.now, WorkerId("full"), (), ""))
    assert "WorkerDegraded" in durable_types(t) and k.worker("full").degraded == ""
    assert k.run.settled or pushes(t, "full")
    # The same word twice decides nothing.
    assert durable_types(k.apply(c.HeartbeatReceived(k.now, WorkerId("full"), tuple(k.held("full")), ""))) == []
    k.assert_replays()


def test_a_hello_that_says_the_disk_is_full_registers_the_worker_without_work():
    """The hello says it too (Hello.degraded): a coordinator that had not heard of the full disk
    (restored from an older backup, or the worker's first stream) dispatches it nothing at the
    registration; a later hello or heartbeat with room gives it work at once."""
    from common.rejections import Rejection
    from coordinator.core.state import durable_fingerprint
    from tests.unit.core_helpers import Core, make_policy, make_spec, pushes

    k = Core(make_spec(tasks=4, subjects=1), make_policy())
    t = k.register("full", slots=1, degraded="the disk is full")
    assert t.outcome.ok and k.worker("full").degraded == "the disk is full"
    assert pushes(t) == [] and k.held("full") == [] and "full" not in k.state.free_workers
    assert any(getattr(e, "event", "") == "worker_degraded" for e in t.effects)
    before = durable_fingerprint(k.state)
    t = k.register("full", slots=1, incarnation=2, degraded="x" * 10_000)
    assert t.outcome.rejection == Rejection.MALFORMED_FRAME and durable_fingerprint(k.state) == before
    t = k.register("full", slots=1, incarnation=2)  # a new process, with room: its word stands
    assert k.worker("full").degraded == "" and [p.worker_id for p in pushes(t)] == ["full"]
    assert any(getattr(e, "event", "") == "worker_undegraded" for e in t.effects)
    k.assert_replays()


def test_a_suspected_worker_whose_heartbeat_says_its_disk_is_full_is_resumed_without_work():
    """Found by `python -m tools.sim --seeds 0-299 --check --faults ops` (the operator and full
    disks): the heartbeat's resume filled the worker's free slot before its word of a full disk
    took it off the free list, so a group went to a worker that could not start it."""
    from tests.unit.core_helpers import SUSPECT_MS, Core, make_policy, make_spec, pushes, durable_types

    k = Core(make_spec(tasks=4, subjects=1), make_policy())
    k.pause()  # groups wait while the worker goes quiet
    k.register("full", slots=1)
    k.clock(k.now + 2 * SUSPECT_MS)
    assert k.worker("full").status == WorkerStatus.SUSPECTED
    assert k.recover().outcome.ok and k.held("full") == []
    t = k.apply(c.HeartbeatReceived(k.now, WorkerId("full"), (), "the disk is full"))
    assert t.outcome.ok and k.worker("full").status == WorkerStatus.ACTIVE
    assert k.worker("full").degraded == "the disk is full"
    assert pushes(t) == [] and k.held("full") == [], "a group went to a worker whose disk is full"
    assert durable_types(t) == ["WorkerDegraded", "WorkerResumed"]
    t = k.apply(c.HeartbeatReceived(k.now, WorkerId("full"), (), ""))  # room again: work at once
    assert [p.worker_id for p in pushes(t)] == ["full"]
    k.assert_replays()


def test_a_quarantined_worker_with_a_slot_open_is_off_the_free_list_by_every_checker():
    """The simulation's incremental monitor had its own idea of "free" without quarantine and
    degradation, and failed the million-cell scale run (`python -m tools.sim --scale --seed 42
    --check`: "worker w5245 free-list membership is wrong") where the core was right."""
    from coordinator.core.invariants import check
    from tools.sim.invariants import IncrementalMonitor

    k = black_hole_beside_a_healthy_worker()
    for a in held_by(k, "bad"):
        k.report_all(a.assignment_id, FAILED)
    bad = k.worker("bad")
    assert bad.quarantined_until_ms and len(bad.assignments) < bad.slots
    assert not bad.free and "bad" not in k.state.free_workers
    problems: list[str] = []
    IncrementalMonitor()._worker(k.state, "bad", problems)
    assert problems == []
    assert check(k.state) == []
    bad.degraded = "disk full"
    bad.quarantined_until_ms = 0
    assert not bad.free
    IncrementalMonitor()._worker(k.state, "bad", problems)
    assert problems == []
