"""The seeded simulation's extra faults as a test (issue 23): coordinator stalls past the expiry
and a black-hole worker that fails every attempt fast, on top of the default faults, with every
invariant after every durable command; then proof that both checks have teeth (a shell that
applies a plain tick after a stall, a policy without quarantine)."""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from tools.sim import cli, simulation

# 24 seeds with both faults took about 12 s on two cores; FLEET_SIM_FAULT_SEEDS changes them and
# FLEET_SIM_FAULT_SOAK_SEEDS widens the soak set (e.g. "0-1999").
SEEDS = os.environ.get("FLEET_SIM_FAULT_SEEDS", "0-23")
SOAK_SEEDS = os.environ.get("FLEET_SIM_FAULT_SOAK_SEEDS", "0-299")
BOTH = ("stall", "blackhole")
TOTALS = ("stalls", "stall_frames", "blackhole_failures", "quarantines", "probes", "forgiven")


def _run(seeds: range) -> tuple[int, str, dict]:
    totals = dict.fromkeys(TOTALS, 0) | {"seeds": 0}
    for seed in seeds:
        try:
            report = simulation.run_seed(seed, True, faults=BOTH)
        except simulation.SimFailure as e:
            return seed, str(e), totals
        totals["seeds"] += 1
        for k in TOTALS:
            totals[k] += report["extra_faults"][k]
    return -1, "", totals


def _many(text: str) -> dict:
    seeds = cli.parse_range(text)
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_run, [seeds[0::2], seeds[1::2]]))
    for seed, failure, _ in results:
        assert seed < 0, f"{failure}\nreplay: python -m tools.sim --seed {seed} --check --faults stall,blackhole"
    total = {k: sum(part[k] for _, _, part in results) for k in (*TOTALS, "seeds")}
    assert total["seeds"] == len(seeds)
    return total


def test_stalls_and_black_holes_hold_every_invariant() -> None:
    """Stalls and a black hole beside the default faults: the core's invariants hold after every
    durable command; no worker alive and connected throughout a stall is expired, lost or has
    an assignment superseded after it; no cell ends exhausted by the black hole's failures while
    another worker succeeds; and the run settles."""
    total = _many(SEEDS)
    assert total["stalls"] > 0 and total["stall_frames"] > 0, "no stall froze the coordinator with frames waiting"
    assert total["blackhole_failures"] > 0, "the black hole failed nothing"
    assert total["quarantines"] > 0 and total["probes"] > 0, "the black hole was never quarantined and probed"


@pytest.mark.soak
@pytest.mark.skipif("FLEET_SIM_FAULT_SOAK_SEEDS" not in os.environ,
                    reason="the wide soak (FLEET_SIM_FAULT_SOAK_SEEDS=0-299, about a minute); CI runs the 24 seeds above")
def test_stalls_and_black_holes_soak() -> None:
    _many(SOAK_SEEDS)


def test_a_stall_without_the_stall_command_expires_live_workers() -> None:
    """The stall check has teeth: the same freeze followed by a plain tick (a shell that did not
    turn the late tick into a CoordinatorStalled) expires workers that were alive and connected
    throughout, whose cells then run twice."""
    for seed in range(4):
        with pytest.raises(simulation.SimFailure, match="alive and connected throughout a stall"):
            simulation.run_seed(seed, True, faults=("stall",), stall_command=False)
        report = simulation.run_seed(seed, True, faults=("stall",))  # and with it: none
        assert report["extra_faults"]["stalls"] >= 1 and not report["extra_faults"]["stall_problems"]


def test_a_black_hole_without_quarantine_exhausts_cells() -> None:
    """The black-hole check has teeth: with quarantine off (quarantine_after_failures 0) the black
    hole burns cells' attempts until they end exhausted, and the check says so."""
    failed = []
    for seed in range(5):
        try:
            simulation.run_seed(seed, True, faults=("blackhole",), policy_overrides={"quarantine_after_failures": 0})
        except simulation.SimFailure as e:
            assert "black-hole worker" in e.what, e
            failed.append(seed)
        report = simulation.run_seed(seed, True, faults=("blackhole",))  # with quarantine: none
        assert not report["extra_faults"]["blackhole_problems"]
    assert len(failed) >= 3, f"only seeds {failed} of 0-4 failed without quarantine"


def test_the_extra_faults_leave_the_default_scenario_alone() -> None:
    """A seed without extra faults prints what it printed before they existed (tests/golden holds
    the bytes); with them, the report says which were drawn."""
    plain = simulation.run_seed(9, False)
    assert "extra_faults" not in plain
    with_faults = simulation.run_seed(9, False, faults=BOTH)
    assert with_faults["faults"] == plain["faults"]
    assert with_faults["extra_faults"]["names"] == list(BOTH)
