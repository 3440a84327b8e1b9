"""Benchmark of one coordinator holding thousands of real gRPC worker sessions (issue 9).

    python -m tools.bench.sessions [--sessions 10000] [--processes 8] [--load-sessions 100]
                                   [--streams-per-channel 1] [--idle-s 20] [--load-s 30] [--json FILE]

On a real `coordinator.main` daemon on 127.0.0.1, in one bounded run:

1. registration: `--processes` client processes (tools.bench.clients' simulated worker,
   protocol 4: hello, welcome, RunOffer answered with the worker's measurement, heartbeats
   only on change or at the idle interval, liveness by the coordinator's keepalive pings)
   open `--sessions` sessions at once; the time until the admin API counts them all active.
   With `--streams-per-channel 1` every session has a TCP connection of its own, as one VM
   does; a larger value multiplexes that many streams over one connection.
2. idle: the coordinator's CPU share (utime+stime from /proc) and RSS over `--idle-s`.
3. operator views: GetStatus (time and encoded bytes, the full answer and the summary that
   `fleetctl status` asks for), the wall time of `fleetctl status` and `fleetctl status
   --workers` as processes.
4. load: a run whose reference manifest says `bench.pool: load` is submitted; the
   `--load-sessions` sessions that measure `load` serve it (1 slot each, every group held
   `--hold-ms`, its cells reported in one ReportBatch as fleet-worker does), every other
   session measures `idle` and is refused by the run. Over `--load-s`: slot refill latency
   (from the ack of a group's last report, and from sending it, to the next push on that
   session), coordinator CPU and RSS, GetStatus again. A `fleetctl watch` runs from before
   the submit to the end: events it printed against those the coordinator logged, and how
   late each line arrived after the event's own time (does it fall behind?).

Every figure is printed beside its goal. RLIMIT_NOFILE is raised to the hard limit in this
process only (the coordinator and clients started here inherit it). Every process is started
here and stopped by its pid; the clients stop by a stop file and by a hard deadline.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common.fleetpb import admin_pb2, common_pb2
from tools.bench.clients import Clients, noop_spec
from tools.bench.harness import (PY, REPO, START_TIMEOUT_S, Coordinator, Proc, Profiler, child_env, cpu_seconds, memory_kb,
                                 mono, percentile, raise_nofile, say)

POOL_KEY = "bench.pool"
REGISTER_TIMEOUT_S = 180
REGISTER_POLL_S = 1.0  # a GetStatus at 10,000 workers costs the actor ~15 ms: not too often
STORM_PROFILE_S = 20.0
SETTLE_S = 10.0  # past the backlog the refusal storm leaves
REFUSALS_TIMEOUT_S = 120
STATUS_CALLS = 5
DEADLINE_MARGIN_S = 240
# A session whose hello fails is opened again after a backoff, as fleet-worker does (each
# retry is counted and printed).
HELLO_ATTEMPTS = 30


def status_call(coord: Coordinator, **kw: Any) -> tuple[float, int, Any]:
    t = time.perf_counter()
    resp = coord.call("GetStatus", admin_pb2.GetStatusRequest(**kw), timeout=120)
    return time.perf_counter() - t, resp.ByteSize(), resp


def worker_counts(coord: Coordinator) -> collections.Counter[str]:
    _, _, resp = status_call(coord, workers_view=admin_pb2.WORKERS_VIEW_SUMMARY)
    if resp.HasField("worker_summary"):
        return collections.Counter({c.state: c.count for c in resp.worker_summary.counts})
    return collections.Counter(w.status for w in resp.workers)


def status_figures(coord: Coordinator, label: str) -> dict:
    """GetStatus with every worker and with the summary: median time and bytes of STATUS_CALLS."""
    out: dict = {}
    for view, name in ((admin_pb2.WORKERS_VIEW_ALL, "all"), (admin_pb2.WORKERS_VIEW_SUMMARY, "summary")):
        times, size = [], 0
        for _ in range(STATUS_CALLS):
            dt, size, _ = status_call(coord, workers_view=view)
            times.append(dt)
        out[f"getstatus_{name}_ms"] = 1e3 * sorted(times)[len(times) // 2]
        out[f"getstatus_{name}_max_ms"] = 1e3 * max(times)
        out[f"getstatus_{name}_bytes"] = size
    say(f"  GetStatus {label}: every worker {out['getstatus_all_ms']:.0f} ms (max {out['getstatus_all_max_ms']:.0f}), "
        f"{out['getstatus_all_bytes'] / 1e6:.2f} MB; summary {out['getstatus_summary_ms']:.1f} ms "
        f"(max {out['getstatus_summary_max_ms']:.1f}), {out['getstatus_summary_bytes'] / 1e3:.1f} kB")
    return out


def fleetctl_argv(coord: Coordinator, *args: str) -> list[str]:
    return [PY, "-m", "tools.fleetctl", "--coordinator", coord.address,
            "--token-file", str(coord.data_dir / "admin.token"), *args]


def fleetctl_time(coord: Coordinator, *args: str) -> tuple[float, int]:
    """Wall seconds of one `fleetctl` process (interpreter start included) and its output lines."""
    t = time.perf_counter()
    r = subprocess.run(fleetctl_argv(coord, *args), capture_output=True, env=child_env(), cwd=REPO, timeout=300)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"fleetctl {' '.join(args)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    return dt, r.stdout.count(b"\n")


class Watcher:
    """`fleetctl watch` as a process; a thread stamps every line it prints with the wall clock
    (the event's at_ms is the coordinator's wall clock on this same machine)."""

    def __init__(self, coord: Coordinator, root: Path) -> None:
        self.lines: list[tuple[int, dict]] = []
        self.cpu_s = float("nan")
        self.proc = Proc("fleetctl watch", fleetctl_argv(coord, "watch"), root / "watch.log", stdout=subprocess.PIPE)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        deadline = mono() + START_TIMEOUT_S
        while not self.lines:  # its first line, watch_started: every later event reaches it
            if not self.proc.alive() or mono() > deadline:
                raise RuntimeError(f"fleetctl watch did not start\n{self.proc.tail()}")
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.proc.popen.stdout is not None
        for raw in self.proc.popen.stdout:
            now_ms = time.time_ns() // 1_000_000
            try:
                self.lines.append((now_ms, json.loads(raw)))
            except json.JSONDecodeError:
                pass

    def stop(self) -> None:
        if self.proc.alive():
            self.cpu_s = cpu_seconds(self.proc.pid)  # the watch client's own CPU: is it the slow side?
        self.proc.stop(10)
        self.thread.join(10)


def coordinator_log(coord: Coordinator) -> list[dict]:
    """The coordinator's JSON log lines, read once at the run's end."""
    out = []
    for line in coord.proc.log_path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def logged_events(lines: list[dict]) -> collections.Counter[str]:
    """Events the coordinator logged (every event but the per-cell ones is logged at info)."""
    return collections.Counter(ev.get("event", "") for ev in lines)


def gc_figures(lines: list[dict]) -> dict:
    """The coordinator's collections of 100 ms or more over the whole run (its `gc_pause`
    lines, coordinator/collector.py), and its full passes."""
    pauses: list[float] = []
    full: list[float] = []
    for ev in lines:
        if ev.get("event") == "gc_pause":
            pauses.append(float(ev.get("ms", 0)))
        elif ev.get("event") == "gc_full_pass":
            full.append(float(ev.get("ms", 0)))
    r = {"gc_pauses_100ms": len(pauses), "gc_pause_max_ms": max(pauses, default=0.0), "gc_full_passes": len(full)}
    say(f"  collector: {len(pauses)} collections of 100 ms or more (max {r['gc_pause_max_ms']:.0f} ms), "
        f"{len(full)} full passes")
    return r


def run_delay_s(pid: int) -> float:
    """Seconds the process's threads have waited on a run queue, runnable but without a core
    (/proc/PID/task/*/schedstat, second field, in ns)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def steal_ticks() -> tuple[int, int]:
    """(steal, all) jiffies of the machine since boot, from /proc/stat's cpu line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return fields[7], sum(fields)


def window(coord: Coordinator, seconds: float) -> dict:
    t0, c0, q0, s0 = mono(), cpu_seconds(coord.pid), run_delay_s(coord.pid), steal_ticks()
    time.sleep(seconds)
    t1, c1, q1, s1 = mono(), cpu_seconds(coord.pid), run_delay_s(coord.pid), steal_ticks()
    mem = memory_kb(coord.pid)
    return {"t0": t0, "t1": t1, "cpu": (c1 - c0) / (t1 - t0), "rss_mb": mem["VmRSS"] / 1024,
            "hwm_mb": mem["VmHWM"] / 1024, "run_delay": (q1 - q0) / (t1 - t0),
            "steal": (s1[0] - s0[0]) / max(1, s1[1] - s0[1])}


def run(a: argparse.Namespace, root: Path) -> dict:
    fig: dict = {}
    soft, hard = raise_nofile()
    fig["nofile"] = [soft, hard]
    need = a.sessions + 1_000
    say(f"bench_sessions: {a.sessions:,} sessions in {a.processes} client processes "
        f"({a.streams_per_channel} stream(s) per connection), {a.load_sessions} of them under load; "
        f"the idle sessions' processes at nice {a.idle_clients_nice}; "
        f"RLIMIT_NOFILE {soft}/{hard} in the processes started here (scratch {root})")
    if a.streams_per_channel == 1 and soft < need:
        say(f"  warning: {soft} descriptors may not hold {a.sessions} connections: pass --streams-per-channel")
    coord = Coordinator(root, extra=tuple(a.coordinator_arg))
    idle_clients = load_clients = None
    watcher = None
    deadline_s = a.idle_s + a.load_s + REGISTER_TIMEOUT_S + DEADLINE_MARGIN_S
    try:
        fig["rss_start_mb"] = memory_kb(coord.pid)["VmRSS"] / 1024
        idle_n = a.sessions - a.load_sessions
        load_procs = max(1, round(a.processes * a.load_sessions / a.sessions)) if a.load_sessions else 0
        t_start = mono()
        cpu_reg0 = cpu_seconds(coord.pid)
        idle_clients = Clients(root, coord, mode="idle", workers=idle_n, processes=a.processes - load_procs,
                               protocol=4, name="idle", streams_per_channel=a.streams_per_channel,
                               measure={POOL_KEY: "idle"}, deadline_s=deadline_s,
                               hello_attempts=HELLO_ATTEMPTS, nice=a.idle_clients_nice)
        if a.load_sessions:
            lo, hi = a.hold_ms
            load_clients = Clients(root, coord, mode="refill", workers=a.load_sessions, processes=load_procs,
                                   slots=1, hold_ms=(lo, hi), protocol=4, name="load",
                                   streams_per_channel=a.streams_per_channel, measure={POOL_KEY: "load"},
                                   deadline_s=deadline_s, hello_attempts=HELLO_ATTEMPTS)
        seen = 0
        said = mono()
        while True:
            counts = worker_counts(coord)
            seen = counts.get("active", 0)
            if seen >= a.sessions:
                break
            if mono() - t_start > REGISTER_TIMEOUT_S or not coord.proc.alive():
                raise RuntimeError(f"{seen} of {a.sessions} sessions active after {mono() - t_start:.0f} s "
                                   f"({dict(counts)})\n{coord.proc.tail()}")
            if mono() - said > 10:
                said = mono()
                say(f"    {seen:,} active after {mono() - t_start:.0f} s")
            time.sleep(REGISTER_POLL_S)
        fig["register_s"] = mono() - t_start
        fig["register_cpu_s"] = cpu_seconds(coord.pid) - cpu_reg0
        fig["registered"] = seen
        say(f"  all {seen:,} sessions active {fig['register_s']:.1f} s after the clients started "
            f"(coordinator CPU {fig['register_cpu_s']:.1f} s meanwhile)")

        time.sleep(2.0)  # every session past its welcome
        prof = Profiler(a.profile, "sessions-idle", coord.pid, a.idle_s)
        w = window(coord, a.idle_s)
        prof.finish()
        fig["idle_cpu"], fig["idle_rss_mb"], fig["idle_hwm_mb"] = w["cpu"], w["rss_mb"], w["hwm_mb"]
        fig["idle_active_end"] = worker_counts(coord).get("active", 0)
        fig["idle_run_delay"], fig["idle_steal"] = w["run_delay"], w["steal"]
        say(f"  idle {a.idle_s:g} s: coordinator {100 * w['cpu']:.1f}% of a core, RSS {w['rss_mb']:.0f} MB "
            f"(peak {w['hwm_mb']:.0f}); {fig['idle_active_end']:,} active at its end; its threads waited for a "
            f"core {1000 * w['run_delay']:.0f} ms per second; machine steal {100 * w['steal']:.1f}%")

        fig.update({f"idle_{k}": v for k, v in status_figures(coord, "idle").items()})
        for args, key in ((("status",), "fleetctl_status"), (("status", "--workers"), "fleetctl_status_workers"),
                          (("status", "--json"), "fleetctl_status_json")):
            dt, lines = fleetctl_time(coord, *args)
            fig[f"{key}_s"], fig[f"{key}_lines"] = dt, lines
            say(f"  fleetctl {' '.join(args)}: {dt:.2f} s, {lines:,} lines")

        if a.load_sessions:
            watcher = Watcher(coord, root)
            time.sleep(1.0)
            spec = noop_spec(a.groups, cap=a.load_sessions, name="sessionbench")
            storm = Profiler(a.profile, "sessions-storm", coord.pid, STORM_PROFILE_S)  # the refusals' burst
            t_sub = mono()
            run_id = coord.call("SubmitRun", admin_pb2.SubmitRunRequest(
                spec_json=json.dumps(spec), policy_json="{}",
                manifest=[common_pb2.EnvironmentComponent(key=POOL_KEY, value="load")]), timeout=120).run_id
            fig["submit_s"] = mono() - t_sub
            # The refusals of the idle pool first (a storm of 9,900 measurements), then the load.
            t_ref = mono()
            while True:
                st = coord.call("GetStatus", admin_pb2.GetStatusRequest(
                    run_id=run_id, workers_view=admin_pb2.WORKERS_VIEW_SUMMARY))
                fig["refused"] = st.worker_summary.refused_total
                if fig["refused"] >= idle_n or mono() - t_ref > REFUSALS_TIMEOUT_S:
                    break
                time.sleep(REGISTER_POLL_S)
            fig["refusals_s"] = mono() - t_ref
            storm.finish()
            say(f"  run submitted in {fig['submit_s']:.2f} s; {fig['refused']:,} sessions refused by it "
                f"{fig['refusals_s']:.1f} s later")
            time.sleep(SETTLE_S)
            prof = Profiler(a.profile, "sessions-load", coord.pid, a.load_s)
            w = window(coord, a.load_s)
            prof.finish()
            fig["load_cpu"], fig["load_rss_mb"], fig["load_hwm_mb"] = w["cpu"], w["rss_mb"], w["hwm_mb"]
            fig.update({f"load_{k}": v for k, v in status_figures(coord, "under load").items()})
            run = coord.call("GetStatus", admin_pb2.GetStatusRequest(
                run_id=run_id, workers_view=admin_pb2.WORKERS_VIEW_SUMMARY)).runs[0]
            fig["cells_selected"] = run.cells_selected
            fig["load_active_end"] = worker_counts(coord).get("active", 0)
            out = load_clients.finish()
            load_clients = None
            samples = [r for r in out["refill"] if w["t0"] <= r[0] <= w["t1"]]
            ack = [1e3 * r[1] for r in samples]
            sent = [1e3 * r[2] for r in samples]
            fig.update({"refill_samples": len(samples), "refill_p50_ms": percentile(ack, 50),
                        "refill_p99_ms": percentile(ack, 99), "refill_max_ms": max(ack, default=float("nan")),
                        "refill_sent_p50_ms": percentile(sent, 50), "refill_sent_p99_ms": percentile(sent, 99),
                        "groups_per_s": len(samples) / (w["t1"] - w["t0"]),
                        "load_errors": out["errors"], "load_rejected": dict(out["rejected"]),
                        "load_run_delay": w["run_delay"], "load_steal": w["steal"]})
            say(f"  load {a.load_s:g} s, {a.load_sessions} sessions serving ({fig['groups_per_s']:.0f} groups/s, "
                f"{fig['refused']} sessions refused by the run): coordinator {100 * w['cpu']:.1f}% of a core, "
                f"RSS {w['rss_mb']:.0f} MB (peak {w['hwm_mb']:.0f}); refill ack -> push p50 "
                f"{fig['refill_p50_ms']:.2f} ms p99 {fig['refill_p99_ms']:.2f} ms max {fig['refill_max_ms']:.1f} "
                f"ms; report sent -> push p50 {fig['refill_sent_p50_ms']:.2f} p99 {fig['refill_sent_p99_ms']:.2f} ms; "
                f"the coordinator's threads waited for a core {1000 * w['run_delay']:.0f} ms per second; machine "
                f"steal {100 * w['steal']:.1f}%")
            if out["errors"] or out["rejected"]:
                say(f"    load client errors {out['error_count']}: {out['errors'][:3]}; rejections {out['rejected']}")
        out = idle_clients.finish()
        idle_clients = None
        fig["idle_errors"], fig["idle_error_count"] = out["errors"], out["error_count"]
        fig["idle_hello_retries"] = out["hello_retries"]
        say(f"  idle clients: {out['registered']:,} sessions welcomed, {out['hello_retries']} hellos sent again "
            f"after a failed attempt, {out['error_count']} sessions ended in error")
        if out["error_count"]:
            say(f"    idle client errors {out['error_count']}: {out['errors'][:3]}")
        if watcher is not None:
            time.sleep(0.5)
            watcher.stop()
        lines = coordinator_log(coord)
        if watcher is not None:
            fig.update(watch_figures(watcher, logged_events(lines)))
        fig.update(gc_figures(lines))
    finally:
        for c in (load_clients, idle_clients):
            if c is not None:
                c.kill()
        if watcher is not None and watcher.proc.alive():
            watcher.stop()
        coord.stop()
    return fig


def watch_figures(watcher: Watcher, logged: collections.Counter[str]) -> dict:
    got: collections.Counter[str] = collections.Counter(ev.get("event", "") for _, ev in watcher.lines)
    told = sum(int(ev["detail"].split()[0]) for _, ev in watcher.lines if ev.get("event") == "watch_events_dropped")
    lags = [recv - ev.get("at_ms", recv) for recv, ev in watcher.lines]
    # Events of the sessions' end are logged after the watch stopped; compare the others.
    compared = ("worker_refused", "worker_fits_run", "run_submitted", "run_pinned")
    missing = {k: logged[k] - got[k] for k in compared if logged[k] != got[k]}
    span_s = (watcher.lines[-1][0] - watcher.lines[0][0]) / 1e3 if len(watcher.lines) > 1 else 0.0
    r = {"watch_lines": len(watcher.lines), "watch_lag_p50_ms": percentile(lags, 50),
         "watch_lag_p99_ms": percentile(lags, 99), "watch_lag_max_ms": max(lags, default=float("nan")),
         "watch_missing": missing, "watch_told_dropped": told, "watch_events": dict(got.most_common(8)),
         "watch_lines_per_s": len(watcher.lines) / span_s if span_s else 0.0,
         "watch_client_cpu_us_per_line": 1e6 * watcher.cpu_s / max(1, len(watcher.lines))}
    say(f"  fleetctl watch: {r['watch_lines']:,} lines ({r['watch_lines_per_s']:.0f}/s), each printed "
        f"p50 {r['watch_lag_p50_ms']:.0f} ms p99 {r['watch_lag_p99_ms']:.0f} ms max {r['watch_lag_max_ms']:.0f} ms "
        f"after its event; missing against the coordinator's log: {missing or 'none'} ({told} told as dropped); the watch process spent {r['watch_client_cpu_us_per_line']:.0f} us of CPU per line")
    return r


def row(what: str, figure: str, goal: str, met: bool | None) -> None:
    mark = "" if met is None else ("  met" if met else "  NOT MET")
    say(f"  {what:<52} {figure:>26}   goal {goal}{mark}")


def table(fig: dict, a: argparse.Namespace) -> None:
    say(f"\nfigures ({a.sessions:,} sessions, shared machine: wall times are noisy):")
    row("sessions registered (admin API: active)", f"{fig['registered']:,}", f"{a.sessions:,}",
        fig["registered"] >= a.sessions)
    row("time to register them all", f"{fig['register_s']:.1f} s", "-", None)
    row("coordinator CPU, idle", f"{100 * fig['idle_cpu']:.1f}% of a core", "-", None)
    row("coordinator RSS, idle (peak)", f"{fig['idle_rss_mb']:.0f} MB ({fig['idle_hwm_mb']:.0f})", "-", None)
    if "refill_p99_ms" in fig:
        row(f"refill, last report sent -> next push, p50 ({fig['refill_samples']} refills)",
            f"{fig['refill_sent_p50_ms']:.2f} ms", "-", None)
        row("refill, last report sent -> next push, p99", f"{fig['refill_sent_p99_ms']:.2f} ms", "< 20 ms",
            fig["refill_sent_p99_ms"] < 20)
        row("refill, last report's ack -> next push, p99 (bench_coordinator's)", f"{fig['refill_p99_ms']:.2f} ms",
            "< 20 ms", fig["refill_p99_ms"] < 20)
        row("coordinator CPU under load", f"{100 * fig['load_cpu']:.1f}% of a core", "-", None)
        row("coordinator RSS under load (peak)", f"{fig['load_rss_mb']:.0f} MB ({fig['load_hwm_mb']:.0f})", "-", None)
    for when in ("idle", "load"):
        if f"{when}_getstatus_all_ms" not in fig:
            continue
        row(f"GetStatus, every worker ({when})", f"{fig[f'{when}_getstatus_all_ms']:.0f} ms, "
            f"{fig[f'{when}_getstatus_all_bytes'] / 1e6:.2f} MB", "fits a message (8 MiB)",
            fig[f"{when}_getstatus_all_bytes"] < 8 << 20)
        row(f"GetStatus, summary ({when})", f"{fig[f'{when}_getstatus_summary_ms']:.1f} ms, "
            f"{fig[f'{when}_getstatus_summary_bytes'] / 1e3:.1f} kB", "-", None)
    row("fleetctl status (process wall time)", f"{fig['fleetctl_status_s']:.2f} s, {fig['fleetctl_status_lines']} lines",
        "summarised", fig["fleetctl_status_lines"] < 100)
    row("fleetctl status --workers", f"{fig['fleetctl_status_workers_s']:.2f} s, "
        f"{fig['fleetctl_status_workers_lines']:,} lines", "lists all", fig["fleetctl_status_workers_lines"] > a.sessions)
    if "watch_lines" in fig:
        row("fleetctl watch: line printed after its event, p50", f"{fig['watch_lag_p50_ms']:.0f} ms", "-", None)
        row("fleetctl watch: ... p99 (the submit's burst of a refusal per worker)",
            f"{fig['watch_lag_p99_ms']:.0f} ms", "-", None)
        row("fleetctl watch: events missing", f"{sum(fig['watch_missing'].values())}", "0", not fig["watch_missing"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.sessions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--processes", type=int, default=8, help="client processes")
    ap.add_argument("--streams-per-channel", type=int, default=250,
                    help="sessions multiplexed over one TCP connection (1: a connection each, as one per VM; "
                         "a Python client then holds megabytes per channel, too much for thousands here)")
    ap.add_argument("--load-sessions", type=int, default=100, help="sessions that serve the run (1 slot each)")
    ap.add_argument("--hold-ms", type=lambda s: tuple(int(x) for x in s.split(",")), default=(200, 600),
                    help="LO,HI: how long a load session holds each group")
    ap.add_argument("--groups", type=int, default=30_000, help="groups of the run (3 cells each)")
    ap.add_argument("--idle-s", type=float, default=20)
    ap.add_argument("--load-s", type=float, default=30)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="py-spy the coordinator over the idle and load windows into DIR")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (logs)")
    ap.add_argument("--idle-clients-nice", type=int, default=10, metavar="N",
                    help="nice value of the client processes that hold the idle sessions (default 10: on a "
                    "machine shared with the coordinator they yield it the cores, as clients on their own VMs "
                    "would; 0: the same priority). The load sessions' processes always run at 0")
    ap.add_argument("--coordinator-arg", action="append", default=[], metavar="ARG",
                    help="pass ARG to fleet-coordinator (repeat: --coordinator-arg=--gc-full-every-s --coordinator-arg=20)")
    a = ap.parse_args(argv)
    if not 0 <= a.load_sessions < a.sessions or a.processes < 2:
        ap.error("need 0 <= --load-sessions < --sessions and at least 2 processes")
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-sessions-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below stops every child
    started = mono()
    try:
        fig = run(a, root)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    table(fig, a)
    say(f"({mono() - started:.0f} s in all)")
    if a.json:
        a.json.write_text(json.dumps(fig, indent=2, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
