"""The coordinator bench `idle`: 1,000 registered sessions (4 client processes, asyncio) for 30 s, no
run, twice: protocol 3 (a heartbeat every 1 s), then protocol 4 (liveness by the coordinator's
keepalive pings, a heartbeat only at the idle interval): coordinator CPU share (utime+stime from
/proc/PID/stat) and VmRSS. reports durable reports/s from 64 simulated workers of protocol 4 (a
group's reports in one ReportBatch): 3-cell groups with 2 and with 8 slots per worker, 32-cell
groups with 2; each run has 360,000 cells so that it outlasts the window (checked after it).

Run by `python -m tools.bench.coordinator --only idle` (tools/bench/coordinator.py: sizes, the
table of every figure, the command line).
"""
from __future__ import annotations

import time
from pathlib import Path

from tools.bench.clients import Clients
from tools.bench.harness import Coordinator, Profiler, cpu_seconds, memory_kb, mono, say
from tools.bench.sizes import Sizes


def bench_idle(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Twice, back to back: sessions of protocol 3 (a heartbeat every 1 s), then of protocol 4
    (liveness by the coordinator's HTTP/2 keepalive pings, a heartbeat only on change or at the
    idle interval, as fleet-worker does)."""
    out: dict = {}
    for protocol in (3, 4):
        r = _idle_once(sz, root / f"idle-p{protocol}", profile, protocol)
        out[f"idle_p{protocol}"] = r
    out.update(out["idle_p4"])
    out["idle_cpu_p3"] = out["idle_p3"]["idle_cpu"]
    say(f"  protocol 4 / protocol 3 idle CPU: {out['idle_cpu'] / out['idle_cpu_p3']:.2f}")
    return out


def _idle_once(sz: Sizes, root: Path, profile: Path | None, protocol: int) -> dict:
    say(f"Idle fleet, protocol {protocol}: {sz.idle_workers} sessions in {sz.idle_clients} client processes "
        f"for {sz.idle_window_s:g} s, no run"
        + (" (a heartbeat every 1 s)" if protocol < 4 else " (keepalive pings; heartbeats on change)"))
    coord = Coordinator(root)
    clients = None
    try:
        rss_start = memory_kb(coord.pid)["VmRSS"]
        clients = Clients(root, coord, mode="idle", workers=sz.idle_workers, processes=sz.idle_clients,
                          ramp_s=min(10.0, sz.idle_workers / 200), protocol=protocol)
        t_reg = mono()
        coord.wait_workers(sz.idle_workers, 120)
        registered_s = mono() - t_reg
        time.sleep(2.0)  # every session past its first heartbeat
        t0, cpu0 = mono(), cpu_seconds(coord.pid)
        prof = Profiler(profile, f"idle-p{protocol}", coord.pid, sz.idle_window_s)
        time.sleep(sz.idle_window_s)
        t1, cpu1 = mono(), cpu_seconds(coord.pid)
        prof.finish()
        mem = memory_kb(coord.pid)
        active_end = coord.active_workers()
        out = clients.finish()
        clients = None
    finally:
        if clients is not None:
            clients.kill()
        coord.stop()
    r = {"idle_cpu": (cpu1 - cpu0) / (t1 - t0), "idle_rss_mb": mem["VmRSS"] / 1024, "idle_hwm_mb": mem["VmHWM"] / 1024,
         "idle_rss_start_mb": rss_start / 1024, "idle_active_end": active_end, "idle_registered_s": registered_s}
    say(f"  {active_end} active at the end (all {sz.idle_workers} registered within {registered_s:.1f} s): "
        f"coordinator {100 * r['idle_cpu']:.1f}% of one core, VmRSS {r['idle_rss_mb']:.0f} MB (peak "
        f"{r['idle_hwm_mb']:.0f} MB; {r['idle_rss_start_mb']:.0f} MB before any session)")
    if active_end < sz.idle_workers:
        raise RuntimeError(f"idle, protocol {protocol}: only {active_end} of {sz.idle_workers} sessions active")
    if out["errors"]:
        say(f"    client errors {out['error_count']}: {out['errors'][:3]}")
    return r
