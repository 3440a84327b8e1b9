"""Snapshots encoded in a forked child while the actor keeps committing: each one decodes to
exactly the fold of the log up to its index, and recovery from the store (snapshot + tail)
equals a full replay of every record ever committed, also after a child that died mid-way
through streaming its parts; method: a real Store in a temp dir, a
real Actor with a short snapshot interval, a run driven to completion through it."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.ids import AttemptId, RunId, WorkerId, run_id_for
from common.limits import SNAPSHOT_CHILD_NICE
from coordinator import actor as actor_module
from coordinator.actor import Actor, Request
from coordinator.recovery import recover
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import OfferRun, PushAssignment
from coordinator.core.state import durable_fingerprint
from coordinator.logcodec import decode_record
from coordinator.snapshot import decode_state
from coordinator.store import DB_SNAP_PARTS, Store, index_key
from tests.unit.core_helpers import ENV, OK, make_policy, make_spec
from tests.unit.test_store_parts import keys

SNAPSHOT_EVERY = 40
PART_BYTES = 4_096  # several parts per snapshot, as a large state has
WAIT_S = 30


def fold(records: list[bytes]):
    state = new_state()
    for data in records:
        state, t = step(state, decode_record(data)[1])
        assert t.outcome.ok
    return state


def settled(actor: Actor) -> None:
    """Wait until no snapshot is being encoded (the snapshot process takes a few hundred ms to
    start; the run is driven faster than that)."""
    deadline = time.monotonic() + WAIT_S
    while actor._snapshot_pending is not None:
        assert time.monotonic() < deadline, "a snapshot process did not finish"
        time.sleep(0.01)


def drive(store: Store, timings: list[dict]) -> RunId:
    """A run driven to completion through a real actor on `store`; the actor is stopped."""
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
    run_id = RunId(run_id_for(spec.canonical, policy.canonical()))
    assert apply(lambda now: c.RunSubmitted(now, run_id, spec, policy)).outcome.ok
    for i in range(4):
        t = apply(lambda now, i=i: c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 2, ENV))
        for offer in [e for e in t.effects if isinstance(e, OfferRun)]:  # measured as the right build would
            assert apply(lambda now, o=offer: c.RunEnvironmentMeasured(now, o.worker_id, 1, o.run_id, ())).outcome.ok
    groups = 0
    for _ in range(10_000):
        with lock:
            if not pushes:
                break
            push = pushes.pop(0)
        for cell in push.cells:
            t = apply(lambda now, p=push, a=cell.attempt_id: c.CellReported(
                now, p.worker_id, AttemptId(a), p.assignment_id, p.generation, OK))
            assert t.outcome.ok, t.outcome
        groups += 1
        if groups % 20 == 0:
            settled(actor)  # the snapshot process started meanwhile has finished (or failed)
    settled(actor)
    actor.stop()
    return run_id


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
    run_id = drive(store, timings)
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


def test_a_child_that_dies_midway_leaves_no_snapshot_and_compaction_deletes_its_parts(
        tmp_path: Path, monkeypatch) -> None:
    # Parts go to the store as the process sends them, so one that dies after a few has left
    # parts without a manifest: never loaded, deleted by the compaction steps. Failed processes
    # are started again a few times; the snapshots after that are encoded on the actor thread
    # and recover exactly.
    monkeypatch.setattr(actor_module, "SNAPSHOTTER_MODULE", "tests.unit.snapshotter_dies")
    store = Store.open(tmp_path, snapshot_every=SNAPSHOT_EVERY)
    committed: list[bytes] = []
    append = store.append

    def spy_append(records):
        committed.extend(records)
        return append(records)

    written: list[tuple[int, int]] = []
    write_part = store.write_snapshot_part

    def spy_part(index, part, data):
        written.append((index, part))
        return write_part(index, part, data)

    store.append, store.write_snapshot_part = spy_append, spy_part  # type: ignore[method-assign]
    timings: list[dict] = []
    run_id = drive(store, timings)
    stored = {t["index"] for t in timings} | {store.snapshot_indexes[-1]}  # and the stop's own
    failed = {index for index, _ in written} - stored
    # Each process streamed parts, then died; after SNAPSHOT_PROCESS_FAILURES_MAX in a row the
    # actor stopped starting them and wrote the parts itself.
    assert len(failed) == actor_module.SNAPSHOT_PROCESS_FAILURES_MAX, written
    assert len(written) >= 3 * len(failed), written
    assert timings and not any(t["in_child"] for t in timings), timings  # then: on the actor thread
    assert all(t["parts"] == sum(1 for i, _ in written if i == t["index"]) for t in timings), (timings, written)
    assert not failed & set(store.snapshot_indexes)
    store.close()
    assert not any(k[:8] == index_key(i) for k in keys(tmp_path, DB_SNAP_PARTS) for i in failed), \
        "the dead child's parts were deleted"
    with Store.open(tmp_path, snapshot_every=SNAPSHOT_EVERY) as again:
        state, index = recover(again)
    assert index == len(committed)
    full = fold(committed)
    assert full.runs[run_id].settled
    assert durable_fingerprint(state) == durable_fingerprint(full)


def test_the_snapshot_process_yields_the_cores_and_runs_without_the_collector() -> None:
    # It must not take a core from the coordinator (slot refill waits for it), and it builds
    # one state and exits: no collection is worth its walk.
    probe = ("import gc, os, sys; from coordinator import snapshotter; snapshotter.prepare(os.getppid()); "
             "print(os.nice(0), gc.isenabled())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=WAIT_S,
                         cwd=Path(__file__).resolve().parents[2], check=True).stdout.split()
    assert out == [str(min(19, os.nice(0) + SNAPSHOT_CHILD_NICE)), "False"], out
    assert gc.isenabled()  # the caller's collector is untouched


def test_a_filtered_setpriority_leaves_the_snapshot_process_at_work() -> None:
    # The shipped unit filters @resources (it adds setpriority back); where setpriority is
    # refused, the process says so and goes on at the coordinator's priority.
    probe = ("import gc, os; from coordinator import snapshotter\n"
             "def refuse(_): raise PermissionError(1, 'Operation not permitted')\n"
             "os.nice = refuse; snapshotter.prepare(os.getppid()); print(gc.isenabled())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=WAIT_S,
                          cwd=Path(__file__).resolve().parents[2], check=True)
    assert done.stdout.split() == ["False"], done
    assert "runs at the coordinator's priority" in done.stderr, done.stderr


class _Said:
    """The actor's log, recorded: the events it said, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __getattr__(self, level: str):
        return lambda event, **_: self.events.append(event)


def test_a_snapshot_process_that_would_not_fit_is_skipped_then_tried_again_when_there_is_room(
        tmp_path: Path, monkeypatch) -> None:
    # Short of memory, the actor encodes on its own thread and says so once; when the room
    # comes back (another process exited, the cache was dropped) it starts snapshot processes
    # again and says that once. Either way each snapshot recovers exactly.
    judged: list[bool] = []
    short = 3  # the first three judgements find no room

    def room() -> int:
        judged.append(len(judged) >= short)
        return (1 << 40) if judged[-1] else 8 << 20

    monkeypatch.setattr(actor_module.headroom, "room_bytes", room)
    monkeypatch.setattr(actor_module.headroom, "own_anonymous_bytes", lambda: 100 << 20)
    said = _Said()
    monkeypatch.setattr(actor_module, "log", said)
    store = Store.open(tmp_path, snapshot_every=SNAPSHOT_EVERY)
    timings: list[dict] = []
    run_id = drive(store, timings)
    assert len(judged) > short, (judged, timings)  # room came back before the run ended
    assert [t["in_child"] for t in timings[:short]] == [False] * short, timings
    assert [t["in_child"] for t in timings[short:]] == [True] * (len(timings) - short), timings
    assert said.events.count("snapshot_process_skipped") == 1, said.events
    assert said.events.count("snapshot_process_fits_again") == 1, said.events
    assert said.events.index("snapshot_process_skipped") < said.events.index("snapshot_process_fits_again")
    store.close()
    with Store.open(tmp_path, snapshot_every=SNAPSHOT_EVERY) as again:
        state, _ = recover(again)
    assert state.runs[run_id].settled
