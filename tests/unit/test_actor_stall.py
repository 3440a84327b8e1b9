"""The actor tells the coordinator's own outage from its workers' silence (issue 23): a tick
that comes long after the one before it (the process was frozen, the actor blocked) becomes a
logged CoordinatorStalled, and while the event loop that reads the workers' frames has not
beaten for COORDINATOR_STALL_MS no tick is applied at all. A real Store and Actor, with the
actor's monotonic clock in the test's hands."""
from __future__ import annotations

import threading
from pathlib import Path

from common.limits import COORDINATOR_STALL_MS
from coordinator.actor import Actor, Request
from coordinator.core import commands as c
from coordinator.core import new_state
from coordinator.logcodec import decode_record
from coordinator.store import Store

STALL_S = COORDINATOR_STALL_MS / 1000


def actor_at(tmp_path: Path, clock: list[float]) -> Actor:
    return Actor(Store.open(tmp_path), new_state(), 0, deliver=lambda batch: [d(v) for d, v in batch.completions],
                 tick_ms=0, snapshot_in_child=False, monotonic=lambda: clock[0])


def test_a_tick_long_after_the_last_is_a_stall_and_a_blocked_loop_withholds_ticks(tmp_path):
    clock = [100.0]
    actor = actor_at(tmp_path, clock)
    clock[0] += 0.2
    assert isinstance(actor._tick(1), c.ClockTicked)
    clock[0] += 25.0  # SIGSTOP for 25 s, then SIGCONT
    stalled = actor._tick(2)
    assert isinstance(stalled, c.CoordinatorStalled) and stalled.stalled_ms == 25_000
    clock[0] += 0.2
    assert isinstance(actor._tick(3), c.ClockTicked), "one stall, then ticks again"
    actor.loop_beat()
    clock[0] += STALL_S + 0.5  # the loop has not beaten since: blocked
    assert actor._tick(4) is None
    clock[0] += 3.0
    assert actor._tick(5) is None
    actor.loop_beat()  # it runs again
    clock[0] += 0.1
    stalled = actor._tick(6)
    assert isinstance(stalled, c.CoordinatorStalled) and stalled.stalled_ms == round((STALL_S + 3.6) * 1000)
    assert actor.stalls == 2


def test_ticks_on_time_with_a_beating_loop_are_never_a_stall(tmp_path):
    clock = [5.0]
    actor = actor_at(tmp_path, clock)
    for i in range(50):
        clock[0] += 0.2
        actor.loop_beat()
        assert isinstance(actor._tick(i), c.ClockTicked)
    assert actor.stalls == 0


def test_the_stall_is_applied_and_logged_and_a_withheld_tick_logs_nothing(tmp_path):
    clock = [0.0]
    actor = actor_at(tmp_path, clock)
    actor.start()
    try:
        done = threading.Event()
        clock[0] += 30.0
        actor.submit(Request(make=actor._tick, done=lambda _: done.set()))
        assert done.wait(30)
        actor.loop_beat()
        clock[0] += 10.0
        withheld = threading.Event()
        actor.submit(Request(make=actor._tick))
        actor.submit(Request(query=lambda s: withheld.set()))
        assert withheld.wait(30)
    finally:
        actor.stop()
    store = actor._store  # the actor's stop wrote a snapshot: read the log itself
    commands = [decode_record(data)[1] for _, data in store._iter_records(1, store.last_index)]
    assert [type(cmd) for cmd in commands] == [c.CoordinatorStalled]
    assert commands[0].stalled_ms == 30_000
