"""A ReportBatch's reports are logged from the worker's own messages (encode once) and replay
exactly: method: a real Store in a temp dir and a real Actor, a run driven to completion with
`Request(reports=Reports(...))` as the servicer sends it (one report of each batch
without its message, to keep the other path), the record encoder spied on, then the log read
back byte for byte against `encode_record` and recovered against the live state."""
from __future__ import annotations

import threading
from pathlib import Path

from common.ids import AttemptId, WorkerId, run_id_for
from coordinator import actor as actor_module
from coordinator.actor import Actor, Reports, Request
from coordinator.recovery import recover
from coordinator.core import commands as c
from coordinator.core import new_state
from coordinator.core.effects import OfferRun, PushAssignment
from coordinator.core.state import durable_fingerprint
from coordinator.logcodec import decode_record, encode_record, report_to_proto
from coordinator.store import Store
from tests.unit.core_helpers import ENV, OK, make_policy, make_spec

WAIT_S = 30


def test_report_batches_logged_from_their_wire_messages_replay_exactly(tmp_path: Path, monkeypatch) -> None:
    store = Store.open(tmp_path)
    committed: list[bytes] = []
    append = store.append

    def spy_append(records):
        committed.extend(records)
        return append(records)

    store.append = spy_append  # type: ignore[method-assign]
    fast_calls: list[int] = []
    real_fast = actor_module.encode_cell_reported

    def spy_fast(index, cmd, wire):
        fast_calls.append(index)
        return real_fast(index, cmd, wire)

    monkeypatch.setattr(actor_module, "encode_cell_reported", spy_fast)
    pushes: list[PushAssignment] = []
    lock = threading.Lock()

    def deliver(batch) -> None:
        for done, value in batch.completions:
            done(value)

    actor = Actor(store, new_state(), 0, deliver=deliver, tick_ms=0, snapshot_in_child=False)
    actor.start()

    def apply(request: Request) -> object:
        got = threading.Event()
        box: list = []

        def done(value) -> None:
            with lock:
                for t in value if isinstance(value, list) else [value]:
                    pushes.extend(e for e in t.effects if isinstance(e, PushAssignment))
            box.append(value)
            got.set()

        request.done = done
        actor.submit(request)
        assert got.wait(WAIT_S)
        return box[0]

    spec, policy = make_spec(tasks=12, subjects=3, cap=4), make_policy()
    run_id = run_id_for(spec.canonical, policy.canonical())
    assert apply(Request(make=lambda now: c.RunSubmitted(now, run_id, spec, policy))).outcome.ok
    for i in range(2):
        t = apply(Request(make=lambda now, i=i: c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, 2, ENV)))
        for offer in [e for e in t.effects if isinstance(e, OfferRun)]:
            assert apply(Request(make=lambda now, o=offer: c.RunEnvironmentMeasured(
                now, o.worker_id, 1, o.run_id, ()))).outcome.ok
    reported = 0
    for _ in range(1_000):
        with lock:
            if not pushes:
                break
            push = pushes.pop(0)
        rows = [(AttemptId(cell.attempt_id), push.assignment_id, push.generation, OK) for cell in push.cells]
        wire = [report_to_proto(OK) for _ in push.cells]
        wire[-1] = None  # this one is logged from the Python object, as before
        transitions = apply(Request(reports=Reports(push.worker_id, rows, wire)))
        assert all(t.outcome.ok for t in transitions)
        assert all(type(cmd) is c.CellReported for t in transitions for cmd in t.durable)
        reported += len(rows)
    actor.stop()
    live = actor._state
    store.close()

    assert reported == 12 * 3
    assert len(fast_calls) == 12 * 2, "two reports of each batch went through encode_cell_reported"
    for data in committed:
        index, cmd = decode_record(data)
        assert data == encode_record(index, cmd)  # the same bytes either way
    with Store.open(tmp_path) as again:
        state, index = recover(again)
    assert index == len(committed)
    assert state.runs[run_id].settled
    assert durable_fingerprint(state) == durable_fingerprint(live)
