"""The coordinator's collector policy (coordinator/collector.py): survivors are frozen out of
every later walk, young cycles still die, frozen ones die at the full pass, long pauses are
counted."""
from __future__ import annotations

import gc
import time
import weakref

import pytest

from coordinator.collector import YOUNG_COLLECTIONS_PER_PASS, YOUNG_THRESHOLD, Collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(b)


@pytest.fixture(autouse=True)
def thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_pass_collects_young_cycles_and_freezes_what_survives():
    collector = Collector(freeze_every_s=10, full_every_s=0)
    kept, _ = cycle()
    garbage, garbage_ref = cycle()
    del garbage
    before = gc.get_freeze_count()
    assert collector.step() >= 2  # the dropped cycle was found
    assert garbage_ref() is None
    assert gc.get_freeze_count() > before
    # The survivor is out of every later walk: no generation holds it any more.
    assert not any(o is kept for o in gc.get_objects())


def test_a_cycle_dropped_after_its_freeze_waits_for_the_full_pass():
    clock = Clock()
    collector = Collector(freeze_every_s=10, full_every_s=3600, clock=clock)
    late, late_ref = cycle()
    collector.step()  # frozen while alive
    del late
    clock.t = 10
    collector.step()
    assert late_ref() is not None  # a plain pass does not walk frozen objects
    clock.t = 3600
    assert collector.step() >= 2
    assert late_ref() is None and collector.full_passes == 1
    assert gc.get_freeze_count() > 0  # the survivors are frozen again


def test_a_long_collection_is_counted_with_its_generation():
    seen: list[tuple[int, float]] = []
    collector = Collector(on_pause=lambda generation, s: seen.append((generation, s)))
    collector._timed("start", {"generation": 1})
    collector._timed("stop", {"generation": 1, "collected": 0})  # short: not counted
    collector._timed("start", {"generation": 0})
    time.sleep(0.03)
    collector._timed("stop", {"generation": 0, "collected": 0})  # the young are not timed
    collector._timed("start", {"generation": 2})
    time.sleep(0.03)
    collector._timed("stop", {"generation": 2, "collected": 0})
    assert len(seen) == 1 and seen[0][0] == 2 and seen[0][1] >= 0.03


def test_install_times_real_collections_and_uninstall_stops():
    collector = Collector()
    collector.install()
    try:
        assert collector._timed in gc.callbacks
    finally:
        collector.uninstall()
    assert collector._timed not in gc.callbacks


def test_installed_the_collector_makes_no_full_collection_itself_and_a_pass_is_due_on_count():
    clock = Clock()
    collector = Collector(freeze_every_s=10, clock=clock)
    before = gc.get_threshold()
    collector.install()
    try:
        # Only the young are collected of their own accord: neither older generation's
        # threshold is ever reached.
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[1] > 1_000_000 and gc.get_threshold()[2] > 1_000_000
        gc.collect()
        assert not collector.due()
        for _ in range(YOUNG_COLLECTIONS_PER_PASS - 1):
            gc.collect(0)
        assert not collector.due()
        gc.collect(0)
        assert collector.due()
        collector.step()
        assert not collector.due()
        clock.t = 10
        assert collector.due()
    finally:
        collector.uninstall()
    assert gc.get_threshold() == before
