"""Seeded simulation of a fleet run: the real core, virtual time, a faulty in-memory network.

    python -m tools.sim --seed 42              one run, one JSON object on stdout
    python -m tools.sim --seeds 0-299 --check  many runs, invariants after every command
    python -m tools.sim --scale --workers 500 --cells 20000
                                               the scale scenario, smaller (tools/sim/scale.py)
    python -m tools.sim --seeds 0-99 --order-check
                                               each seed twice on one coordinator: a run,
                                               then the same spec ordered from it; both
                                               must select exactly the same
    python -m tools.sim --seeds 0-299 --check --providers
                                               the providers scenario: subjects on simulated
                                               model providers that admit K cells at once
                                               and throttle past K (or all, in an outage)
    python -m tools.sim --seeds 0-99 --provider-check
                                               each seed quiet with providers and without:
                                               both must select the same (run_provider_check)
    python -m tools.sim --seeds 0-99 --check --faults stall
                                               coordinator stalls: the coordinator freezes past
                                               the expiry while workers run on; then a
                                               CoordinatorStalled, then what they buffered
    python -m tools.sim --seeds 0-99 --check --faults blackhole
                                               a black-hole worker: from a seeded moment it
                                               fails every attempt fast (a full disk), and
                                               may recover; quarantine must keep it from
                                               exhausting cells (--faults stall,blackhole: both)
    python -m tools.sim --seeds 0-99 --check --faults restore
                                               a backup, then the coordinator restored from it
                                               (the log's tail lost) while the workers live on:
                                               no id issued twice, every lost result's cell
                                               selected, and adopted (not run again) wherever
                                               no fault of its worker's own delayed its offer
    python -m tools.sim --seeds 0-99 --check --faults ops
                                               the operator and the hosts: a worker's disk full
                                               for a while, a drained worker that exits and
                                               comes back, retries granted, a spend cap raised
                                               each time the run pauses on it; no group goes
                                               to a full disk or a drained worker

The model is tools/sim/simulation.py, the scale scenario tools/sim/scale.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from tools.sim import scale
from tools.sim.simulation import EXTRA_FAULTS, SimFailure, run_order_check, run_provider_check, run_seed


def parse_faults(text: str) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    for n in names:
        if n not in EXTRA_FAULTS:
            raise argparse.ArgumentTypeError(f"unknown fault {n!r}: one of {', '.join(EXTRA_FAULTS)}")
    return names


def parse_range(text: str) -> range:
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.sim", description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--seed", type=int, default=42, help="one seed; prints its JSON report")
    group.add_argument("--seeds", type=parse_range, help="a range A-B of seeds")
    ap.add_argument("--check", action="store_true", help="check invariants after every durable command")
    ap.add_argument("--no-trace", action="store_true", help="leave the trace out of the report")
    ap.add_argument("--order-check", action="store_true",
                    help="per seed, a quiet run and the same spec ordered from it must select the same")
    ap.add_argument("--providers", action="store_true",
                    help="the providers scenario: subjects on simulated model providers that admit a few "
                         "cells at once and throttle the rest (tools.sim.simulation.draw_providers)")
    ap.add_argument("--faults", type=parse_faults, default=(),
                    help="extra faults, comma-separated: stall (the coordinator freezes past the expiry, "
                         "then applies CoordinatorStalled), blackhole (a worker fails every attempt fast), restore "
                         "(a restore from a backup that lost the log's tail), ops (full disks, a drain, "
                         "retry grants, a spend cap raised)")
    ap.add_argument("--provider-check", action="store_true",
                    help="per seed, a quiet run with providers and one without must select the same")
    ap.add_argument("--scale", action="store_true",
                    help="the scale scenario (tools/sim/scale.py): 10,000 workers x 4 slots, 1,000,000 cells, "
                         "invariants checked incrementally and at checkpoints")
    ap.add_argument("--no-check", action="store_true", help="with --scale: no invariant checks")
    scale.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.scale:
        return scale.main(args)
    if args.provider_check:
        seeds = args.seeds if args.seeds is not None else range(args.seed, args.seed + 1)
        started = time.perf_counter()
        checked = []
        for seed in seeds:
            try:
                checked.append(run_provider_check(seed))
            except SimFailure as e:
                print(f"FAIL {e}\nreplay: python -m tools.sim --seed {e.seed} --provider-check", file=sys.stderr)
                return 1
        ended: dict[str, int] = {}
        for one in checked:
            for k, n in one["ended"].items():
                ended[k] = ended.get(k, 0) + n
        print(json.dumps({"provider_check": f"{seeds.start}-{seeds.stop - 1}", "passed": len(checked),
                          "ended": ended, "throttled": sum(one["throttled"] for one in checked),
                          "seconds": round(time.perf_counter() - started, 2)}, sort_keys=True))
        return 0
    if args.order_check:
        seeds = args.seeds if args.seeds is not None else range(args.seed, args.seed + 1)
        started = time.perf_counter()
        checked = []
        for seed in seeds:
            try:
                checked.append(run_order_check(seed))
            except SimFailure as e:
                print(f"FAIL {e}\nreplay: python -m tools.sim --seed {e.seed} --order-check", file=sys.stderr)
                return 1
        print(json.dumps({"order_check": f"{seeds.start}-{seeds.stop - 1}", "passed": len(checked),
                          "reordered": sum(c["reordered"] for c in checked),
                          "seconds": round(time.perf_counter() - started, 2)}, sort_keys=True))
        return 0
    if args.seeds is None:
        try:
            report = run_seed(args.seed, args.check, args.providers, args.faults)
        except SimFailure as e:
            flag = (" --providers" if args.providers else "") + (
                f" --faults {','.join(args.faults)}" if args.faults else "")
            print(f"FAIL {e}\nreplay: python -m tools.sim --seed {e.seed} --check{flag}", file=sys.stderr)
            return 1
        if args.no_trace:
            report.pop("trace")
        print(json.dumps(report, sort_keys=True, indent=1))
        return 0
    started = time.perf_counter()
    totals = {"selected": 0, "incomplete": 0, "late_reports": 0, "restarts": 0}
    for seed in args.seeds:
        try:
            report = run_seed(seed, args.check, args.providers, args.faults)
        except SimFailure as e:
            flag = (" --providers" if args.providers else "") + (
                f" --faults {','.join(args.faults)}" if args.faults else "")
            print(f"FAIL {e}\nreplay: python -m tools.sim --seed {e.seed} --check{flag}", file=sys.stderr)
            return 1
        totals["selected"] += report["summary"]["selected"]
        totals["incomplete"] += report["summary"]["incomplete"]
        totals["late_reports"] += report["summary"]["late_reports"]
        totals["restarts"] += report["stats"]["coordinator_restarts"]
        if args.providers:
            totals["throttled"] = totals.get("throttled", 0) + sum(
                p.get("sim_refused", 0) for p in report["providers"].values())
            totals["provider_throttled"] = totals.get("provider_throttled", 0) + sum(
                1 for i in report["incomplete"] if i["reason"] == "provider_throttled")
        if args.faults:
            for k in ("stalls", "stall_frames", "blackhole_failures", "quarantines", "probes", "restores",
                      "lost_records", "lost_acked", "adopted", "offers_late", "run_again", "answered_revokes",
                      "degraded", "drains", "goodbyes", "grants", "grants_refused", "cap_pauses", "cap_raises",
                      "releases", "unstarted"):
                if k in report["extra_faults"]:
                    totals[k] = totals.get(k, 0) + report["extra_faults"][k]
    elapsed = time.perf_counter() - started
    n = len(args.seeds)
    extra = ({"providers": True} if args.providers else {}) | ({"faults": ",".join(args.faults)} if args.faults else {})
    print(json.dumps({"seeds": f"{args.seeds.start}-{args.seeds.stop - 1}", "passed": n, "check": args.check,
                      "seconds": round(elapsed, 2), "seconds_per_seed": round(elapsed / n, 4), **totals, **extra},
                     sort_keys=True))
    return 0
