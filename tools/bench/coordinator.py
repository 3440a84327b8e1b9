"""Benchmarks of the coordinator on loopback; every figure is a ratio measured in this one run.

    python -m tools.bench.coordinator [--only NAME[,NAME...]] [--quick] [--json FILE] [--profile DIR]

NAME is one of:
  w1      2,000 groups x 3 no-op python-executor cells on 4 `fleet-worker` processes x 2 slots,
          coordinator and workers on this machine, every cell durably committed: cells/s from
          SubmitRun to the run's completion and CPU per 1,000 cells per role; and the same
          workload on Dask distributed, on Celery+Redis (late acks, appendfsync always) and on
          Celery+Redis as both come (celery-defaults: shown, not a target), run here in the
          same run by tools/bench/peers.py (`pip install -e '.[bench]'`, `apt-get install
          redis-server`), in rounds of one run of every system each (the host drifts), and
          the ratios: of the medians, and per round.
  commit  durable commands/s with 64 simulated workers (raw `Coordinator.Session` clients in 2
          processes: hello, welcome, pushes, cell reports, acks, group finished) against the
          same coordinator with batching off (`Actor(batch_max=1)`: one LMDB transaction per
          command), and against bare LMDB commits of the same record size and batch size with
          sync=True on the same disk. Also the actor alone, in process, over the same closed
          loop of requests, with and without batching.
  refill  slot refill latency seen by 50 simulated workers of 1 slot holding each group for a
          while: from the ack of a group's last report to the next push (p50, p99), and from
          sending that report to the next push.
  idle    1,000 registered sessions (4 client processes, asyncio) for 30 s, no run, twice:
          protocol 3 (a heartbeat every 1 s), then protocol 4 (liveness by the coordinator's
          keepalive pings, a heartbeat only at the idle interval): coordinator CPU share
          (utime+stime from /proc/PID/stat) and VmRSS.
  reports durable reports/s from 64 simulated workers of protocol 4 (a group's reports in one
          ReportBatch): 3-cell groups with 2 and with 8 slots per worker, 32-cell groups with
          2; each run has 360,000 cells so that it outlasts the window (checked after it).
  upload  MB/s of a 64 MiB artifact uploaded in 1 MiB chunks through a session (8 chunks in
          flight, as the worker does), against SHA-256 plus write-and-fsync of the same bytes.

Each NAME is a file of tools/bench/ (w1.py, commit.py, refill.py, idle.py, reports.py,
upload.py; their sizes are sizes.py); this file runs them and prints the table of every figure.
`--quick` shrinks every benchmark (about a minute in all) for a smoke check. `--profile DIR`
samples the coordinator with py-spy (when installed) during each measured window and prints
its hottest functions. Every process is started here, stopped by its pid, and every load loop
ends by itself (a stop file, and a hard deadline). Only 127.0.0.1.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from tools.bench import commit, idle, refill, reports, upload, w1
from tools.bench.clients import SUBJECTS
from tools.bench.harness import Coordinator, Profiler, mono, say
from tools.bench.sizes import FULL, QUICK

NAMES = ("w1", "commit", "refill", "idle", "upload", "reports")


def table(fig: dict) -> list[str]:
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: str, target: str, met: bool | None) -> None:
        rows.append((name, value, target, "—" if met is None else ("yes" if met else "NO")))

    if "w1_cells_per_s" in fig:
        peers = {k: v for k, v in fig.get("w1_peers", {}).items() if k in w1.W1_TARGET_PEERS}
        best_rate = max((p["cells_per_s"] for p in peers.values()), default=float("nan"))
        best_c = min((p["coordinator_cpu_s_per_1000"] for p in peers.values()), default=float("nan"))
        best_w = min((p["workers_cpu_s_per_1000"] for p in peers.values()), default=float("nan"))
        row("W1 fleet cells/s (submit -> complete)", f"{fig['w1_cells_per_s']:.0f}",
            f">= best peer ({best_rate:.0f})", fig["w1_cells_per_s"] >= best_rate if peers else None)
        row("W1 fleet coordinator CPU per 1,000 cells", f"{fig['w1_coordinator_cpu_s_per_1000']:.2f} s",
            f"<= best peer ({best_c:.2f} s)", fig["w1_coordinator_cpu_s_per_1000"] <= best_c if peers else None)
        row("W1 fleet workers CPU per 1,000 cells", f"{fig['w1_workers_cpu_s_per_1000']:.2f} s",
            f"<= best peer ({best_w:.2f} s)", fig["w1_workers_cpu_s_per_1000"] <= best_w if peers else None)
        for name, p in fig.get("w1_peers", {}).items():  # every peer run, the targets' and the others
            row(f"W1 {name}: cells/s; CPU/1,000 cells coord, workers",
                f"{p['cells_per_s']:.0f}; {p['coordinator_cpu_s_per_1000']:.2f} s, {p['workers_cpu_s_per_1000']:.2f} s",
                "—", None)
            row(f"W1 fleet / {name} cells/s", f"{fig['w1_cells_per_s'] / p['cells_per_s']:.2f}x", "—", None)
            pr = {k: statistics.median(v) for k, v in p["paired_ratios"].items()}
            row(f"W1 fleet / {name}, median of the rounds: cells/s; CPU coord, workers",
                f"{pr['cells_per_s']:.2f}x; {pr['coordinator_cpu_s_per_1000']:.2f}x, "
                f"{pr['workers_cpu_s_per_1000']:.2f}x", "—", None)
    if "commit_batched_per_s" in fig:
        row("durable cmds/s, gRPC, group commit", f"{fig['commit_batched_per_s']:.0f}", "", None)
        row("durable cmds/s, gRPC, batch_max=1", f"{fig['commit_unbatched_per_s']:.0f}", "", None)
        row("group commit / one txn per command", f"{fig['commit_ratio']:.2f}x", ">= 10x", fig["commit_ratio"] >= 10)
        row(f"bare LMDB, {fig['bare_lmdb_batch']}/commit, {fig['commit_record_bytes']} B",
            f"{fig['bare_lmdb_per_s']:.0f}", "", None)
        row("group commit / bare LMDB", f"{fig['commit_vs_bare']:.3f}", ">= 0.5", fig["commit_vs_bare"] >= 0.5)
        row("actor alone: batched / batch_max=1", f"{fig['actor_ratio']:.2f}x", "(>= 10x)", fig["actor_ratio"] >= 10)
    for slots, cells in reports.REPORTS_SHAPES:
        key = f"reports_p4_{slots}slots" + ("" if cells == SUBJECTS else f"_{cells}cells")
        if f"{key}_per_s" in fig:
            ran_out = fig.get(key, {}).get("ran_out", False)  # a lower bound: the run ended in the window
            row(f"durable reports/s, 64 workers, ReportBatch, {slots} slots, {cells} cells/group",
                f"{fig[f'{key}_per_s']:.0f}" + (" (run ran out)" if ran_out else ""), ">= 20,000",
                fig[f"{key}_per_s"] >= 20_000 and not ran_out)
    if "refill_p99_ms" in fig:
        row("refill ack -> push p50", f"{fig['refill_p50_ms']:.2f} ms", "", None)
        row("refill ack -> push p99", f"{fig['refill_p99_ms']:.2f} ms", "< 20 ms", fig["refill_p99_ms"] < 20)
        row("refill report sent -> push p99", f"{fig['refill_sent_p99_ms']:.2f} ms", "", None)
    if "idle_cpu" in fig:
        if "idle_cpu_p3" in fig:
            row("idle fleet CPU, protocol 3 (beat every 1 s)", f"{100 * fig['idle_cpu_p3']:.1f}% of a core", "", None)
        row("idle fleet coordinator CPU, protocol 4", f"{100 * fig['idle_cpu']:.1f}% of a core", "<= 5%",
            fig["idle_cpu"] <= 0.05)
        row("idle fleet coordinator VmRSS", f"{fig['idle_rss_mb']:.0f} MB", "< 400 MB", fig["idle_rss_mb"] < 400)
    if "upload_ratio" in fig:
        row("artifact upload", f"{fig['upload_mib_s']:.0f} MiB/s", "", None)
        row("upload / local sha256+write+fsync", f"{fig['upload_ratio']:.2f}", ">= 0.5", fig["upload_ratio"] >= 0.5)
    widths = [max(len(r[i]) for r in rows + [("figure", "measured", "target", "met")]) for i in range(4)]
    out = []
    for r in [("figure", "measured", "target", "met"), tuple("-" * w for w in widths)] + rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return out


BENCHES = {"w1": w1.bench_w1, "commit": commit.bench_commit, "refill": refill.bench_refill, "idle": idle.bench_idle,
           "reports": reports.bench_reports, "upload": upload.bench_upload}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m tools.bench.coordinator", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help=f"comma-separated, of: {', '.join(NAMES)}")
    ap.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--profile", type=Path, help="py-spy the coordinator during each window into this dir")
    ap.add_argument("--profile-gil", action="store_true", help="with --profile: sample only the thread holding "
                    "the GIL (CPU spent in Python), not every running thread")
    ap.add_argument("--profile-rate", type=int, default=97, help="with --profile: py-spy samples a second "
                    "(997 for a W1 run of a few seconds; the default disturbs the run least)")
    ap.add_argument("--switch-interval-ms", type=float, default=0.0,
                    help="commit only: run its coordinators with sys.setswitchinterval(MS) (default: Python's 5 ms)")
    ap.add_argument("--cprofile", type=Path, help="cProfile (thread CPU time) the coordinator's event loop and actor "
                    "threads into DIR/<bench>/{loop,actor}.pstats (slows it down; for call counts, not figures)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, data dirs)")
    ap.add_argument("--w1-repeats", type=int, default=0, help="runs of W1 per system (default: 3, --quick 1)")
    ap.add_argument("--reports-shapes", default=",".join(f"{s}x{c}" for s, c in reports.REPORTS_SHAPES),
                    help="reports: the windows, each SLOTSxCELLS (slots per worker, cells per group); "
                         "default: %(default)s")
    ap.add_argument("--w1-systems", default=",".join(w1.W1_SYSTEMS),
                    help="W1's systems, of fleet, dask, celery, celery-defaults (default: all; fleet always runs)")
    a = ap.parse_args(argv)
    names = NAMES if not a.only else tuple(n.strip() for n in a.only.split(","))
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(NAMES)}")
    sz = QUICK if a.quick else FULL
    if a.w1_repeats:
        sz = dataclasses.replace(sz, w1_repeats=a.w1_repeats)
    Profiler.gil = a.profile_gil
    Profiler.rate = a.profile_rate
    w1.W1_SYSTEMS[:] = [n.strip() for n in a.w1_systems.split(",")]
    try:
        reports.REPORTS_SHAPES[:] = [(int(s), int(c)) for s, c in (p.strip().split("x") for p in a.reports_shapes.split(","))]
    except ValueError:
        ap.error(f"--reports-shapes {a.reports_shapes!r}: expected SLOTSxCELLS[,SLOTSxCELLS...], e.g. 2x32")
    Coordinator.switch_interval_ms = a.switch_interval_ms
    Coordinator.cprofile = a.cprofile
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    say(f"bench_coordinator: {'quick' if a.quick else 'full'} run on {os.cpu_count()} cores, scratch {root}")
    figures: dict = {}
    started = mono()
    try:
        probe = [commit.bare_lmdb_rate(root, 200, 1, 2.0)]
        say(f"disk probe: {probe[0]:.0f} synchronous 1-record LMDB commits/s ({1000 / probe[0]:.2f} ms each)")
        for n in names:
            t = mono()
            figures.update(BENCHES[n](sz, root, a.profile))
            say(f"  ({n}: {mono() - t:.0f} s)")
        probe.append(commit.bare_lmdb_rate(root, 200, 1, 2.0))
        say(f"disk probe: {probe[1]:.0f} synchronous 1-record LMDB commits/s ({1000 / probe[1]:.2f} ms each)")
        figures["disk_probe_commits_per_s"] = probe
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    say(f"\nfigures, measured in this one run ({mono() - started:.0f} s):")
    for line in table(figures):
        say(line)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
