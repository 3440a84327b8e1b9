"""The seeded simulation as a test: many seeds with invariants after every durable command,
byte-identical output per seed, and proof that the checks catch a broken core."""
from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from coordinator.core import machine
from tools.sim import cli, simulation

# CI runs this many seeds in the normal test run (500 took 47 s of a suite near its 10-minute
# budget; on a VM three times slower per core, 300 took 36 s of a 572 s suite); the README's
# `./dev sim --seeds 0-299 --check` runs a wider set by hand, and FLEET_SIM_SEEDS widens this
# one (e.g. "0-4999").
SEEDS = os.environ.get("FLEET_SIM_SEEDS", "0-199")


def _run(seeds: range) -> tuple[int, str]:
    for seed in seeds:
        try:
            simulation.run_seed(seed, True)
        except simulation.SimFailure as e:
            return seed, str(e)
    return -1, ""


def test_many_seeds_hold_every_invariant() -> None:
    seeds = cli.parse_range(SEEDS)
    # Two interleaved halves, one per core of this machine.
    halves = [seeds[0::2], seeds[1::2]]
    with ProcessPoolExecutor(max_workers=2) as pool:
        for seed, failure in pool.map(_run, halves):
            assert seed < 0, f"{failure}\nreplay: python -m tools.sim --seed {seed} --check"


def test_same_seed_prints_the_same_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for _ in range(2):
        assert cli.main(["--seed", "42"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    report = json.loads(outputs[0])
    assert report["seed"] == 42
    assert {"selected", "incomplete", "observed_cost_usd", "usage_complete"} <= set(report["summary"])
    assert len(report["results"]) == report["summary"]["selected"]
    assert all("cell_id" in r for r in report["results"])
    assert report["trace"], "the trace explains the run"
    assert report["summary"]["selected"] + report["summary"]["incomplete"] == 120


def test_different_seeds_draw_different_runs() -> None:
    a = simulation.run_seed(1, False)
    b = simulation.run_seed(2, False)
    assert a["faults"] != b["faults"]
    assert a["trace"] != b["trace"]


def test_the_default_scenario_matches_the_reference() -> None:
    sim = simulation.Simulation(0, check=False)
    assert len(sim.workers) == 3
    assert sim.spec.group_count == 40
    assert sim.spec.cell_count == 120


@pytest.mark.parametrize("breakage", ["selects_unselectable", "ignores_attempt_limit", "keeps_superseded_owner"])
def test_a_broken_core_is_caught(monkeypatch: pytest.MonkeyPatch, breakage: str) -> None:
    if breakage == "selects_unselectable":
        monkeypatch.setattr(machine, "is_selectable", lambda report: True)
    elif breakage == "ignores_attempt_limit":
        def pending(run, group):  # noqa: ANN001
            return [run.cells[cid] for cid in group.cells if run.cells[cid].selected is None]
        monkeypatch.setattr(machine, "_pending_cells", pending)
    else:
        original = machine._release

        def release(state, assignment, now, reason, fx):  # noqa: ANN001
            original(state, assignment, now, reason, fx)
            if reason == "worker expired":
                assignment.authoritative = True  # an expired owner keeps its group
        monkeypatch.setattr(machine, "_release", release)
    # The first seed that notices is enough. Exhausting a cell's attempts takes four failed
    # dispatches of one cell, which few seeds draw (seeds 13 of the first 40 before idle workers
    # went quiet under transport liveness, 98 and 131 of the first 150 since; 47, 261, 264 and
    # 274 of the first 300 since the simulation runs the real worker protocol), so the search
    # goes on for up to 200 seeds; the other breakages are caught within the first few. Seeds
    # 0-39 notice nothing for the attempt limit (a suite near its budget), so that search starts
    # at 40.
    failures = 0
    for seed in range(40 if breakage == "ignores_attempt_limit" else 0, 200):
        try:
            simulation.run_seed(seed, True)
        except simulation.SimFailure:
            failures += 1
            break
    assert failures > 0, f"breaking the core ({breakage}) went unnoticed by 200 seeds"


def test_status_counts_agree_with_the_summary_after_every_durable_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run_counts` (what status and live progress show) must say what `summarize` says."""
    from coordinator.core.summary import run_counts, summarize

    checked = 0
    original = simulation.Simulation.apply

    def apply(self, cmd):  # noqa: ANN001
        nonlocal checked
        out = original(self, cmd)
        run = self.state.runs.get(self.run_id)
        if run is not None:
            n, s = run_counts(self.state, run), summarize(self.state, self.run_id)
            reasons = [i.reason for i in s.incomplete]
            assert (n.state, n.selected, n.running, n.exhausted) == (
                s.state, len(s.selected), reasons.count("running"), reasons.count("exhausted"))
            assert (n.groups_waiting, n.groups_assigned, n.groups_settled) == (
                s.groups_waiting, s.groups_assigned, s.groups_settled)
            assert n.retries == s.attempts_dispatched - sum(1 for c in run.cells.values() if c.attempts)
            checked += 1
        return out

    monkeypatch.setattr(simulation.Simulation, "apply", apply)
    for seed in range(6):
        simulation.run_seed(seed, False)
    assert checked > 1000


# --- dispatch order from history -------------------------------------------------------------

ORDER_SEEDS = os.environ.get("FLEET_SIM_ORDER_SEEDS", "0-39")  # 60 took 22 s on the slow VM above


def _order_check(seeds: range) -> tuple[int, str, int]:
    reordered = 0
    for seed in seeds:
        try:
            reordered += simulation.run_order_check(seed)["reordered"]
        except simulation.SimFailure as e:
            return seed, str(e), reordered
    return -1, "", reordered


def test_an_ordered_run_selects_exactly_what_the_unordered_run_selected() -> None:
    """Per seed: a run, then the same spec ordered from it on the same coordinator and fleet.
    Every cell's dispatches, selected attempt, status and score, and the accounting, agree."""
    seeds = cli.parse_range(ORDER_SEEDS)
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_order_check, [seeds[0::2], seeds[1::2]]))
    for seed, failure, _ in results:
        assert seed < 0, f"{failure}\nreplay: python -m tools.sim --seed {seed} --order-check"
    assert sum(r[2] for r in results) == len(seeds), "every second run dispatched in another order"


def test_the_order_check_catches_an_order_that_changes_a_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    original = machine._pending_cells

    def pending(run, group):  # noqa: ANN001
        cells = original(run, group)
        # A broken ordered dispatch: no retries, whatever the policy allows.
        return [c for c in cells if not run.order or not c.attempts]
    monkeypatch.setattr(machine, "_pending_cells", pending)
    caught = 0
    for seed in range(12):
        try:
            simulation.run_order_check(seed)
        except simulation.SimFailure:
            caught += 1
    assert caught > 0


# --- stream end against silence --------------------------------------------------------------

def test_the_simulation_tells_a_stream_end_from_silence() -> None:
    """Crashes and resets end streams (the grace decides: some workers come back in time,
    some are lost); partitions are silence (expiry decides). All of it across seeds."""
    counts = {"WorkerLost": 0, "WorkerExpired": 0}
    came_back = 0
    for seed in range(40):
        sim = simulation.Simulation(seed, check=True)
        sim.run()
        for cmd in sim.log:
            name = type(cmd).__name__
            if name in counts:
                counts[name] += 1
        came_back += sum(1 for line in sim.trace if "stream reset" in line)
    assert counts["WorkerLost"] > 0, "no worker was ever lost at the end of a grace"
    assert counts["WorkerExpired"] > 0, "no silent worker ever expired"
    assert came_back > 0, "no worker ever came back within the grace"
