"""A coordinator restored from a backup loses its log's tail, not the results its workers kept:
the core takes a restore up once (a new epoch that every id issued afterwards carries), holds
dispatch until the workers it knows are back and have offered what they kept, adopts an offered
result whose run and cell match and whose cell has none (so that cell is not paid for again),
keeps every other offer as evidence that counts against nothing, and refuses malformed offers
and restores with a typed reason that changes nothing."""
from __future__ import annotations

import copy

import pytest

from common import limits
from common.ids import attempt_id_for, cell_of_attempt
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core.effects import ACCEPTED, DUPLICATE, LATE, OutcomeKind, RevokeAssignment
from coordinator.core.machine import ANSWERED_BY_OFFERS
from coordinator.core.invariants import Monitor
from coordinator.core.state import GroupStatus, durable_fingerprint
from tests.unit.core_helpers import OK, UNKNOWN, Core, make_policy, make_spec, pushes

TASKS = 6


def _kept(k: Core, aid) -> list[c.ResultOffered]:
    """What a worker keeps of an assignment once its reports are acknowledged."""
    a = k.state.assignments[aid]
    return [c.ResultOffered(0, a.worker_id, tid, aid, a.generation, k.attempt(tid).report) for tid in a.attempts]


def _finish(k: Core, aid) -> list[c.ResultOffered]:
    kept = _kept(k, aid)
    for t in k.report_all(aid, OK):
        assert t.outcome.ok
    return [c.ResultOffered(0, o.worker_id, o.attempt_id, o.assignment_id, o.generation, OK) for o in kept]


def _restored(k: Core, log: list, *, backup_id: str = "b1", epoch: str = "e1") -> Core:
    """A coordinator started on a backup whose log is `log`, at `k`'s time."""
    r = Core(k.spec, k.policy, submit=False)
    r.log = list(log)
    r.state = r.replay()
    r.now = k.now + 1_000  # the restore comes later than anything the backup holds
    r.monitor = Monitor()
    assert r.apply(c.CoordinatorRecovered(r.now)).outcome.ok
    t = r.apply(c.CoordinatorRestored(r.now, backup_id, epoch))
    assert t.outcome == ACCEPTED, t.outcome
    return r


def _tick(r: Core, ms: int):
    """Time passes with every registered worker heard from."""
    r.advance(ms)
    for wid in list(r.state.workers):
        r.heartbeat(wid)
    return r.tick()


def _complete(r: Core) -> None:
    for _ in range(200):
        if r.run.settled:
            return
        for a in [a for a in r.state.assignments.values() if a.authoritative]:
            r.report_all(a.assignment_id, OK)
        _tick(r, limits.RESTORE_OFFER_WINDOW_MS)
    raise AssertionError("the run did not settle")


def _offer(r: Core, o: c.ResultOffered):
    return r.apply(c.ResultOffered(r.now, o.worker_id, o.attempt_id, o.assignment_id, o.generation, o.report))


def _run_to_backup_and_on(**policy) -> tuple[Core, list, list[c.ResultOffered]]:
    """Two groups done before the backup, two done after it (acknowledged, then lost)."""
    k = Core(make_spec(tasks=TASKS, subjects=1), make_policy(**policy))
    k.register("w1", slots=2)
    for aid in k.held("w1"):
        _finish(k, aid)
    backup = list(k.log)
    after: list[c.ResultOffered] = []
    for aid in k.held("w1"):
        after.extend(_finish(k, aid))
    assert k.run.selected_cells == 4
    return k, backup, after


def test_a_restore_adopts_what_workers_kept_and_runs_only_the_rest_under_a_new_epoch():
    k, backup, after = _run_to_backup_and_on()
    r = _restored(k, backup)
    assert r.run.selected_cells == 2 and r.state.epoch == "e1"
    # The worker is back: dispatch waits for its offers (the window), so nothing is pushed yet.
    t = r.register("w1", slots=2, incarnation=1)
    assert t.outcome.ok and pushes(t) == []
    assert r.now < r.state.restore_hold_until_ms <= r.now + limits.RESTORE_OFFER_WINDOW_MS
    for o in after:
        t = _offer(r, o)
        assert t.outcome == ACCEPTED, t.outcome
        assert r.attempt(o.attempt_id).recovered and r.cell(cell_of_attempt(r.run_id, o.attempt_id)).selected == o.attempt_id
    assert r.run.selected_cells == 4
    assert sum(g.status == GroupStatus.SETTLED for g in r.run.groups) == 4
    # The window over, only the two groups nobody ran are dispatched, with ids of the new epoch.
    pushed = []
    for _ in range(100):  # the window, then the retry backoff of the groups released at the return
        pushed = pushes(_tick(r, limits.RESTORE_OFFER_WINDOW_MS))
        if pushed:
            break
    assert len(pushed) == 2
    for p in pushed:
        assert ":ee1:g" in p.assignment_id
        assert all(":ee1:a" in cell.attempt_id for cell in p.cells)
    _complete(r)
    assert r.run.settled and r.run.selected_cells == TASKS
    adopted = {o.attempt_id for o in after}
    for cell in r.run.cells.values():
        if cell.selected in adopted:
            assert cell.attempts == [cell.selected], "an adopted cell ran again"
    r.assert_replays()


def test_an_offer_for_a_cell_with_a_result_is_evidence_that_counts_against_nothing():
    k, backup, after = _run_to_backup_and_on()
    r = _restored(k, backup)
    r.register("w1", slots=2)
    _complete(r)  # the lost groups ran again before their offers came
    before = {cid: (list(cell.attempts), cell.selected) for cid, cell in r.run.cells.items()}
    for o in after:
        t = _offer(r, o)
        assert t.outcome == LATE, t.outcome
        cid = cell_of_attempt(r.run_id, o.attempt_id)
        cell = r.cell(cid)
        assert cell.selected == before[cid][1] and r.attempt(o.attempt_id).late
        assert r.run.attempts_left(cell) or cell.selected is not None
    assert r.run.late_reports == len(after)
    r.assert_replays()


def test_an_offer_the_coordinator_still_knows_is_an_ordinary_report():
    k, backup, after = _run_to_backup_and_on()
    o = after[0]
    t = k.apply(c.ResultOffered(k.now, o.worker_id, o.attempt_id, o.assignment_id, o.generation, o.report))
    assert t.outcome == DUPLICATE


def test_a_failed_attempt_offered_is_kept_as_evidence_not_counted():
    k = Core(make_spec(tasks=2, subjects=1), make_policy())
    k.register("w1", slots=1)
    backup = list(k.log)
    aid = k.held("w1")[0]
    tid = k.attempts_of(aid)[0]
    k.report(tid, UNKNOWN)
    r = _restored(k, backup)
    r.register("w1", slots=1)
    t = r.apply(c.ResultOffered(r.now, "w1", tid, aid, 1, UNKNOWN))
    assert t.outcome == LATE
    cell = r.cell(cell_of_attempt(r.run_id, tid))
    assert cell.selected is None and r.run.attempts_left(cell)
    r.assert_replays()


def test_bad_offers_and_restores_are_refused_and_change_nothing():
    k, backup, after = _run_to_backup_and_on()
    r = _restored(k, backup)
    r.register("w1", slots=2)
    o = after[0]
    cases = [
        (c.ResultOffered(r.now, "nobody", o.attempt_id, o.assignment_id, o.generation, OK), Rejection.UNKNOWN_WORKER),
        (c.ResultOffered(r.now, "w1", "run-0000000000000000:t0/r0/s0:a1", o.assignment_id, 1, OK),
         Rejection.UNKNOWN_RUN),
        (c.ResultOffered(r.now, "w1", f"{r.run_id}:no-such-cell:a9", o.assignment_id, 1, OK), Rejection.UNKNOWN_CELL),
        (c.ResultOffered(r.now, "w1", f"{r.run_id}:garbage", o.assignment_id, 1, OK), Rejection.UNKNOWN_CELL),
        (c.ResultOffered(r.now, "w1", o.attempt_id, f"{r.run_id}:other/r0:g1", 1, OK), Rejection.GENERATION_MISMATCH),
        (c.CoordinatorRestored(r.now, "", "e2"), Rejection.MALFORMED_FRAME),
        (c.CoordinatorRestored(r.now, "b2", "not an epoch"), Rejection.MALFORMED_FRAME),
        (c.CoordinatorRestored(r.now, "b2", "e1"), Rejection.MALFORMED_FRAME),
    ]
    for cmd, reason in cases:
        before = durable_fingerprint(r.state)
        t = r.apply(cmd)
        assert t.outcome.kind == OutcomeKind.REJECTED and t.outcome.rejection == reason, (cmd, t.outcome)
        assert durable_fingerprint(r.state) == before
    assert r.apply(c.CoordinatorRestored(r.now, "b1", "e9")).outcome == DUPLICATE  # taken up once


def test_an_offer_before_the_worker_measured_the_run_is_asked_again():
    k, backup, after = _run_to_backup_and_on()
    r = _restored(k, backup)
    r.auto_measure = False
    r.register("w1", slots=2)
    t = _offer(r, after[0])
    assert t.outcome.kind == OutcomeKind.REJECTED and t.outcome.rejection == Rejection.NOT_YET_MEASURED
    r.measure("w1")
    assert _offer(r, after[0]).outcome == ACCEPTED


def test_the_hold_ends_by_the_recovery_grace_when_a_worker_never_comes_back():
    k, backup, _after = _run_to_backup_and_on(recovery_grace_ms=60_000)
    k.register("w2", slots=1)
    r = _restored(k, k.log[:len(backup)] + [x for x in k.log[len(backup):] if isinstance(x, c.WorkerRegistered)])
    r.register("w1", slots=2)
    assert r.state.restore_hold_until_ms > r.now + limits.RESTORE_OFFER_WINDOW_MS  # w2 is awaited
    hold = r.state.restore_hold_until_ms
    assert not pushes(_tick(r, hold - 1 - r.now))
    assert any(pushes(_tick(r, 1000)) for _ in range(100)), "dispatch resumes once the grace is over"


def test_two_restores_of_one_backup_never_issue_the_same_id():
    k, backup, _after = _run_to_backup_and_on()
    seen: set[str] = set()
    for epoch in ("a1", "b2"):
        r = _restored(copy.deepcopy(k), backup, backup_id="b1", epoch=epoch)
        r.register("w1", slots=2)
        _complete(r)
        issued = {tid for tid in r.state.attempts if f":e{epoch}:" in tid}
        assert issued and not issued & seen
        seen |= issued
    assert attempt_id_for(k.run_id, "t/r0/s", 1, "x9") == f"{k.run_id}:t/r0/s:ex9:a1"
    assert cell_of_attempt(k.run_id, f"{k.run_id}:t/r0/s:ex9:a1") == "t/r0/s"
    assert cell_of_attempt(k.run_id, f"{k.run_id}:t/r0/s:a12") == "t/r0/s"


def test_a_result_offered_for_a_run_the_backup_never_pinned_pins_it_to_the_offering_worker():
    """A backup taken before the run's first dispatch holds no pin: the adopted result's worker
    fixes it, as that dispatch did (found by `python -m tools.sim --seed 2014 --check --providers
    --faults stall,restore`: a selected result with no pin)."""
    k = Core(make_spec(tasks=TASKS, subjects=1), make_policy())
    backup = list(k.log)  # the submit alone
    k.register("w1", slots=2)
    after: list[c.ResultOffered] = []
    for aid in k.held("w1"):
        after.extend(_finish(k, aid))
    r = _restored(k, backup)
    assert r.run.pin is None and r.run.selected_cells == 0
    r.register("w1", slots=2, incarnation=1)
    t = _offer(r, after[0])
    assert t.outcome == ACCEPTED, t.outcome
    assert r.run.selected_cells == 1
    assert r.run.pin is not None and r.run.pin == r.state.workers["w1"].fits[r.run_id].components
    assert r.run.pinned_by == "w1"
    assert any(e.event == "run_pinned" for e in t.effects if hasattr(e, "event"))
    for o in after[1:]:
        assert _offer(r, o).outcome == ACCEPTED
    _complete(r)
    assert r.run.settled and r.run.selected_cells == TASKS
    r.assert_replays()


@pytest.mark.parametrize("offered", ["selectable", "failed"])
def test_an_offer_for_a_run_the_backup_never_pinned_waits_for_the_workers_measurement(offered):
    """With no pin (lost with the log's tail), an offer that came before the worker measured the
    run on its new stream was taken all the same: a failure offered so became an attempt of a
    worker that had not measured the run (the core's invariant, `python -m tools.sim --seed 2014
    --check --providers --faults ops,restore`). It is asked again, as with a pin."""
    from tests.unit.test_core_quarantine import FAILED

    k = Core(make_spec(tasks=TASKS, subjects=1), make_policy())
    backup = list(k.log)  # the submit alone
    k.register("w1", slots=2)
    after: list[c.ResultOffered] = []
    for aid in k.held("w1"):
        kept = _kept(k, aid)
        k.report_all(aid, OK if offered == "selectable" else FAILED)
        after.extend(c.ResultOffered(0, o.worker_id, o.attempt_id, o.assignment_id, o.generation,
                                     k.attempt(o.attempt_id).report) for o in kept)
    r = _restored(k, backup)
    assert r.run.pin is None
    r.auto_measure = False
    r.register("w1", slots=2, incarnation=1)
    t = _offer(r, after[0])
    assert t.outcome.kind == OutcomeKind.REJECTED and t.outcome.rejection == Rejection.NOT_YET_MEASURED, t.outcome
    assert after[0].attempt_id not in r.state.attempts and r.run.pin is None, "a refused offer changed the state"
    r.measure("w1")
    assert _offer(r, after[0]).outcome == (ACCEPTED if offered == "selectable" else LATE)
    r.assert_replays()


def test_a_kept_result_of_a_run_that_settled_without_it_is_adopted_when_its_worker_returns():
    """Found by `python -m tools.sim --seed 9066 --check --faults ops,stall,blackhole,restore`:
    the worker that kept a result the restore lost was partitioned through the restore and came
    back after the run had settled (its attempt counted lost, the cell out of attempts). A
    settled run was never offered to a worker, so it never measured it, and its offer was asked
    again for ever. After a restore, a run with a cell without a result is offered too: the
    worker measures it, and its result is adopted."""
    from coordinator.core.effects import OfferRun
    from tests.unit.core_helpers import HEARTBEAT_MS

    k = Core(make_spec(tasks=2, subjects=1), make_policy(max_attempts_per_cell=1))
    k.register("w1", slots=1)
    [aid] = k.held("w1")
    backup = list(k.log)  # w1's group dispatched; its report is in the lost tail
    [kept] = _finish(k, aid)
    r = _restored(k, backup)
    r.register("w2", slots=1)
    for _ in range(400):  # w1 stays away: it expires, its attempt is lost, w2 runs the rest
        if r.run.settled:
            break
        for a in r.held("w2"):
            r.report_all(a, OK)
        r.advance(HEARTBEAT_MS)
        r.heartbeat("w2")
        r.tick()
    cell = r.cell(cell_of_attempt(r.run_id, kept.attempt_id))
    assert r.run.settled and cell.selected is None, "the cell did not end without a result"
    t = r.register("w1", slots=1, incarnation=2)
    assert [e.run_id for e in t.effects if isinstance(e, OfferRun)] == [r.run_id], "the run was not offered"
    t = _offer(r, kept)
    assert t.outcome == ACCEPTED, t.outcome
    assert cell.selected == kept.attempt_id and r.run.selected_cells == 2 and r.run.settled
    r.assert_replays()


def test_a_restore_rebuilds_a_broken_workers_streak_from_its_offers_and_gives_each_attempt_back_once():
    """A black hole's streak lives in the log's tail: a restore loses it with the reports. The
    worker offers its failures back in the order it had them, they rebuild the streak, and the
    next tick after another worker succeeds quarantines it again. Its attempt that the backup
    holds (counted as lost at its return) is given back; the ones known only from the offers,
    forgiven when offered, are not given back twice (found by `python -m tools.sim --seed 1157
    --check --faults stall,blackhole,restore`: a cell exhausted by the black hole)."""
    from tests.unit.test_core_quarantine import BOUND, FAILED

    k = Core(make_spec(tasks=12, subjects=1), make_policy(quarantine_after_failures=BOUND,
                                                          quarantine_backoff_ms=5_000, max_attempts_per_cell=3))
    held = lambda core, wid: [a.assignment_id for a in core.state.assignments.values()  # noqa: E731
                              if a.authoritative and a.worker_id == wid]
    k.register("good", slots=1)
    for aid in held(k, "good"):
        k.report_all(aid, OK)
    k.register("bad", slots=1)
    backup = list(k.log)  # bad holds one group: that attempt is in the backup, its report is not
    in_backup = k.attempts_of(held(k, "bad")[0])[0]
    offers: list[c.ResultOffered] = []
    while len(k.worker("bad").streak) < BOUND:
        [aid] = held(k, "bad")
        k.report_all(aid, FAILED)
        offers.extend(_kept(k, aid))
    assert [o.attempt_id for o in offers] == k.worker("bad").streak and offers[0].attempt_id == in_backup

    r = _restored(k, backup)
    assert r.worker("bad").streak == []
    r.register("good", slots=1, incarnation=1)
    r.register("bad", slots=1, incarnation=1)
    for o in offers:
        assert _offer(r, o).outcome == LATE
    assert r.worker("bad").streak == [o.attempt_id for o in offers]
    cells = {r.cell(cell_of_attempt(r.run_id, o.attempt_id)).cell_id: r.cell(cell_of_attempt(r.run_id, o.attempt_id))
             for o in offers}
    # Before the quarantine only the backup's attempt counts: the offered-only ones were forgiven.
    assert sum(len(cell.attempts) - cell.forgiven for cell in cells.values()) == 1
    quarantined = []
    for _ in range(20):  # the offer window, then good runs a group and succeeds
        t = _tick(r, limits.RESTORE_OFFER_WINDOW_MS)
        quarantined += [d for d in t.durable if isinstance(d, c.WorkerQuarantined)]
        if quarantined:
            break
        for aid in held(r, "good"):
            r.report_all(aid, OK)
    assert [q.worker_id for q in quarantined] == ["bad"], "the rebuilt streak did not quarantine the black hole"
    for cell in cells.values():  # each of bad's failures given back, and only once
        offered = [o.attempt_id for o in offers if o.attempt_id in cell.attempts]
        assert cell.forgiven == len(offered), (cell.cell_id, cell.attempts, cell.forgiven)
    r.assert_replays()


def test_a_failure_offered_by_a_quarantined_worker_is_given_back_once():
    """The backup holds the black hole quarantined; after it, a probe failed (that attempt is in
    the log's tail). Offered to the restored core while the worker is still quarantined there,
    the failure is forgiven as an offer, and not a second time as a quarantined worker's."""
    from coordinator.core.state import counted_attempts
    from tests.unit.test_core_quarantine import FAILED, black_hole_beside_a_healthy_worker, held_by
    from tests.unit.core_helpers import HEARTBEAT_MS

    k = black_hole_beside_a_healthy_worker(tasks=40)
    first = k.worker("bad").quarantined_until_ms
    assert first
    for held in held_by(k, "bad"):  # the group it claimed before the quarantine fails too
        k.report_all(held.assignment_id, FAILED)
    backup = list(k.log)
    k.clock(first, alive=("good", "bad"))
    while not held_by(k, "bad"):  # the good worker may have taken the ready group first
        k.report_all(held_by(k, "good")[0].assignment_id, OK)
    [a] = held_by(k, "bad")
    k.report_all(a.assignment_id, FAILED)
    [offer] = _kept(k, a.assignment_id)
    k.clock(k.now + HEARTBEAT_MS, alive=("good", "bad"))
    assert k.worker("bad").quarantined_until_ms > first, "the probe's failure did not quarantine it again"

    r = _restored(k, backup)
    assert r.worker("bad").quarantined_until_ms == first  # not yet probed in the restored core
    r.register("bad", slots=1, incarnation=1)
    cell = r.cell(cell_of_attempt(r.run_id, offer.attempt_id))
    counted, forgiven = counted_attempts(cell), cell.forgiven
    assert _offer(r, offer).outcome == LATE
    assert offer.attempt_id in cell.attempts and len(cell.attempts) > 1
    assert cell.forgiven == forgiven + 1 and counted_attempts(cell) == counted, (cell.forgiven, forgiven)
    r.assert_replays()


def test_a_failure_given_back_at_its_offer_reopens_the_cell_its_loss_had_exhausted():
    """Found by `python -m tools.sim --seed 1281 --check --faults ops,stall,blackhole,restore`:
    the backup holds a black hole quarantined, with a group it claimed before. Back after the
    restore without it, the group is released and its attempt counted lost, which exhausts the
    cell. Then the worker offers that attempt's failure, a quarantined worker's own, given back:
    the cell has an attempt again, so its group waits again (it stayed settled with a cell to
    run), and the healthy worker takes it at once."""
    from tests.unit.test_core_quarantine import BOUND, FAILED, fail_until_streak, held_by
    from tests.unit.core_helpers import HEARTBEAT_MS

    k = Core(make_spec(tasks=8, subjects=1), make_policy(quarantine_after_failures=BOUND, quarantine_backoff_ms=60_000,
                                                         max_attempts_per_cell=1))
    k.register("good")
    k.report_all(held_by(k, "good")[0].assignment_id, OK)
    k.register("bad")
    fail_until_streak(k)
    k.clock(k.now + HEARTBEAT_MS, alive=("bad",))  # good is busy: it claims nothing more
    assert k.worker("bad").quarantined_until_ms
    [claimed] = held_by(k, "bad")  # claimed after its last failure, before the quarantine
    backup = list(k.log)
    k.report_all(claimed.assignment_id, FAILED)
    [offer] = _kept(k, claimed.assignment_id)

    r = _restored(k, backup)
    assert r.worker("bad").quarantined_until_ms
    r.register("bad", slots=1, incarnation=1)  # it holds nothing: its attempt was lost
    cell = r.cell(cell_of_attempt(r.run_id, offer.attempt_id))
    group = r.run.groups[cell.group_index]
    assert group.status == GroupStatus.SETTLED and cell.selected is None, "the lost attempt did not exhaust the cell"
    r.register("good", slots=1, incarnation=1, owned=tuple(r.held("good")))  # still running its group
    t = _offer(r, offer)
    assert t.outcome == LATE, t.outcome
    assert cell.forgiven == 1 and group.status != GroupStatus.SETTLED, "given back, but its group stayed settled"
    _complete(r)
    assert r.run.settled and r.run.selected_cells == 8 and cell.selected is not None
    r.assert_replays()


def _redispatched_before_the_offers(k: Core, backup: list, after: list[c.ResultOffered]) -> tuple[Core, dict]:
    """`k` restored on `backup` with w1 (which kept `after`) not back yet: once the hold is over
    (the recovery grace), w2 runs again the groups `after` answers. Returns the restored core and
    each such cell's assignment on w2."""
    r = _restored(k, backup)
    r.register("w2", slots=1)
    for _ in range(100):
        if r.held("w2"):
            break
        _tick(r, 1000)
    again = {r.attempt(t).cell_id: aid for aid in r.held("w2") for t in r.attempts_of(aid)}
    assert again and set(again) <= {cell_of_attempt(r.run_id, o.attempt_id) for o in after}
    return r, again


@pytest.mark.parametrize("last", ["offer", "report"])
def test_offers_that_answer_every_cell_a_new_attempt_runs_revoke_it_and_refill_its_slot(last):
    """Found in stop 45's seed 2360 (`python -m tools.sim --seed 2360 --check --providers --faults
    stall,restore`): an offer adopted after the hold for a cell whose group was dispatched again
    left the new attempt running, to be paid for and then kept as evidence. Once every cell an
    assignment still runs has a result (the `last` answer an offer, or a report of the assignment
    itself; seed 2014 has the second), it is revoked and its slot takes the next group."""
    k = Core(make_spec(tasks=3, subjects=2), make_policy(recovery_grace_ms=5_000))
    backup = list(k.log)  # the submit alone
    k.register("w1", slots=3)
    after: list[c.ResultOffered] = []
    for aid in k.held("w1"):
        after.extend(_finish(k, aid))
    r, again = _redispatched_before_the_offers(k, backup, after)
    (aid,) = set(again.values())  # one group of two cells, both running on w2
    r.register("w1", slots=1, incarnation=1)  # back after the hold: it takes a group of its own
    assert len(r.held("w1")) == 1
    first, second = [o for o in after if cell_of_attempt(r.run_id, o.attempt_id) in again]
    t = _offer(r, first)
    assert t.outcome == ACCEPTED, t.outcome
    assert not [e for e in t.effects if isinstance(e, RevokeAssignment)], "a cell it runs is still unanswered"
    assert r.state.assignments[aid].authoritative
    if last == "offer":
        t = _offer(r, second)
    else:
        cell_id = cell_of_attempt(r.run_id, second.attempt_id)
        (own,) = [tid for tid in r.attempts_of(aid) if r.attempt(tid).cell_id == cell_id]
        t = r.report(own, OK)  # w2's own attempt at the other cell
    assert t.outcome == ACCEPTED, t.outcome
    assert [(e.worker_id, e.assignment_id, e.reason) for e in t.effects if isinstance(e, RevokeAssignment)] \
        == [("w2", aid, ANSWERED_BY_OFFERS)]
    assert not r.state.assignments[aid].authoritative and aid not in r.held("w2")
    assert r.group_of(aid).status == GroupStatus.SETTLED
    assert [p.worker_id for p in pushes(t)] == ["w2"], "the freed slot takes the waiting group at once"
    for tid in r.attempts_of(aid):  # what w2 reports of it before the revoke reaches it is evidence
        if not r.attempt(tid).reported:
            assert r.report(tid, OK).outcome == LATE
    assert r.cell(cell_of_attempt(r.run_id, first.attempt_id)).selected == first.attempt_id
    if last == "report":
        assert _offer(r, second).outcome == LATE, "the cell has w2's result"
    _complete(r)
    assert r.run.settled and r.run.selected_cells == 6
    r.assert_replays()
