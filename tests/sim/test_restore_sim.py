"""The seeded simulation's restore from a backup as a test (issue 23): a backup mid-run, then the
coordinator restored from it (a coordinator that lost its log's tail) while the workers live on
with their outboxes and what they kept, on top of the default faults (and with stalls and a
black hole), with every invariant after every durable command; no attempt id issued after the
restore repeats one issued before it, every cell whose acknowledged result was lost ends
selected, and one whose worker no fault of its own delayed is not paid for again. Then proof
the check has teeth: workers that keep nothing acknowledged make cells run again, and it says so."""
from __future__ import annotations

import os

import pytest

from tests.sim.seedpool import run_seeds
from tools.sim import simulation

# 20 seeds of the restore and 10 with every extra fault took about 10 s on two cores;
# FLEET_SIM_RESTORE_SEEDS changes the first set (e.g. "0-499", about a minute and a half).
SEEDS = os.environ.get("FLEET_SIM_RESTORE_SEEDS", "0-19")
ALL_SEEDS = os.environ.get("FLEET_SIM_RESTORE_ALL_SEEDS", "0-9")
TOTALS = ("restores", "lost_records", "lost_acked", "adopted", "offers_late", "run_again")


def _many(text: str, faults: tuple[str, ...]) -> dict:
    return run_seeds(text, faults, TOTALS)


def test_a_restore_from_a_backup_holds_every_invariant_and_adopts_what_the_workers_kept() -> None:
    total = _many(SEEDS, ("restore",))
    assert total["restores"] == total["seeds"], "every seed restores once"
    assert total["lost_records"] > 0 and total["lost_acked"] > 0, "no restore lost an acknowledged result"
    assert total["adopted"] >= total["lost_acked"] * 3 // 4, f"most lost results are adopted: {total}"


def test_a_restore_among_stalls_and_a_black_hole_holds_every_invariant() -> None:
    total = _many(ALL_SEEDS, ("stall", "blackhole", "restore"))
    assert total["restores"] == total["seeds"] and total["adopted"] > 0


def test_workers_that_keep_nothing_acknowledged_pay_again_and_the_check_says_so() -> None:
    caught = 0
    for seed in range(6):
        try:
            simulation.run_seed(seed, True, faults=("restore",), keep_acknowledged=False)
        except simulation.SimFailure as e:
            assert "ran again after the restore" in str(e), e
            caught += 1
    assert caught >= 4, f"only {caught} of 6 seeds caught cells paid for again"
