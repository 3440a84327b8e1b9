"""The seeded simulation's providers scenario as a test: subjects on simulated model providers
that admit a few cells at once and throttle the rest, invariants after every durable command,
and, per seed, a quiet run with provider limits against the same seed without them (both must
select the same); then proof that breaking the core's providers is caught."""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from common.evidence import Cleanup, Execution, Verification
from coordinator.core import machine, providers
from coordinator.core.state import RunState
from tools.sim import cli, simulation

# 20 faulty seeds and 30 compared ones took 30 s on the 2-core VM of tests/sim/test_simulation.py;
# FLEET_SIM_PROVIDER_SEEDS and FLEET_SIM_PROVIDER_CHECK_SEEDS widen them (e.g. "0-299").
SEEDS = os.environ.get("FLEET_SIM_PROVIDER_SEEDS", "0-19")
CHECK_SEEDS = os.environ.get("FLEET_SIM_PROVIDER_CHECK_SEEDS", "0-14")


def _run(seeds: range) -> tuple[int, str, dict]:
    totals = {"refused": 0, "outages": 0, "provider_throttled": 0, "seeds": 0}
    for seed in seeds:
        try:
            report = simulation.run_seed(seed, True, providers=True)
        except simulation.SimFailure as e:
            return seed, str(e), totals
        totals["seeds"] += 1
        totals["refused"] += sum(p.get("sim_refused", 0) for p in report["providers"].values())
        totals["outages"] += sum(1 for p in report["providers"].values() if p.get("sim_outage_ms", [0, 0])[1])
        totals["provider_throttled"] += sum(1 for i in report["incomplete"] if i["reason"] == "provider_throttled")
    return -1, "", totals


def _check(seeds: range) -> tuple[int, str, dict]:
    totals = {"throttled": 0, "selected": 0, "provider_throttled": 0, "exhausted": 0}
    for seed in seeds:
        try:
            out = simulation.run_provider_check(seed)
        except simulation.SimFailure as e:
            return seed, str(e), totals
        totals["throttled"] += out["throttled"]
        for k in ("selected", "provider_throttled", "exhausted"):
            totals[k] += out["ended"].get(k, 0)
    return -1, "", totals


def _sum(results: list[tuple[int, str, dict]]) -> dict:
    total: dict[str, int] = {}
    for _, _, part in results:
        for k, n in part.items():
            total[k] = total.get(k, 0) + n
    return total


@pytest.mark.soak
def test_the_providers_scenario_holds_every_invariant_under_faults() -> None:
    """Faults of every kind, providers that throttle past their capacity (and some in an outage):
    the core's invariants and the providers' (tools.sim.invariants.provider_step_problems) hold
    after every durable command, and the run settles, a cell incomplete only as exhausted or
    provider_throttled."""
    seeds = cli.parse_range(SEEDS)
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_run, [seeds[0::2], seeds[1::2]]))
    for seed, failure, _ in results:
        assert seed < 0, f"{failure}\nreplay: python -m tools.sim --seed {seed} --check --providers"
    total = _sum(results)
    assert total["seeds"] == len(seeds)
    assert total["refused"] > 0, "no simulated provider ever throttled"
    assert total["outages"] > 0, "no provider ever had an outage"


@pytest.mark.soak
def test_a_limited_run_selects_exactly_what_an_unlimited_one_selects() -> None:
    """Per seed, quiet: with limits and throttling providers, and without either. Every cell
    selected with providers is selected without, on the same counted attempt with the same
    status and score; an exhausted one is exhausted after the same counted attempts; one that
    ran out of throttled attempts had not reached its unlimited selection (run_provider_check)."""
    seeds = cli.parse_range(CHECK_SEEDS)
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_check, [seeds[0::2], seeds[1::2]]))
    for seed, failure, _ in results:
        assert seed < 0, f"{failure}\nreplay: python -m tools.sim --seed {seed} --provider-check"
    total = _sum(results)
    assert total["throttled"] > 0, "nothing was throttled: the comparison compared nothing"
    assert total["selected"] > 0.9 * 120 * len(seeds)
    assert total["provider_throttled"] > 0, "no cell ever ran out of throttled attempts"


def test_the_providers_scenario_is_deterministic_and_off_by_default() -> None:
    a = simulation.run_seed(5, True, providers=True)
    b = simulation.run_seed(5, True, providers=True)
    assert a == b
    assert set(a["providers"]) == {"alpha", "beta", "default"}
    sim = simulation.Simulation(5, check=False)
    assert not sim.providers and all(not s.provider for s in sim.spec.subjects) and not sim.policy.providers
    assert "providers" not in simulation.run_seed(5, False)


def test_the_cli_reaches_the_providers_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--seeds", "3-3", "--check", "--providers"]) == 0
    assert '"providers": true' in capsys.readouterr().out
    assert cli.main(["--seed", "3", "--provider-check"]) == 0
    assert '"provider_check": "3-3"' in capsys.readouterr().out


def _selects_throttled(r):  # noqa: ANN001, ANN202
    return (r.execution in (Execution.COMPLETED, Execution.SUBJECT_FAILED) and r.cleanup == Cleanup.CONFIRMED
            and not r.environment_failure and (r.verification == Verification.VALID or bool(r.throttled)))


def _counts_throttled(self, cell):  # noqa: ANN001, ANN202
    return len(cell.attempts) < self.max_attempts(cell) and cell.throttled < self.max_throttled(cell)


@pytest.mark.parametrize("breakage", ["ignores_limits", "ignores_retry_after", "selects_throttled",
                                      "counts_throttled_as_attempts"])
def test_a_broken_core_is_caught(monkeypatch: pytest.MonkeyPatch, breakage: str) -> None:
    """Each breakage is caught by the first seed (seed 0) in the checks named: the limits by
    the dispatch checks, the retry-after by provider_step_problems, a throttled selection by
    the core's check, and throttled attempts counted as attempts only by the comparison (cells
    then end exhausted that the unlimited run selects)."""
    if breakage == "ignores_limits":
        monkeypatch.setattr(providers, "blocking", lambda state, need: "")
    elif breakage == "ignores_retry_after":
        monkeypatch.setattr(providers, "retry_after_ms", lambda report: 0)
    elif breakage == "selects_throttled":
        monkeypatch.setattr(machine, "is_selectable", _selects_throttled)
    else:
        monkeypatch.setattr(RunState, "attempts_left", _counts_throttled)
    caught = ""
    for seed in range(3):
        try:
            if breakage == "counts_throttled_as_attempts":
                simulation.run_provider_check(seed)
            else:
                simulation.run_seed(seed, True, providers=True)
        except simulation.SimFailure as e:
            caught = str(e)
            break
    assert caught, f"breaking the core ({breakage}) went unnoticed by 3 seeds"
