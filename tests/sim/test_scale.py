"""The scale scenario, CI-sized: a scaled run holds every invariant with faults of every kind,
and the incremental checker is shown catching violations planted in the state and in the core."""
from __future__ import annotations

import json

import pytest

from coordinator.core import machine
from coordinator.core import commands as c
from coordinator.core.effects import Emit
from tools.sim import cli, scale, simulation

# 500 workers as the fleet, 10,000 cells: about 6 CPU seconds here (20,000 cells: 12).
SMALL = dict(workers=500, cells=10_000, restarts=2, checkpoint_every=20_000, snapshot_every=8_000)


def test_a_scaled_run_holds_every_invariant_through_crashes_partitions_and_restarts() -> None:
    report = scale.run_scale(7, **SMALL)
    acc, inv, faults = report["accounting"], report["invariants"], report["faults"]
    assert acc["state"] in ("complete", "incomplete")
    assert acc["lost"] == 0 and acc["duplicated"] == 0
    assert acc["selected"] + acc["incomplete"] == 10_000
    assert acc["selected"] > 9_500, "only cells out of attempts may stay incomplete"
    assert faults["coordinator_restarts"] == 2
    assert faults["worker_crashes"] >= 5 and faults["partitions"] >= 5
    # One check after every command that wrote to the log (a tick may write several records).
    assert inv["incremental_checks"] == report["durable_commands"] > 0
    assert report["durable_records"] >= report["durable_commands"]
    # Every restart recovered from a snapshot and a tail shorter than the log.
    assert all(0 < tail < report["durable_records"] for tail in inv["restart_tail_records"])
    assert inv["checkpoints_by_reason"]["after a coordinator restart"] == 2
    assert inv["checkpoints_by_reason"]["at the end"] == 1
    assert inv["full_checkpoints"] >= 4 and inv["final_full_replay"]
    assert report["cost_per_command_us"]["core_step"] > 0
    assert report["cost_per_command_us"]["by_kind"]["CellReported"]["count"] >= 10_000


def test_the_cli_prints_one_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--scale", "--seed", "3", "--workers", "40", "--cells", "800", "--restarts", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scenario"]["workers"] == 40 and report["scenario"]["cells"] == 800
    assert {"commands", "wall_seconds", "cost_per_command_us", "peak_rss_mb", "faults", "invariants",
            "accounting"} <= set(report)


def _corrupt_after_selection(monkeypatch: pytest.MonkeyPatch, corrupt) -> None:  # noqa: ANN001
    """Wrap the core's step as the scale simulation calls it: from the 50th command that
    selected a cell on, `corrupt(state, run, cell)` breaks the state the way a buggy core
    would, once (it returns whether it could)."""
    original = scale.step
    seen, done = 0, False

    def step(state, command):  # noqa: ANN001
        nonlocal seen, done
        state, t = original(state, command)
        if isinstance(command, c.CellReported) and not done:
            for e in t.effects:
                if isinstance(e, Emit) and e.event == "cell_selected":
                    seen += 1
                    if seen >= 50:
                        run = state.runs[e.run_id]
                        done = corrupt(state, run, run.cells[e.subject])
        return state, t

    monkeypatch.setattr(scale, "step", step)


def _selected_twice(state, run, cell) -> bool:  # noqa: ANN001
    run.selected_cells += 1  # the same selection counted a second time
    return True


def _selection_lost(state, run, cell) -> bool:  # noqa: ANN001
    # While this cell is selected, another of its group selected earlier loses its result
    # (and the count is kept, as a bug that forgets the record would keep it).
    for cid in run.groups[cell.group_index].cells:
        if cid != cell.cell_id and run.cells[cid].selected is not None:
            run.cells[cid].selected = None
            return True
    return False


def _selection_replaced(state, run, cell) -> bool:  # noqa: ANN001
    # While this cell is selected, another of its group selected earlier gets a second attempt
    # selected over its first, as a buggy core would leave it: the same evidence under a new
    # attempt id of that cell, dispatched later (the attempt table then also disagrees).
    from dataclasses import replace

    for cid in run.groups[cell.group_index].cells:
        other = run.cells[cid]
        if cid != cell.cell_id and other.selected is not None:
            first = state.attempts[other.selected]
            run.dispatches += 1
            twin = replace(first, attempt_id=first.attempt_id + "-twin", dispatch_order=run.dispatches)
            state.attempts[twin.attempt_id] = twin
            other.attempts.append(twin.attempt_id)
            other.selected = twin.attempt_id
            return True
    return False


@pytest.mark.parametrize("corrupt, expected", [
    (_selected_twice, "selected cells"),
    (_selection_lost, "lost its selected result"),
    (_selection_replaced, "selection changed"),
])
def test_the_incremental_checker_catches_a_corrupted_selection(monkeypatch: pytest.MonkeyPatch, corrupt,
                                                               expected: str) -> None:  # noqa: ANN001
    _corrupt_after_selection(monkeypatch, corrupt)
    with pytest.raises(simulation.SimFailure) as caught:
        scale.run_scale(5, workers=100, cells=2_000, restarts=1)
    assert expected in caught.value.what
    assert "CellReported" in caught.value.what, "caught at the very command, not at a later checkpoint"


def test_a_core_that_redispatches_selected_cells_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken core whose redispatch carries cells that already have a selected result."""
    def pending(run, group):  # noqa: ANN001
        return [run.cells[cid] for cid in group.cells if len(run.cells[cid].attempts) < run.max_attempts(run.cells[cid])]

    monkeypatch.setattr(machine, "_pending_cells", pending)
    with pytest.raises(simulation.SimFailure) as caught:
        scale.run_scale(5, workers=100, cells=2_000, restarts=1)
    # Seen at the first command that shows it: a group whose cells are all selected put back
    # in the queue, or (if it never waits) a selected cell pushed again.
    assert "waits with nothing to run" in caught.value.what or "dispatched again" in caught.value.what


def test_a_checkpoint_catches_what_no_command_named() -> None:
    """A change the incremental checks cannot see (no command named it) is found by the
    whole-state checkpoint: here a worker's slot count changed behind the core's back."""
    sim = scale.ScaleSimulation(5, workers=50, cells=1_000, restarts=0)
    sim.run()
    worker = next(iter(sim.state.workers.values()))
    worker.slots += 1
    assert sim.inc.checkpoint(sim.state), "the checkpoint saw nothing wrong"


def test_the_pick_through_the_index_is_the_pick_of_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_pick_worker` finds its worker through an index (state.Soft); at every pick of a scaled
    run with restarts (snapshots loaded without the index) it must be the worker that a walk of
    the free list in order finds: the first that serves the run and fits."""
    original = machine._pick_worker
    picks = 0

    def pick(state, run):  # noqa: ANN001
        nonlocal picks
        want = next((state.workers[w] for w in state.free_workers
                     if machine._serves(run, state.workers[w])
                     and machine._fits(run.policy, state.workers[w].slots, state.workers[w].cpu_millis,
                                       state.workers[w].memory_mb)), None)
        got = original(state, run)
        assert got is want, f"the index picked {got and got.worker_id}, the scan {want and want.worker_id}"
        picks += 1
        return got

    monkeypatch.setattr(machine, "_pick_worker", pick)
    scale.run_scale(11, workers=120, cells=3_000, restarts=2, snapshot_every=2_000)
    assert picks > 750
