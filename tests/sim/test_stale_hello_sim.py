"""Goal: a hello that reaches the coordinator after a newer stream's (issue 26: written into a
connection a blip killed, retransmitted later) costs no second execution; method: the seeded
simulation with one such hello injected per seed (the worker's previous stream, listing
nothing, the moment the worker runs a group on its second or later stream), every invariant
after every command, and then the same seeds with the edge's check turned off, which must fail
the simulation's check that a hello releases no group its process runs."""
from __future__ import annotations

import pytest

from coordinator import hellos
from tools.sim.simulation import SimFailure, Simulation

SEEDS = range(12)


class _StaleHello(Simulation):
    """Delivers, once, the hello of the worker's previous stream while it runs a group."""

    injected: tuple | None = None

    def worker_frame(self, w, frame) -> None:  # noqa: ANN001 - the simulation's own types
        super().worker_frame(w, frame)
        if self.injected is None and w.alive and w.connected and w.conn >= 2:
            running = [aid for aid, cells in w.cells.items() if cells]
            if running:
                self.injected = (w.worker_id, running[0])
                self.coordinator_frame(w.worker_id, ("hello", w.incarnation, (), (), w.conn - 1, ""))


def _runs() -> list[_StaleHello]:
    sims = []
    for seed in SEEDS:
        sim = _StaleHello(seed, check=True)
        sim.run()
        sims.append(sim)
    return sims


def test_a_hello_of_an_older_stream_is_refused_and_nothing_runs_twice() -> None:
    sims = _runs()
    injected = [s for s in sims if s.injected]
    assert len(injected) >= len(SEEDS) // 2, "the scenario did not come up: the test would prove nothing"
    for sim in injected:
        assert sim.stats["stale_hellos"] >= 1, sim.seed
        assert sim.state.assignments[sim.injected[1]].ended_reason != "not held by the worker when it reconnected"


def test_without_the_edge_check_the_simulation_sees_a_group_run_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hellos.HelloStreams, "stale", lambda self, *a: 0)
    with pytest.raises(SimFailure, match="which its process runs: its cells run twice"):
        _runs()
