"""Snapshots encoded in a forked child while the actor keeps committing: each one decodes to
exactly the fold of the log up to its index, and recovery from the store (snapshot + tail)
equals a full replay of every record ever committed; method: a real Store in a temp dir, a
real Actor with a short snapshot interval, a run driven to completion through it."""
from __future__ import annotations

import threading
from pathlib import Path

from common.ids import AttemptId, WorkerId
from coordinator.actor import Actor, Request, recover
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import OfferRun, PushAssignment
from coordinator.core.state import durable_fingerprint
from coordinator.logcodec import decode_record
from coordinator.snapshot import decode_state
from coordinator.store import Store
from tests.unit.core_helpers import ENV, OK, make_policy, make_spec

SNAPSHOT_EVERY = 40
PART_BYTES = 4_096  # several parts per snapshot, as a large state has
WAIT_S = 30


def fold(records: list[bytes]):
    state = new_state()
    for data in records:
        state, t = step(state, decode_record(data)[1])
        assert t.outcome.ok
    return state


def test_snapshots_taken_while_committing_recover_to_a_full_replay(tmp_path: Path) -> None:
    store = Store.open(tmp_path, snapshot_every=SNAPSHOT_EVERY)
    committed: list[bytes] = []
    snapshots: list[tuple[int, bytes]] = []
    timings: list[dict] = []
    append, write_snapshot = store.append, store.write_snapshot

    def spy_append(records):
        committed.extend(records)
        return append(records)

    def spy_snapshot(index, data):
        snapshots.append((index, data))
        return write_snapshot(index, data)

    parts: dict[int, list[bytes]] = {}
    write_part, finish = store.write_snapshot_part, store.finish_snapshot

    def spy_part(index, part, data):
        assert part == len(parts.setdefault(index, []))
        parts[index].append(data)
        return write_part(index, part, data)

    def spy_finish(index, n, total, crc):
        snapshots.append((index, b"".join(parts[index])))
        return finish(index, n, total, crc)

    store.append, store.write_snapshot = spy_append, spy_snapshot  # type: ignore[method-assign]
    store.write_snapshot_part, store.finish_snapshot = spy_part, spy_finish  # type: ignore[method-assign]
    pushes: list[PushAssignment] = []
    lock = threading.Lock()

    def deliver(batch) -> None:
        for done, value in batch.completions:
            done(value)

    actor = Actor(store, new_state(), 0, deliver=deliver, tick_ms=0, on_snapshot=timings.append,
                  snapshot_part_bytes=PART_BYTES)
    actor.start()

    def apply(make) -> object:
        got = threading.Event()
        box: list = []

        def done(t) -> None:
            with lock:
                pushes.extend(e for e in t.effects if isinstance(e, PushAssignment))
            box.append(t)
            got.set()

        actor.submit(Request(make=make, done=done))
        assert got.wait(WAIT_S)
        return box[0]

    spec, policy = make_spec(tasks=120, subjects=3, cap=8), make_policy()
    from common.ids import run_id_for
    run_id = run_id_for(spec.canonical, policy.canonical())
    assert apply(lambda now: c.RunSubmitted(now, run_id, spec, policy)).outcome.ok
    for i in range(4):
        t = apply(lambda now, i=i: c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 2, ENV))
        for offer in [e for e in t.effects if isinstance(e, OfferRun)]:  # measured as the right build would
            assert apply(lambda now, o=offer: c.RunEnvironmentMeasured(now, o.worker_id, 1, o.run_id, ())).outcome.ok
    for _ in range(10_000):
        with lock:
            if not pushes:
                break
            push = pushes.pop(0)
        for cell in push.cells:
            t = apply(lambda now, p=push, a=cell.attempt_id: c.CellReported(
                now, p.worker_id, AttemptId(a), p.assignment_id, p.generation, OK))
            assert t.outcome.ok, t.outcome
    actor.stop()
    store.close()

    forked = [t for t in timings if t["in_child"]]
    assert len(forked) >= 2, timings  # a snapshot due while a child still encodes waits: fewer under load
    assert all(t["parts"] > 1 for t in forked), "stored in parts, one transaction each"
    assert any(t["behind"] > 0 for t in forked), "no commit happened while a child encoded"
    for index, data in snapshots:
        assert durable_fingerprint(decode_state(data)) == durable_fingerprint(fold(committed[:index])), index
    with Store.open(tmp_path, snapshot_every=SNAPSHOT_EVERY) as again:
        state, index = recover(again)
    assert index == len(committed)
    full = fold(committed)
    assert full.runs[run_id].settled
    assert durable_fingerprint(state) == durable_fingerprint(full)
