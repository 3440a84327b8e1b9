"""The simulation runs the real worker protocol (worker/protocol.py): a worker bug planted in it,
an ack applied twice (counted per ack, not per cell), is caught by the seeds, as a broken core
is (tests/sim/test_simulation.py); the simulation before it modelled a worker of its own and
could not see one. The seeds also hold with the protocol as it is."""
from __future__ import annotations

import pytest

from tools.sim import simulation
from worker import protocol as wp


def test_an_ack_applied_twice_is_caught_by_the_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    def count(self: wp.Held, attempt_id: str) -> None:
        self.counted[f"{attempt_id}#{len(self.counted)}"] = None  # every ack counts, a repeat too

    monkeypatch.setattr(wp.Held, "count", count)
    caught = []
    for seed in range(20):
        try:
            simulation.run_seed(seed, True)
        except simulation.SimFailure as e:
            caught.append(e)
            break
    assert caught, "an ack applied twice went unnoticed by 20 seeds"
    assert "waits unacknowledged in its outbox" in caught[0].what, caught[0].what


def test_the_worker_rule_holds_on_the_seeds_with_the_real_protocol() -> None:
    for seed in range(3):
        simulation.run_seed(seed, True)
