"""The cyclic garbage collector, tuned for a daemon whose heap is mostly long-lived state.

CPython's collector walks, at each full collection, every tracked object that is not frozen,
holding the GIL: the actor and the event loop both stop. A coordinator's heap is almost all
state that lives as long as the process (runs, cells, attempts, sessions), so full collections
walk more and more of it and find nothing: with 10,000 sessions, one every 2.7 s taking 279 ms
(docs/benchmarks.md), which is the tail of slot refill.

So the collector collects only the young of its own accord (the thresholds of the middle and
oldest generations are out of reach); the daemon makes a collection itself, a pass, once the
young have been collected `YOUNG_COLLECTIONS_PER_PASS` times or `freeze_every_s` has passed,
and freezes the survivors (`gc.freeze`). Each object that lives is walked twice: by one
collection of the young and by one pass. (A middle generation collected on its own, as
CPython does, walked each a third time: 10% of the event loop's samples under a stream of
reports, tools/bench/coordinator --only reports.) A pass is cheap because
it walks only what survived since the last one, and no later collection walks the frozen.
Garbage cycles still die young as before; what is given up is a cycle that becomes garbage
after it was frozen, which stays until a full pass over everything (`gc.unfreeze`, collect,
freeze again) every `full_every_s`; that pass is logged with its duration and what it found,
so the cost of the trade is visible in the log. Recovery and a run's submit freeze what they build themselves
(coordinator/actor.py).

Every collection of the older generations of 10 ms or more is counted in `fleet_gc_pause_seconds`, and one of
100 ms or more is logged (`gc_pause`): a stall says where it came from.
"""
from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

import structlog

from common import limits

log = structlog.get_logger("coordinator.collector")

PAUSE_COUNTED_S = 0.010
PAUSE_LOGGED_S = 0.100
# A pass after this many collections of the young (as often as two collections of a middle
# generation at CPython's threshold of 10): each walks a few thousand survivors, not the
# seconds of them a registration storm leaves (83 ms of CPU at 2,000).
YOUNG_COLLECTIONS_PER_PASS = 20
CHECK_EVERY_S = 0.25
# Allocations between collections of the young (CPython: 700). At 10,000 sessions the young
# were collected thousands of times a second; most of what they walk dies before a later one.
YOUNG_THRESHOLD = 5_000
THRESHOLD_OFF = 1 << 30


class Collector:
    def __init__(self, *, freeze_every_s: float = limits.GC_FREEZE_EVERY_MS / 1000,
                 full_every_s: float = limits.GC_FULL_EVERY_MS / 1000,
                 on_pause: Callable[[int, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.freeze_every_s = freeze_every_s
        self.full_every_s = full_every_s
        self.on_pause = on_pause
        self._clock = clock
        self._started: float | None = None
        self._started_cpu = 0.0
        self._last_full = self._last_pass = clock()
        self._thresholds = gc.get_threshold()
        self.passes = 0
        self.full_passes = 0

    def install(self) -> None:
        self._thresholds = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, THRESHOLD_OFF, THRESHOLD_OFF)
        gc.callbacks.append(self._timed)

    def uninstall(self) -> None:
        if self._timed in gc.callbacks:
            gc.callbacks.remove(self._timed)
            gc.set_threshold(*self._thresholds)

    def due(self) -> bool:
        # get_count()[1]: collections of the young since the middle generation's last (a pass)
        return (gc.get_count()[1] >= YOUNG_COLLECTIONS_PER_PASS
                or self._clock() - self._last_pass >= self.freeze_every_s)

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 0:
            return  # the young: hundreds a second, each far below PAUSE_COUNTED_S; timing them cost 6%
        if phase == "start":
            self._started, self._started_cpu = time.perf_counter(), time.thread_time()
            return
        if self._started is None:
            return
        took, self._started = time.perf_counter() - self._started, None
        if took < PAUSE_COUNTED_S:
            return
        generation = int(info.get("generation", -1))
        if self.on_pause is not None:
            self.on_pause(generation, took)
        if took >= PAUSE_LOGGED_S:
            # cpu_ms well below ms: the process was waiting for a core, not collecting.
            log.info("gc_pause", generation=generation, ms=round(took * 1000, 1),
                     cpu_ms=round((time.thread_time() - self._started_cpu) * 1000, 1),
                     collected=info.get("collected"), frozen=gc.get_freeze_count())

    def step(self) -> int:
        """One pass: collect what is young, freeze what survives; now and then everything.
        Returns the number of unreachable objects found."""
        self.passes += 1
        now = self._last_pass = self._clock()
        if self.full_every_s > 0 and now - self._last_full >= self.full_every_s:
            self._last_full = now
            self.full_passes += 1
            started = time.perf_counter()
            frozen = gc.get_freeze_count()
            gc.unfreeze()
            found = gc.collect()
            gc.freeze()
            log.info("gc_full_pass", ms=round((time.perf_counter() - started) * 1000, 1), found=found,
                     walked=frozen, frozen=gc.get_freeze_count())
            return found
        found = gc.collect()
        gc.freeze()
        return found

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            if self.due():
                self.step()
