"""The seeded simulation as a test: many seeds with invariants after every durable command,
byte-identical output per seed, and proof that the checks catch a broken core."""
from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from coordinator.core import machine
from tools import simulate

# CI runs this many seeds in the normal test run; FLEET_SIM_SEEDS widens it (e.g. "0-4999").
SEEDS = os.environ.get("FLEET_SIM_SEEDS", "0-499")


def _run(seeds: range) -> tuple[int, str]:
    for seed in seeds:
        try:
            simulate.run_seed(seed, True)
        except simulate.SimFailure as e:
            return seed, str(e)
    return -1, ""


def test_many_seeds_hold_every_invariant() -> None:
    seeds = simulate.parse_range(SEEDS)
    # Two interleaved halves, one per core of this machine.
    halves = [seeds[0::2], seeds[1::2]]
    with ProcessPoolExecutor(max_workers=2) as pool:
        for seed, failure in pool.map(_run, halves):
            assert seed < 0, f"{failure}\nreplay: python -m tools.simulate --seed {seed} --check"


def test_same_seed_prints_the_same_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for _ in range(2):
        assert simulate.main(["--seed", "42"]) == 0
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
    a = simulate.run_seed(1, False)
    b = simulate.run_seed(2, False)
    assert a["faults"] != b["faults"]
    assert a["trace"] != b["trace"]


def test_the_default_scenario_matches_the_reference() -> None:
    sim = simulate.Simulation(0, check=False)
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
    failures = 0
    for seed in range(40):
        try:
            simulate.run_seed(seed, True)
        except simulate.SimFailure:
            failures += 1
    assert failures > 0, f"breaking the core ({breakage}) went unnoticed by 40 seeds"


def test_status_counts_agree_with_the_summary_after_every_durable_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run_counts` (what status and live progress show) must say what `summarize` says."""
    from coordinator.core.summary import run_counts, summarize

    checked = 0
    original = simulate.Simulation.apply

    def apply(self, cmd):  # noqa: ANN001
        nonlocal checked
        out = original(self, cmd)
        run = self.state.runs.get(self.run_id)
        if run is not None:
            n, s = run_counts(run), summarize(self.state, self.run_id)
            reasons = [i.reason for i in s.incomplete]
            assert (n.state, n.selected, n.running, n.exhausted) == (
                s.state, len(s.selected), reasons.count("running"), reasons.count("exhausted"))
            assert (n.groups_waiting, n.groups_assigned, n.groups_settled) == (
                s.groups_waiting, s.groups_assigned, s.groups_settled)
            assert n.retries == s.attempts_dispatched - sum(1 for c in run.cells.values() if c.attempts)
            checked += 1
        return out

    monkeypatch.setattr(simulate.Simulation, "apply", apply)
    for seed in range(6):
        simulate.run_seed(seed, False)
    assert checked > 1000
