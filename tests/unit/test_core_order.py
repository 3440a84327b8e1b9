"""Dispatch order from history and the stream-end grace, through the pure core: table-driven
runs with the `Core` harness (invariants after every step), checking which group goes next,
what the log records, and that replay rebuilds the state exactly."""
from __future__ import annotations

import pytest

from common import limits
from common.ids import WorkerId, run_id_for
from common.spec import parse_spec
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import OutcomeKind
from coordinator.core.order import group_durations
from coordinator.core.state import WorkerStatus, durable_fingerprint
from tests.unit.core_helpers import (
    EXPIRE_MS,
    HEARTBEAT_MS,
    OK,
    UNKNOWN,
    Core,
    durable_types,
    make_policy,
    make_spec,
    pushes,
    revokes,
    spec_doc,
)


def _finish_run(k: Core, durations_ms: dict[str, int]) -> None:
    """Run the harness's run on one single-slot worker, each group taking its duration."""
    k.register("w1")
    while not k.run.settled:
        [aid] = k.held("w1")
        task = k.group_of(aid).group_id.split("/")[0]
        k.advance(durations_ms.get(task, 10))
        k.report_all(aid)


def _second_run(k: Core, *, tasks: list[str], order_from: str, **policy):
    doc = spec_doc(tasks=len(tasks), subjects=2)
    doc["tasks"] = [{"id": t} for t in tasks]
    spec = parse_spec(doc)
    pol = make_policy(order_from=order_from, **policy)
    run_id = run_id_for(spec.canonical, pol.canonical())
    return run_id, k.apply(c.RunSubmitted(k.now, run_id, spec, pol, k.manifest, k.worker_keys))


def _dispatch_order(k: Core, run_id: str, wid: str = "w1") -> list[str]:
    """Drive a run to the end on the single-slot worker; the group ids in dispatch order."""
    seen = []
    while not k.state.runs[run_id].settled:
        [aid] = k.held(wid)
        a = k.state.assignments[aid]
        seen.append(k.state.runs[run_id].groups[a.group_index].group_id)
        k.advance(5)
        k.report_all(aid)
    return seen


def test_groups_go_longest_first_unknown_first_ties_in_spec_order() -> None:
    k = Core(make_spec(tasks=4, subjects=1))
    _finish_run(k, {"t0": 100, "t1": 400, "t2": 100, "t3": 250})
    assert group_durations(k.state, k.run)[("t1", 1)] == 400
    run2, t = _second_run(k, tasks=["t0", "t1", "t2", "t3", "new"], order_from=k.run_id)
    assert t.outcome.kind == OutcomeKind.ACCEPTED
    [logged] = t.durable
    assert logged.order == (4, 1, 3, 0, 2)  # new (unknown) first; t0 and t2 tie: spec order
    assert _dispatch_order(k, run2) == ["new/r1", "t1/r1", "t3/r1", "t0/r1", "t2/r1"]
    k.assert_replays()


def test_history_of_only_some_groups_still_orders_the_rest_first() -> None:
    k = Core(make_spec(tasks=2, subjects=1))
    _finish_run(k, {"t0": 50, "t1": 300})
    run2, t = _second_run(k, tasks=["a", "t0", "b", "t1"], order_from=k.run_id)
    assert t.outcome.kind == OutcomeKind.ACCEPTED
    assert _dispatch_order(k, run2) == ["a/r1", "b/r1", "t1/r1", "t0/r1"]


def test_the_order_is_frozen_in_the_log_not_recomputed_from_the_earlier_run() -> None:
    k = Core(make_spec(tasks=3, subjects=1), make_policy(max_attempts_per_cell=1))
    k.register("w1")
    for took in (100, 300, 200):
        [aid] = k.held("w1")
        k.advance(took)
        k.report_all(aid, UNKNOWN if took == 300 else OK)  # t1 exhausts: its report still counts
    assert k.run.settled
    run2, t = _second_run(k, tasks=["t0", "t1", "t2"], order_from=k.run_id, max_attempts_per_cell=1)
    assert t.durable[0].order == (1, 2, 0)
    # Reopening the earlier run (a retry grant) changes what a recomputation would see...
    k.apply(c.CellRetryGranted(k.now, k.run_id, "t1/r1/s0"))
    assert not k.run.settled
    # ...but replay reads the logged order, so it rebuilds exactly.
    k.assert_replays()
    replayed = new_state()
    for cmd in k.log:
        replayed, _ = step(replayed, cmd)
    assert replayed.runs[run2].order == (1, 2, 0)
    # Submitting the same run again is a duplicate, even though its history is in progress now.
    again = k.apply(c.RunSubmitted(k.now, run2, k.state.runs[run2].spec, k.state.runs[run2].policy,
                                   k.manifest, k.worker_keys))
    assert again.outcome.kind == OutcomeKind.DUPLICATE


def test_a_retried_group_rejoins_at_its_rank_and_selection_is_unchanged() -> None:
    k = Core(make_spec(tasks=3, subjects=1))
    _finish_run(k, {"t0": 10, "t1": 30, "t2": 20})
    run2, _ = _second_run(k, tasks=["t0", "t1", "t2"], order_from=k.run_id)
    [aid] = k.held("w1")
    assert k.state.runs[run2].groups[k.state.assignments[aid].group_index].group_id == "t1/r1"
    # t1 fails once (subjects 2): it is retried before t2 and t0, which rank below it.
    k.report_all(aid, UNKNOWN)
    [aid] = k.held("w1")
    assert k.state.runs[run2].groups[k.state.assignments[aid].group_index].group_id == "t1/r1"
    k.assert_replays()


def test_an_ordered_run_selects_what_the_unordered_run_selects() -> None:
    reports = {"t0": OK, "t1": UNKNOWN, "t2": OK}

    def drive(k: Core, run_id: str, wid: str) -> dict:
        failed: dict[str, int] = {}
        while not k.state.runs[run_id].settled:
            [aid] = k.held(wid)
            run = k.state.runs[run_id]
            task = run.groups[k.state.assignments[aid].group_index].group_id.split("/")[0]
            k.advance({"t0": 10, "t1": 20, "t2": 30}[task])
            first = failed.setdefault(task, 0) == 0
            failed[task] += 1
            k.report_all(aid, reports[task] if first else OK)
        run = k.state.runs[run_id]
        return {cid: (len(cell.attempts), k.state.attempts[cell.selected].report if cell.selected else None)
                for cid, cell in run.cells.items()}

    k = Core(make_spec(tasks=3, subjects=2))
    k.register("w1")
    plain = drive(k, k.run_id, "w1")
    run2, _ = _second_run(k, tasks=["t0", "t1", "t2"], order_from=k.run_id)
    assert k.state.runs[run2].order not in ((), (0, 1, 2))
    assert drive(k, run2, "w1") == plain


# --- the stream-end grace ---------------------------------------------------------------------

GRACE_MS = 600


def _worker_with_a_group(**policy) -> Core:
    k = Core(make_spec(tasks=3, subjects=1), make_policy(stream_end_grace_ms=GRACE_MS, **policy))
    k.register("w1")
    k.register("w2")
    k.advance(10)
    return k


def test_a_stream_that_ended_starts_the_grace_and_its_groups_go_back_when_it_ends() -> None:
    k = _worker_with_a_group()
    [aid] = k.held("w1")
    t = k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    assert durable_types(t) == ["WorkerSuspected"]
    assert k.worker("w1").status == WorkerStatus.SUSPECTED
    assert k.held("w1") == [aid]  # nothing redispatched yet
    ticks = k.clock(k.now + GRACE_MS - HEARTBEAT_MS, alive=("w2",))
    assert all("WorkerLost" not in durable_types(t) for t in ticks)
    ticks = k.clock(k.now + HEARTBEAT_MS, alive=("w2",))
    assert any("WorkerLost" in durable_types(t) for t in ticks), "lost at the end of the grace, not at expiry"
    assert k.worker("w1").status == WorkerStatus.EXPIRED
    assert k.held("w1") == []
    assert k.state.assignments[aid].ended_reason.startswith("worker lost")
    assert k.now < EXPIRE_MS
    k.assert_replays()


def test_a_worker_back_within_the_grace_keeps_its_groups_and_nothing_runs_twice() -> None:
    k = _worker_with_a_group()
    [aid] = k.held("w1")
    k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    k.clock(k.now + GRACE_MS // 2, alive=("w2",))
    # The restarted process has the report in its outbox: it keeps the group.
    t = k.register("w1", incarnation=2, buffered=k.attempts_of(aid))
    assert revokes(t) == [] and k.held("w1") == [aid]
    ticks = k.clock(k.now + 2 * GRACE_MS, alive=("w1", "w2"))
    assert all("WorkerLost" not in durable_types(t) for t in ticks)
    k.report_all(aid)
    cell = k.cell(k.attempt(k.attempts_of(aid)[0]).cell_id)
    assert len(cell.attempts) == 1 and cell.selected == k.attempts_of(aid)[0]
    k.assert_replays()


def test_a_heartbeat_read_from_the_ended_stream_does_not_end_the_grace() -> None:
    k = _worker_with_a_group()
    k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    t = k.heartbeat("w1")
    assert t.durable == () and k.worker("w1").status == WorkerStatus.SUSPECTED
    ticks = k.clock(k.now + GRACE_MS, alive=("w2",))
    assert any("WorkerLost" in durable_types(t) for t in ticks)


def test_silence_keeps_suspicion_and_expiry() -> None:
    k = _worker_with_a_group()
    ticks = k.clock(EXPIRE_MS + HEARTBEAT_MS, alive=("w2",))
    kinds = [d for t in ticks for d in durable_types(t)]
    assert "WorkerExpired" in kinds and "WorkerLost" not in kinds


def test_a_stream_end_after_silence_is_the_transport_noticing_it_not_news() -> None:
    k = _worker_with_a_group()
    # Nothing came through the stream for the keepalive's ping timeout: the keepalive ended it.
    t = k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1"), quiet_ms=limits.STREAM_END_QUIET_MS_MAX))
    assert durable_types(t) == ["WorkerSuspected"]
    ticks = k.clock(k.now + GRACE_MS + HEARTBEAT_MS, alive=("w2",))
    assert k.now < EXPIRE_MS
    assert all("WorkerLost" not in durable_types(t) for t in ticks)
    assert k.held("w1"), "expiry, not the grace, decides for a silent worker"


def test_a_grace_of_zero_treats_a_stream_end_as_silence() -> None:
    k = Core(make_spec(tasks=3, subjects=1), make_policy(stream_end_grace_ms=0))
    k.register("w1")
    k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    ticks = k.clock(EXPIRE_MS - HEARTBEAT_MS)
    assert all("WorkerLost" not in durable_types(t) for t in ticks)


def test_a_paused_run_freezes_the_grace_like_expiry() -> None:
    k = _worker_with_a_group()
    k.pause()
    k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    ticks = k.clock(k.now + 3 * GRACE_MS, alive=("w2",))
    assert all("WorkerLost" not in durable_types(t) for t in ticks)


def test_goodbye_then_stream_end_is_gone_not_lost() -> None:
    k = _worker_with_a_group()
    k.gone("w1")
    t = k.apply(c.WorkerStreamEnded(k.now, WorkerId("w1")))
    assert t.durable == () and k.worker("w1").status == WorkerStatus.GONE
    assert durable_fingerprint(k.replay()) == k.fingerprint()


@pytest.mark.parametrize("status", ["expired", "gone"])
def test_worker_lost_is_a_duplicate_for_a_worker_no_longer_suspected(status: str) -> None:
    k = _worker_with_a_group()
    if status == "gone":
        k.gone("w1")
    else:
        k.clock(EXPIRE_MS + HEARTBEAT_MS, alive=("w2",))
    t = k.apply(c.WorkerLost(k.now, WorkerId("w1")))
    assert t.outcome.kind == OutcomeKind.DUPLICATE and t.durable == ()
    assert pushes(t) == []
