"""Benchmark of the pure core: commands per second on a small run and on a very large one.

    python -m tools.bench.core [--commands N] [--repeats R]

The same command mix (an artifact stored, a cell report and a heartbeat per cell, a
group-finished per group, a clock tick every 20 commands, one report in ten an
infrastructure failure that is retried) is applied to a run of 120 cells and to a run of
100,000 cells, on 50 workers of 4 slots. Submitting the run is not timed. A step must cost in
proportion to what it changes, so the two rates should be within 2x of each other. Prints
the median of R repeats for each and their ratio, measured in this one process.
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time

from common.evidence import ArtifactRef, Cleanup, Execution, Report, Status, Usage, Verification
from common.ids import RunId, WorkerId, sha256_digest
from common.limits import SNAPSHOT_EVERY_RECORDS
from common.policy import Policy
from common.spec import parse_spec
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import OfferRun, PushAssignment

WORKERS = 50
SLOTS = 4
SUBJECTS = 3
TICK_EVERY_COMMANDS = 20
INFRA_FAILURE_EVERY = 10


def make_spec(tasks: int, repetitions: int):
    return parse_spec({
        "benchmark": {"name": "bench"},
        "executor": {"kind": "python"},
        "subjects": [{"id": f"s{i}", "callable": "m:f"} for i in range(SUBJECTS)],
        "tasks": [{"id": f"t{i}"} for i in range(tasks)],
        "repetitions": repetitions,
        "budget": {"timeoutSeconds": 60},
        "verifier": {"callable": "m:v"},
        "execution": {"maxConcurrentTaskGroups": WORKERS * SLOTS},
    })


def reports():
    payload = b"log"
    ref = ArtifactRef("log", sha256_digest(payload), len(payload))
    good = Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE, Cleanup.CONFIRMED,
                  score=1.0, cost_usd=0.001, artifacts=(ref,))
    infra = Report(Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.UNKNOWN,
                   artifacts=(ref,))
    return ref, good, infra


def answer_offers(state, effects, now: int, incarnation: int = 1):
    """Workers of the right build answer each run offer (protocol 3) with the run's own
    reference for the keys it names; returns the state and every effect, the answers' too."""
    out = list(effects)
    for e in effects:
        if isinstance(e, OfferRun):
            values = dict(state.runs[e.run_id].manifest)
            measured = tuple(sorted((k, values[k]) for k in e.keys if k in values))
            state, t = step(state, c.RunEnvironmentMeasured(now, e.worker_id, incarnation, e.run_id, measured))
            out.extend(t.effects)
    return state, out


def drive(spec, budget_commands: int) -> tuple[int, float]:
    """Submit (untimed), then apply the mix until the run settles or the budget is spent."""
    state = new_state()
    policy = Policy(retry_backoff_ms=0, retry_backoff_max_ms=0)
    run_id = RunId("run-bench")
    state, t = step(state, c.RunSubmitted(0, run_id, spec, policy))
    assert t.outcome.ok
    gc.freeze()  # as the actor does after a submit: the run's records leave the collector's walks
    now = 1
    queue: list[PushAssignment] = []
    for i in range(WORKERS):
        state, t = step(state, c.WorkerRegistered(now, WorkerId(f"w{i}"), 1, SLOTS, "env"))
        state, effects = answer_offers(state, t.effects, now)
        queue.extend(e for e in effects if isinstance(e, PushAssignment))
    ref, good, infra = reports()
    n = 0
    k = 0
    started = time.perf_counter()
    while queue and n < budget_commands:
        push = queue.pop(0)
        for cd in push.cells:
            now += 1
            k += 1
            state, _ = step(state, c.ArtifactStored(now, ref.digest, ref.size_bytes))
            report = infra if k % INFRA_FAILURE_EVERY == 0 else good
            state, t = step(state, c.CellReported(now, push.worker_id, cd.attempt_id, push.assignment_id,
                                                  push.generation, report))
            assert t.outcome.ok, t.outcome
            queue.extend(e for e in t.effects if isinstance(e, PushAssignment))
            state, _ = step(state, c.HeartbeatReceived(now, push.worker_id, ()))
            n += 3
            if n % TICK_EVERY_COMMANDS < 3:
                state, t = step(state, c.ClockTicked(now))
                queue.extend(e for e in t.effects if isinstance(e, PushAssignment))
                n += 1
        state, _ = step(state, c.GroupFinished(now, push.worker_id, push.assignment_id))
        n += 1
    return n, time.perf_counter() - started


def measure(spec, commands: int) -> float:
    total_n = 0
    total_s = 0.0
    while total_n < commands:
        n, s = drive(spec, commands - total_n)
        total_n += n
        total_s += s
    return total_n / total_s


def replay_us_per_record(seeds: int = 40) -> tuple[int, float]:
    """Recovery cost: decode and step the logs of simulated runs, as a restart replays them
    after the newest snapshot (this bounds how far apart snapshots may be)."""
    from coordinator.logcodec import decode_record, encode_record
    from tools.sim.simulation import Simulation

    logs = []
    for seed in range(seeds):
        sim = Simulation(seed, check=False)
        sim.run()
        logs.append([encode_record(i, cmd) for i, cmd in enumerate(sim.log, start=1)])
    started = time.perf_counter()
    for records in logs:
        state = new_state()
        for data in records:
            state, _ = step(state, decode_record(data)[1])
    n = sum(len(r) for r in logs)
    return n, (time.perf_counter() - started) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.core", description=__doc__.split("\n\n")[0])
    ap.add_argument("--commands", type=int, default=60_000, help="commands timed per measurement")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    small = make_spec(40, 1)  # 120 cells
    large = make_spec(33_334, 1)  # 100,002 cells
    rates = {"small": [], "large": []}
    for _ in range(args.repeats):
        rates["small"].append(measure(small, args.commands))
        rates["large"].append(measure(large, args.commands))
    s, l = statistics.median(rates["small"]), statistics.median(rates["large"])
    print(f"core step, {args.commands} commands x {args.repeats} repeats, medians:")
    print(f"  run of {small.cell_count:>7} cells: {s:>9.0f} commands/s  ({1e6 / s:.1f} us/command)")
    print(f"  run of {large.cell_count:>7} cells: {l:>9.0f} commands/s  ({1e6 / l:.1f} us/command)")
    print(f"  small/large per-command cost ratio: {s / l:.2f} (target: within 2x)")
    print(f"  versus the reference's ~1.7 ms/command: {1.7e-3 * l:.0f}x faster on the large run")
    n, us = replay_us_per_record()
    print(f"  log replay (decode + step) of {n} records: {us:.1f} us/record, so "
          f"{SNAPSHOT_EVERY_RECORDS:,} records between snapshots replay in about {us * SNAPSHOT_EVERY_RECORDS / 1e6:.1f} s")
    return 0 if s / l <= 2.0 else 1


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
