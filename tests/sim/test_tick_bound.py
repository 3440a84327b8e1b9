"""Goal: the clock tick's skipped walks (machine.py `_clock_ticked`, `state.Soft.tick_due_ms`)
decide exactly what a walk of every worker at every tick decides; method: seeds of the
simulation run twice, once as they are and once with the bound cleared after every walk, and
their whole reports (results, counters, trace) compared byte for byte."""
from __future__ import annotations

import json

import pytest

from coordinator.core import machine
from tools.sim import simulation

SEEDS = range(0, 12)


def _reports() -> dict[int, str]:
    return {seed: json.dumps(simulation.run_seed(seed, True), sort_keys=True, default=str) for seed in SEEDS}


def test_skipped_walks_decide_what_a_walk_every_tick_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    walks = {"n": 0}
    original = machine._walk_workers

    def counted(*args):  # noqa: ANN002
        walks["n"] += 1
        original(*args)

    monkeypatch.setattr(machine, "_walk_workers", counted)
    bounded = _reports()
    bounded_walks = walks["n"]

    def every_tick(state, *args):  # noqa: ANN001, ANN002
        counted(state, *args)
        state.soft.tick_due_ms = 0

    monkeypatch.setattr(machine, "_walk_workers", every_tick)
    walks["n"] = 0
    assert _reports() == bounded
    assert bounded_walks < walks["n"] / 2, (bounded_walks, walks["n"])
