"""The coordinator bench `refill`: slot refill latency seen by 50 simulated workers of 1 slot holding
each group for a while: from the ack of a group's last report to the next push (p50, p99), and from
sending that report to the next push.

Run by `python -m tools.bench.coordinator --only refill` (tools/bench/coordinator.py: sizes, the
table of every figure, the command line).
"""
from __future__ import annotations

import time
from pathlib import Path

from tools.bench.clients import Clients, noop_spec
from tools.bench.harness import START_TIMEOUT_S, Coordinator, Profiler, cpu_seconds, mono, percentile, say
from tools.bench.sizes import Sizes


def bench_refill(sz: Sizes, root: Path, profile: Path | None) -> dict:
    lo, hi = sz.refill_hold_ms
    say(f"Slot refill: {sz.refill_workers} simulated workers x 1 slot, each group held {lo}-{hi} ms, "
        f"{sz.refill_window_s:g} s window")
    coord = Coordinator(root / "refill")
    clients = None
    try:
        coord.submit(noop_spec(sz.refill_groups, cap=sz.refill_workers, name="refillbench"))
        clients = Clients(root / "refill", coord, mode="refill", workers=sz.refill_workers, processes=2, slots=1,
                          hold_ms=(lo, hi))
        coord.wait_workers(sz.refill_workers, START_TIMEOUT_S)
        time.sleep(1.0)
        t0, cpu0 = mono(), cpu_seconds(coord.pid)
        prof = Profiler(profile, "refill", coord.pid, sz.refill_window_s)
        time.sleep(sz.refill_window_s)
        t1, cpu1 = mono(), cpu_seconds(coord.pid)
        prof.finish()
        out = clients.finish()
        clients = None
    finally:
        if clients is not None:
            clients.kill()
        coord.stop()
    samples = [r for r in out["refill"] if t0 <= r[0] <= t1]
    ack = [1000 * r[1] for r in samples]
    sent = [1000 * r[2] for r in samples]
    early = sum(1 for v in ack if v < 0)
    groups_s = len(samples) / (t1 - t0)
    r = {"refill_p50_ms": percentile(ack, 50), "refill_p99_ms": percentile(ack, 99),
         "refill_max_ms": max(ack) if ack else float("nan"),
         "refill_sent_p50_ms": percentile(sent, 50), "refill_sent_p99_ms": percentile(sent, 99),
         "refill_samples": len(samples), "refill_push_before_ack": early, "refill_groups_per_s": groups_s,
         "refill_coordinator_cpu": (cpu1 - cpu0) / (t1 - t0), "refill_repeated_pushes": out["repeats"]}
    say(f"  {len(samples)} refills ({groups_s:.0f} groups/s, coordinator {100 * r['refill_coordinator_cpu']:.0f}% "
        f"of a core): last report's ack -> next push p50 {r['refill_p50_ms']:.2f} ms, p99 {r['refill_p99_ms']:.2f} "
        f"ms, max {r['refill_max_ms']:.2f} ms ({early} pushes before the ack); last report sent -> next push "
        f"p50 {r['refill_sent_p50_ms']:.2f} ms, p99 {r['refill_sent_p99_ms']:.2f} ms; {out['repeats']} repeated "
        "pushes ignored")
    if out["errors"] or out["rejected"]:
        say(f"    client errors {out['error_count']}: {out['errors'][:3]}; rejections {dict(out['rejected'])}")
    return r
