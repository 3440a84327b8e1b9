"""A model provider's limit on real processes: wall time against the ideal, refusals, lost cells.

    python -m tools.bench.providers [--quick] [--tasks 40] [--limit 6] [--hold-s 0.5]
                                    [--repeats 1] [--modes declared,undeclared,unnamed] [--json FILE]

The workload (issue 22): a coordinator and 4 `fleet-worker` processes x 2 slots on 127.0.0.1
(`maxConcurrentTaskGroups` 8) run the provider bench (tests/fixtures/provbench: TASKS tasks x
3 subjects, each subject one POST to the provider) against the fake provider of
tests/integration/fakeprovider.py: at most `--limit` requests at once, each held `--hold-s`,
the rest answered 429 with Retry-After 1 s at once (the subject then leaves throttled.json and
exits 75). Ideal wall time: cells x hold / limit. Per mode, a fresh coordinator and workers:

  declared    the spec names provider "fake", the policy declares maxConcurrentCells = limit;
  undeclared  the spec names "fake", the policy declares no limit (the core finds it);
  unnamed     no provider in the spec or the policy (today's spec, unchanged).

Per mode: wall time from submit to the run settling and that over the ideal, requests, refused
(429) and the most admitted at once at the provider, cells selected and incomplete (by
reason). The policy is the integration tests' fast one (maxAttemptsPerCell 3). Every process
is started here and stopped by its pid; every wait is bounded.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.fixtures.provbench.make_spec import provbench_spec, url_env
from tests.integration.fakeprovider import FakeProvider
from tests.integration.harness import FAST_POLICY, REPO, Cluster

PROVBENCH = REPO / "tests" / "fixtures" / "provbench"
WORKERS, SLOTS, CAP = 4, 2, 8
SUBJECTS = ("s0", "s1", "s2")
RETRY_AFTER_S = 1.0
SETTLE_TIMEOUT_S = 300
MODES = ("declared", "undeclared", "unnamed")


def say(msg: str) -> None:
    print(msg, flush=True)


def once(root: Path, mode: str, tasks: int, limit: int, hold_s: float) -> dict[str, Any]:
    provider = FakeProvider(limit=limit, hold_s=hold_s, retry_after_s=RETRY_AFTER_S).start()
    cluster = Cluster(root, extra_env={url_env("fake"): provider.url})
    try:
        named = "" if mode == "unnamed" else "fake"
        spec = provbench_spec(tasks, {s: named for s in SUBJECTS}, cap=CAP)
        policy = dict(FAST_POLICY)
        if mode == "declared":
            policy["providers"] = {"fake": {"maxConcurrentCells": limit}}
        cluster.start_coordinator()
        for i in range(WORKERS):
            cluster.start_worker(f"w{i}", slots=SLOTS, bench_root=PROVBENCH)
        deadline = time.monotonic() + 30  # every worker registered before the clock starts
        while sum(1 for w in cluster.status().get("workers", ()) if w.get("status") == "active") < WORKERS:
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register within 30 s\n" + cluster.tails())
            time.sleep(0.1)
        t0 = time.monotonic()
        run_id = cluster.submit(spec, policy)
        results = cluster.wait_settled(run_id, SETTLE_TIMEOUT_S)
        wall = time.monotonic() - t0
        # The coordinator's view of its providers at the end (effective limit), where it has one.
        provider_status = cluster.status().get("providers")
    finally:
        cluster.stop_all()
        provider.stop()
    stats = provider.stats()
    cells = results["cells"]
    reasons: dict[str, int] = {}
    for c in cells:
        if c["state"] != "selected":
            reasons[c["incomplete_reason"] or "?"] = reasons.get(c["incomplete_reason"] or "?", 0) + 1
    ideal = len(cells) * hold_s / limit
    # How long a selected cell ran (its subject's and verifier's wall, the report's own times),
    # and the provider's use: admitted requests x hold over wall x limit.
    spans = sorted((c["finished_ms"] - c["started_ms"]) / 1000 for c in cells
                   if c["state"] == "selected" and c["started_ms"] is not None and c["finished_ms"] is not None)
    return {"mode": mode, "cells": len(cells), "wall_s": wall, "ideal_s": ideal, "ratio": wall / ideal,
            "requests": stats["total"], "refused": stats["refused"], "admitted": stats["admitted"],
            "max_at_once": stats["max_at_once"], "selected": results["summary"]["selected"],
            "incomplete": results["summary"]["incomplete"], "incomplete_reasons": reasons,
            "throttled_attempts": results["summary"].get("throttled_attempts"),
            "peak_concurrent_groups": results["summary"]["peak_concurrent_groups"],
            "usage_complete": results["summary"]["usage_complete"],
            "cell_s_median": statistics.median(spans) if spans else None,
            "provider_busy": stats["admitted"] * hold_s / (wall * limit),
            "coordinator_providers": provider_status}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.providers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="12 tasks (36 cells), one repeat")
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--limit", type=int, default=6, help="the provider's requests at once")
    ap.add_argument("--hold-s", type=float, default=0.5, help="how long the provider holds each request")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of: {', '.join(MODES)}")
    ap.add_argument("--keep", type=Path, help="keep the scratch dirs (logs, data dirs) here")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    args = ap.parse_args(argv)
    tasks = 12 if args.quick else args.tasks
    repeats = 1 if args.quick else args.repeats
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        ap.error(f"unknown mode {unknown[0]} (known: {', '.join(MODES)})")
    cells = tasks * len(SUBJECTS)
    say(f"workload: {tasks} tasks x {len(SUBJECTS)} subjects = {cells} cells; {WORKERS} workers x {SLOTS} slots, "
        f"cap {CAP} groups; provider limit {args.limit}, hold {args.hold_s} s, Retry-After {RETRY_AFTER_S:g} s; "
        f"ideal {cells * args.hold_s / args.limit:.2f} s")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-providers-") as tmp:
        base = args.keep or Path(tmp)
        for r in range(repeats):
            for mode in modes:
                fig = once(base / f"{mode}-{r}", mode, tasks, args.limit, args.hold_s)
                runs[mode].append(fig)
                say(f"  {mode:10s} wall {fig['wall_s']:6.2f} s = {fig['ratio']:.2f} x ideal; requests {fig['requests']}, "
                    f"refused {fig['refused']} ({fig['refused'] / max(1, fig['requests']):.0%}), max at once "
                    f"{fig['max_at_once']}; selected {fig['selected']}, incomplete {fig['incomplete']} "
                    f"{fig['incomplete_reasons'] or ''}; peak groups {fig['peak_concurrent_groups']}; cell median "
                    f"{fig['cell_s_median'] or 0:.2f} s; provider busy {fig['provider_busy']:.0%}")
    out: dict[str, Any] = {"tasks": tasks, "cells": cells, "limit": args.limit, "hold_s": args.hold_s,
                           "ideal_s": cells * args.hold_s / args.limit, "workers": WORKERS, "slots": SLOTS,
                           "repeats": repeats, "runs": runs}
    if repeats > 1:
        say(f"\nmedian of {repeats}")
        for mode, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("wall_s", "ratio", "requests", "refused", "incomplete", "provider_busy")}
            out[f"median_{mode}"] = med
            say(f"  {mode:10s} wall {med['wall_s']:.2f} s = {med['ratio']:.2f} x ideal; requests {med['requests']:g}, "
                f"refused {med['refused']:g}, incomplete {med['incomplete']:g}; provider busy {med['provider_busy']:.0%}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
