"""The actor's gather: a command that meets a busy actor waits for the ones behind it so that
they share one commit, and nothing else waits. Method: a real Store and Actor whose sleep is a
stand-in that records each wait and submits more commands while "sleeping"; the Store's
append is spied on to count commits and their records."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from common.ids import WorkerId
from coordinator.actor import Actor, Request
from coordinator.core import commands as c
from coordinator.core import new_state
from coordinator.store import Store
from tests.unit.core_helpers import ENV

WAIT_S = 30


class Harness:
    def __init__(self, tmp_path: Path, *, gather_after_ms: float) -> None:
        self.store = Store.open(tmp_path)
        self.appends: list[int] = []
        append = self.store.append

        def spy_append(records):
            self.appends.append(len(records))
            return append(records)

        self.store.append = spy_append  # type: ignore[method-assign]
        self.sleeps: list[float] = []
        self.during_sleep: list[Request] = []
        self.actor = Actor(self.store, new_state(), 0, deliver=self._deliver, tick_ms=0, snapshot_in_child=False,
                           gather_after_ms=gather_after_ms, sleep=self._sleep)
        self.actor.start()
        self.registered = 0

    @staticmethod
    def _deliver(batch) -> None:
        for done, value in batch.completions:
            done(value)

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        for req in self.during_sleep:  # arrive while the actor waits
            self.actor.submit(req)
        self.during_sleep = []

    def register(self) -> tuple[Request, threading.Event]:
        """A durable command (a new worker), and the event set once it is committed."""
        self.registered += 1
        wid = WorkerId(f"w{self.registered}")
        got = threading.Event()
        return Request(make=lambda now: c.WorkerRegistered(now, wid, 1, 1, ENV), done=lambda _: got.set()), got

    def apply(self, req: Request, got: threading.Event) -> None:
        self.actor.submit(req)
        assert got.wait(WAIT_S)

    def close(self) -> None:
        self.actor.stop()
        self.store.close()


@pytest.fixture
def busy(tmp_path: Path):
    h = Harness(tmp_path, gather_after_ms=60_000)  # every command after a commit meets a busy actor
    yield h
    h.close()


def test_an_isolated_command_is_committed_without_waiting(busy: Harness) -> None:
    busy.apply(*busy.register())
    assert busy.sleeps == [] and busy.appends == [1]


def test_commands_behind_one_that_meets_a_busy_actor_share_its_commit(busy: Harness) -> None:
    busy.apply(*busy.register())
    behind = [busy.register() for _ in range(5)]
    busy.during_sleep = [req for req, _ in behind]
    busy.apply(*busy.register())
    for _, got in behind:
        assert got.wait(WAIT_S)
    assert len(busy.sleeps) == 1 and busy.sleeps[0] == pytest.approx(0.001)
    assert busy.appends == [1, 6], "the five that came during the wait share the sixth's commit"
    assert busy.actor.gathers == 1


def test_queries_do_not_wait_for_more(busy: Harness) -> None:
    busy.apply(*busy.register())
    got = threading.Event()
    busy.actor.submit(Request(query=lambda state: len(state.workers), done=lambda _: got.set()))
    assert got.wait(WAIT_S)
    assert busy.sleeps == []


def test_a_command_after_the_busy_window_does_not_wait(tmp_path: Path) -> None:
    h = Harness(tmp_path, gather_after_ms=0)  # every commit's window has passed at once
    try:
        for _ in range(3):
            h.apply(*h.register())
        assert h.sleeps == [] and h.appends == [1, 1, 1]
    finally:
        h.close()
