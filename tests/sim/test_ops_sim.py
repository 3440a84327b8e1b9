"""The operator and the hosts as simulation faults (`--faults ops`): a worker's disk fills and
frees (its heartbeats say so), an operator drains a worker (it exits once it holds nothing and
its host starts it again), grants retries to cells out of attempts, and raises the run's spend
cap each time the run pauses on it; beside the default faults, with every invariant after every
durable command, no group dispatched to a worker whose disk is full or that is being drained,
and no retry granted to a cell with a selected result. Then proof that those checks have teeth."""
from __future__ import annotations

import pytest

from coordinator.core import commands as c
from coordinator.core import machine
from coordinator.core.effects import ACCEPTED, Transition
from tests.sim.seedpool import run_seeds
from tools.sim import simulation

OPS = ("degraded", "drains", "grants", "grants_refused", "cap_pauses", "cap_raises")


def test_the_operator_and_full_disks_hold_every_invariant() -> None:
    total = run_seeds("0-23", ("ops",), OPS)
    assert total["degraded"] > 0, "no heartbeat said a disk was full"
    assert total["drains"] > 0 and total["grants"] > 0 and total["grants_refused"] > 0
    assert total["cap_pauses"] > 0 and total["cap_raises"] > 0, "no run paused on its spend cap and went on"


def test_every_extra_fault_at_once_holds_every_invariant() -> None:
    run_seeds("100-111", ("stall", "blackhole", "restore", "ops"), OPS)


def test_a_core_that_ignores_a_full_disk_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatch check has teeth: a core that takes a heartbeat's word of a full disk and
    does nothing with it keeps dispatching to that worker, and the check says so."""
    monkeypatch.setitem(machine._HANDLERS, c.WorkerDegraded, lambda state, cmd: Transition(ACCEPTED))
    with pytest.raises(simulation.SimFailure, match="whose disk is full"):
        for seed in range(10):
            simulation.run_seed(seed, True, faults=("ops",))


def test_a_core_that_grants_a_retry_to_a_selected_cell_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grant check has teeth: a core that grants a retry to a cell with a selected result
    (and does nothing else wrong) is caught."""
    real = machine._HANDLERS[c.CellRetryGranted]

    def grant_anything(state, cmd):
        cell = state.runs[cmd.run_id].cells[cmd.cell_id]
        if cell.selected is None:
            return real(state, cmd)
        cell.grants += 1
        return Transition(ACCEPTED)

    monkeypatch.setitem(machine._HANDLERS, c.CellRetryGranted, grant_anything)
    with pytest.raises(simulation.SimFailure, match="which has a selected result, was granted"):
        for seed in range(10):
            simulation.run_seed(seed, True, faults=("ops",))
