"""Seeds of the simulation with extra faults, spread over two processes (tests/sim/conftest.py
starts them from a fork server): every seed checked after every durable command, the first
failure reported with the command that replays it, and the named totals of the reports summed."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from tools.sim import cli, simulation


def _run(args: tuple[range, tuple[str, ...], tuple[str, ...]]) -> tuple[int, str, dict]:
    seeds, faults, totals_of = args
    totals = dict.fromkeys(totals_of, 0) | {"seeds": 0}
    for seed in seeds:
        try:
            report = simulation.run_seed(seed, True, faults=faults)
        except simulation.SimFailure as e:
            return seed, str(e), totals
        totals["seeds"] += 1
        for k in totals_of:
            totals[k] += report["extra_faults"][k]
    return -1, "", totals


def run_seeds(text: str, faults: tuple[str, ...], totals_of: tuple[str, ...]) -> dict:
    """Seeds `text` ("0-23") with `faults`; the sums of `totals_of` and "seeds"."""
    seeds = cli.parse_range(text)
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_run, [(seeds[0::2], faults, totals_of), (seeds[1::2], faults, totals_of)]))
    for seed, failure, _ in results:
        assert seed < 0, f"{failure}\nreplay: python -m tools.sim --seed {seed} --check --faults {','.join(faults)}"
    total = {k: sum(part[k] for _, _, part in results) for k in (*totals_of, "seeds")}
    assert total["seeds"] == len(seeds)
    return total
