"""Benchmark of one coordinator holding a very large run, each figure printed beside its goal.

    python -m tools.bench.scale [--cells N] [--workers W] [--commands C] [--keep DIR]

In one bounded run, on real daemons (`python -m coordinator.main`) in a temp dir:

1. submit: a fresh coordinator freezes an N-cell spec (N/3 tasks x 3 subjects); the time of
   the SubmitRun call, the coordinator's RSS after it; then kill -9 and the time until the
   restarted coordinator answers (recovery of a log that is almost only the submit).
2. a large log: the same run driven in-process through the pure core (reports with scores
   and provenance, one in ten an infrastructure failure that is retried, a tick every 20
   commands) into a real store the way the actor writes it (group commits of 512 records),
   each report its own, as a real run's are: its own times, a score of 0 or 1, a cost and
   token counts that vary, and its own artifact, uploaded (an ArtifactStored record) before it is reported
   (until stop 40 every report was one shared object, which a snapshot stored once: at a
   million cells the coordinator after recovery measured 1,368 MB where a real run's takes
   2,469, docs/benchmarks.md),
   with the newest snapshot SNAPSHOT_EVERY_RECORDS - 1 records before the end: the worst
   tail a kill -9 can leave. The run is cut off mid-way, with at least N records.
3. on that store: the time until a started coordinator answers; GetResults read whole page
   by page (`tools.pages`); a snapshot taken by the snapshot process while admin probes (each one
   a command through the actor) measure how long the actor keeps them waiting; kill -9;
   the time until the restarted coordinator answers again, and its RSS.
4. the pure core's cost per command on an N-cell run against a 120-cell run, W workers
   registered (tools.bench.core's command mix), in this process.

Through steps 1 and 3 a thread sums, every 0.1 s, the RSS of the coordinator and of every
process it started (the snapshot process too) and prints the peak of each phase: the goal
is 2 GB all told, at every moment.

Times are wall seconds on a shared machine; the figures that compare are ratios measured in
this one run. Every process started here is stopped by its pid.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from common import limits
from common.evidence import ArtifactRef, Report, Usage
from common.fleetpb import admin_pb2
from common.ids import RunId, WorkerId, run_id_for, sha256_digest
from common.policy import parse_policy_text
from common.spec import parse_spec_text
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import OfferRun, PushAssignment
from coordinator.logcodec import encode_record, report_from_proto, report_to_proto
from coordinator.snapshot import encode_state, no_gc
from coordinator.store import Store
from tools.bench import core as bench_core
from tools.bench.harness import REPO, MemoryLimit, MemoryLimitUnavailable, memory_kb, tree_rss_kb
from tools.fleetctl.client import Admin
from tools.fleetctl.pages import results_pages

SUBJECTS = 3
SLOTS = 4
START_TIMEOUT_S = 600
PROBE_GAP_S = 0.005
SNAPSHOT_WAIT_S = 300
COMMIT_RECORDS = 512
TREE_SAMPLE_S = 0.1
INFRA_FAILURE_EVERY = 10
TICK_EVERY_COMMANDS = 20


def say(*a: Any) -> None:
    print(*a, flush=True)


def spec_doc(cells: int) -> dict:
    tasks = max(1, cells // SUBJECTS)
    return {"benchmark": {"name": "scale", "version": "1"}, "executor": {"kind": "command"},
            "subjects": [{"id": f"s{i}", "command": "true"} for i in range(SUBJECTS)],
            "tasks": [{"id": f"t{i:07d}"} for i in range(tasks)], "repetitions": 1,
            "budget": {"timeoutSeconds": 60}, "verifier": {"command": "true"},
            "execution": {"maxConcurrentTaskGroups": 100_000}}


class TreeMemory:
    """Samples, every TREE_SAMPLE_S on a thread, the RSS summed over each live daemon and every
    process it started (the snapshot process too), and keeps the peak of each phase that
    `main` names: the goal is 2 GB all told, at every moment. Beside the RSS it keeps the
    peak of the tree's anonymous pages and, under `--memory-limit-mb`, the cgroup's peak."""

    def __init__(self, daemons: list[Daemon], limit: MemoryLimit | None = None) -> None:
        self.daemons = daemons
        self.limit = limit
        self.phase = "start"
        self.peaks: dict[str, tuple[int, int]] = {}  # phase -> (tree KiB, descendants KiB) at the tree's peak
        self.anon_peaks: dict[str, int] = {}  # phase -> the tree's anonymous KiB, peak
        self.cgroup_peaks: dict[str, tuple[int, int]] = {}  # phase -> (the cgroup's peak KiB, OOM kills)
        self._kills = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)
        self._thread.start()

    def enter(self, phase: str) -> None:
        self._close_phase()
        self.phase = phase

    def _close_phase(self) -> None:
        if self.limit is not None:
            peak, kills = self.limit.take_peak(), self.limit.oom_kills()
            if peak and self.phase in self.peaks:  # a phase a daemon lived through
                self.cgroup_peaks[self.phase] = (peak, kills - self._kills)
            self._kills = kills

    def _run(self) -> None:
        while not self._stop.wait(TREE_SAMPLE_S):
            for d in list(self.daemons):
                if d.proc is None or d.proc.poll() is not None:
                    continue
                total, kids, anon = tree_rss_kb(d.proc.pid)
                if total > self.peaks.get(self.phase, (0, 0))[0]:
                    self.peaks[self.phase] = (total, kids)
                self.anon_peaks[self.phase] = max(anon, self.anon_peaks.get(self.phase, 0))

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(5)
            self._close_phase()


class Daemon:
    """One coordinator process on 127.0.0.1 with its data dir; stopped by its pid."""

    def __init__(self, data_dir: Path, log_path: Path, *extra: str, limit: MemoryLimit | None = None) -> None:
        self.data_dir, self.log_path, self.extra, self.limit = data_dir, log_path, extra, limit
        self.proc: subprocess.Popen | None = None
        self.admin: Admin | None = None

    def start(self) -> float:
        """Spawn and wait until an admin call is answered; returns the seconds it took."""
        addr = self.data_dir / "listen.addr"
        addr.unlink(missing_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            cmd = [sys.executable, "-m", "coordinator.main", "--data-dir", str(self.data_dir),
                   "--listen", "127.0.0.1:0", "--log-level", "info", *self.extra]
            self.proc = subprocess.Popen(self.limit.wrap(cmd) if self.limit else cmd,
                                         stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        while not (addr.exists() and addr.read_text().endswith("\n")):
            if self.proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"coordinator did not start:\n{self.tail()}")
            time.sleep(0.01)
        self.admin = Admin(addr.read_text().strip(), (self.data_dir / "admin.token").read_text().strip())
        self.probe()
        return time.monotonic() - started

    def probe(self) -> float:
        """One command through the actor and back (a pause of a run that does not exist is
        refused by the core, logs nothing): how long the actor keeps a request waiting."""
        assert self.admin is not None
        t = time.perf_counter()
        self.admin.call("PauseRun", admin_pb2.PauseRunRequest(run_id="run-probe"))
        return time.perf_counter() - t

    def rss_mb(self) -> tuple[float, float]:
        assert self.proc is not None
        m = memory_kb(self.proc.pid)
        return m["VmRSS"] / 1024, m["VmHWM"] / 1024

    def kill9(self) -> None:
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def events(self, name: str) -> list[dict]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if f'"{name}"' in line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def tail(self, n: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def own_artifact(k: int) -> tuple[str, int]:
    """The k-th report's artifact: its digest and size (the bytes themselves are never needed)."""
    return sha256_digest(b"log of report %d" % k), 1_000 + k % 50_000


def own_report(template: Report, k: int, now_ms: int, digest: str, size: int) -> Report:
    """The k-th report as a real run's would be: distinct from every other one, naming its
    artifact (`own_artifact(k)`), and decoded from its wire message, as the coordinator's
    servicer hands it to the core (so that the state shares between its objects what a live
    coordinator's does, no more)."""
    score = None if template.score is None else float(k % 3 != 0)
    cost = None if template.cost_usd is None else round(0.0005 + (k % 9_973) * 1e-6, 7)
    tokens = {} if template.usage != Usage.COMPLETE else {
        "input_tokens": 20_000 + k % 80_000, "output_tokens": 1_000 + k % 4_000, "cached_tokens": k % 15_000}
    report = dataclasses.replace(template, score=score, cost_usd=cost, started_ms=now_ms - 30_000 - k % 7_000,
                                 finished_ms=now_ms, artifacts=(ArtifactRef("log", digest, size),), **tokens)
    return report_from_proto(report_to_proto(report))


def generate(data_dir: Path, spec_text: str, workers: int, records_min: int) -> dict:
    """The run driven through the core into a real store, as the actor would write it; the log
    ends SNAPSHOT_EVERY_RECORDS - 1 records after its newest snapshot (see the module doc)."""
    every = limits.SNAPSHOT_EVERY_RECORDS
    snap_at = max(every, -(-records_min // every) * every)  # the first multiple at or past the minimum
    end = snap_at + every - 1
    spec = parse_spec_text(spec_text)
    policy = parse_policy_text(json.dumps({"retryBackoffMs": 0, "retryBackoffMaxMs": 0,
                                           "expireAfterMs": 3_600_000, "suspectAfterMs": 3_000_000,
                                           "heartbeatIntervalMs": 60_000}))
    run_id = RunId(run_id_for(spec.canonical, policy.canonical()))
    store = Store.open(data_dir, map_size_bytes=limits.STORE_MAP_BYTES_MAX // 4)
    state = new_state()
    pending: list[bytes] = []
    index = 0
    snapshot_s = 0.0
    queue: list[PushAssignment] = []

    def apply(cmd: object) -> None:
        nonlocal state, index, snapshot_s
        state, t = step(state, cmd)
        for d in t.durable:
            index += 1
            pending.append(encode_record(index, d))
        effects = t.effects
        for e in t.effects:
            if isinstance(e, OfferRun):  # a worker of the right build answers the offer
                values = dict(state.runs[e.run_id].manifest)
                state, ta = step(state, c.RunEnvironmentMeasured(
                    cmd.now_ms, e.worker_id, 1, e.run_id, tuple(sorted((k, values[k]) for k in e.keys if k in values))))
                for d in ta.durable:
                    index += 1
                    pending.append(encode_record(index, d))
                effects += ta.effects
        queue.extend(e for e in effects if isinstance(e, PushAssignment))
        if len(pending) >= COMMIT_RECORDS or index >= end:
            store.append(pending)
            pending.clear()
        if index >= snap_at and not store.snapshot_indexes:
            store.append(pending)  # the snapshot covers only what is in the log
            pending.clear()
            t0 = time.perf_counter()
            data = encode_state(state)
            size = limits.SNAPSHOT_PART_BYTES  # in parts, as the actor stores a snapshot
            parts = max(1, -(-len(data) // size))
            for i in range(parts):
                store.write_snapshot_part(index, i, data[i * size:(i + 1) * size])
            store.finish_snapshot(index, parts, len(data), zlib.crc32(data))
            del data
            snapshot_s = time.perf_counter() - t0

    started = time.perf_counter()
    # The log's clock ends near the wall clock, so that the daemon started on it does not
    # find every worker long silent (10,000 expiries would be 10,000 more records).
    now = time.time_ns() // 1_000_000 - 2 * records_min - 600_000
    with no_gc():
        apply(c.RunSubmitted(now, run_id, spec, policy))
    gc.freeze()
    for i in range(workers):
        apply(c.WorkerRegistered(now, WorkerId(f"w{i:05d}"), 1, SLOTS, "env"))
    _, good, infra = bench_core.reports()
    k = 0
    while index < end and not state.runs[run_id].settled:
        if not queue:
            now += 1_000
            apply(c.ClockTicked(now))
            continue
        push = queue.pop(0)
        for cell in push.cells:
            if index >= end:
                break
            now += 1
            k += 1
            digest, size = own_artifact(k)
            apply(c.ArtifactStored(now, digest, size))
            apply(c.CellReported(now, push.worker_id, cell.attempt_id, push.assignment_id, push.generation,
                                 own_report(infra if k % INFRA_FAILURE_EVERY == 0 else good, k, now, digest, size)))
            if k % TICK_EVERY_COMMANDS == 0:
                apply(c.ClockTicked(now))
    if pending:
        store.append(pending)
        pending.clear()
    run = state.runs[run_id]
    selected = sum(1 for cell in run.cells.values() if cell.selected is not None)
    out = {"records": store.last_index, "snapshot_index": store.snapshot_indexes[-1] if store.snapshot_indexes else 0,
           "selected": selected, "attempts": len(state.attempts), "seconds": time.perf_counter() - started,
           "snapshot_encode_store_s": snapshot_s, "run_id": run_id}
    store.close()
    return out


def snapshot_under_probes(d: Daemon, run_id: str) -> dict:
    """Two durable admin commands push the log past the snapshot interval; probes run until
    the snapshot is written and a little after."""
    before = len(d.events("snapshot_written"))
    failed_before = failed = len(d.events("snapshot_child_failed"))
    assert d.admin is not None

    probes: list[float] = []

    def commit_two() -> None:  # commands through the actor too: timed as probes
        for method, req in (("PauseRun", admin_pb2.PauseRunRequest(run_id=run_id)),
                            ("RecoverRun", admin_pb2.RecoverRunRequest(run_id=run_id))):
            t = time.perf_counter()
            d.admin.call(method, req, timeout=600)
            probes.append(time.perf_counter() - t)

    commit_two()
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    done_at = None
    checked = time.monotonic()
    while time.monotonic() < deadline:
        probes.append(d.probe())
        time.sleep(PROBE_GAP_S)
        if done_at is None and time.monotonic() - checked > 0.1:
            checked = time.monotonic()
            if len(d.events("snapshot_written")) > before:
                done_at = time.monotonic()
            elif (now_failed := len(d.events("snapshot_child_failed"))) > failed:
                failed = now_failed  # tried again at the next commit, as under a run's traffic
                commit_two()
        if done_at is not None and time.monotonic() - done_at > 0.5:
            break
    written = d.events("snapshot_written")[before:]
    probes.sort()
    return {"snapshot": written[-1] if written else None, "probes": len(probes),
            "child_failures": failed - failed_before,
            "probe_p50_ms": 1e3 * probes[len(probes) // 2], "probe_p99_ms": 1e3 * probes[int(len(probes) * 0.99)],
            "probe_max_ms": 1e3 * probes[-1]}


def read_results(d: Daemon, run_id: str) -> dict:
    assert d.admin is not None
    t = time.perf_counter()
    cells = pages = 0
    size = 0
    summary = None
    for page in results_pages(d.admin, run_id):
        pages += 1
        cells += len(page.cells)
        size += page.ByteSize()
        if page.HasField("summary"):
            summary = page.summary
    assert summary is not None
    return {"seconds": time.perf_counter() - t, "cells": cells, "pages": pages, "bytes": size,
            "selected": summary.selected}


def core_cost(cells: int, workers: int, commands: int, repeats: int) -> dict:
    """tools.bench.core's mix at N cells and at 120 cells, W workers registered."""
    saved = bench_core.WORKERS
    bench_core.WORKERS = workers
    try:
        small, large = bench_core.make_spec(40, 1), bench_core.make_spec(max(1, cells // SUBJECTS), 1)
        rates: dict[str, list[float]] = {"small": [], "large": []}
        for _ in range(repeats):
            rates["small"].append(bench_core.measure(small, commands))
            rates["large"].append(bench_core.measure(large, commands))
            gc.unfreeze()
            gc.collect()
    finally:
        bench_core.WORKERS = saved
    s, l = statistics.median(rates["small"]), statistics.median(rates["large"])
    return {"small_us": 1e6 / s, "large_us": 1e6 / l, "ratio": s / l}


def row(what: str, figure: str, goal: str, met: bool | None) -> None:
    mark = "" if met is None else ("  met" if met else "  NOT MET")
    say(f"  {what:<58} {figure:>22}   goal {goal}{mark}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=30_000, help="cells of the run (1,000,000 for the goal's size)")
    ap.add_argument("--workers", type=int, default=10_000, help="workers registered in the log and the core bench")
    ap.add_argument("--commands", type=int, default=30_000, help="commands timed per core measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the data dirs here instead of a temp dir")
    ap.add_argument("--memory-limit-mb", type=int, help="start every daemon in a memory cgroup of its own with this "
                    "hard limit (root, cgroup v1; no swap here, so a tree that needs more is OOM-killed) and print "
                    "its peak charge and OOM kills per phase")
    ap.add_argument("--reuse", type=Path, help="copy the large log (and its figures) generated by an earlier "
                    "--keep run of the same --cells and --workers (its large-gen/) from this dir instead of "
                    "generating it again")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill of the bench still stops its daemons
    root = args.keep or Path(tempfile.mkdtemp(prefix="fleet-bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    spec_text = json.dumps(spec_doc(args.cells))
    cells = max(1, args.cells // SUBJECTS) * SUBJECTS
    say(f"bench_scale: {cells:,} cells, {args.workers:,} workers, spec {len(spec_text) / 1e6:.1f} MB, in {root} "
        "(shared machine: wall times are noisy, compare ratios)")
    fig: dict[str, Any] = {}
    daemons: list[Daemon] = []
    try:
        limit = MemoryLimit(args.memory_limit_mb) if args.memory_limit_mb else None
    except MemoryLimitUnavailable as e:
        raise SystemExit(f"--memory-limit-mb: {e}") from None
    tree = TreeMemory(daemons, limit)
    try:
        tree.enter("submit")
        # 1. submit on a fresh coordinator, then kill -9 and recover the submit-only log.
        a = Daemon(root / "submit", root / "submit.log", limit=limit)
        daemons.append(a)
        (root / "submit").mkdir(exist_ok=True)
        a.start()
        assert a.admin is not None
        t = time.perf_counter()
        resp = a.admin.call("SubmitRun", admin_pb2.SubmitRunRequest(spec_json=spec_text), timeout=600)
        fig["submit_s"] = time.perf_counter() - t
        fig["submit_rss_mb"], fig["submit_hwm_mb"] = a.rss_mb()
        say(f"  submitted {resp.run_id} in {fig['submit_s']:.2f} s")
        a.kill9()
        fig["recover_submit_s"] = a.start()
        say(f"  recovered the submit-only log in {fig['recover_submit_s']:.2f} s")
        a.kill9()

        # 2. a large log, generated through the core.
        tree.enter("generate (no daemon)")
        # The log as generated stays in large-gen/ under --keep (the daemon below adds records
        # and a snapshot to its copy in large/), so that --reuse starts from the same cut-off log.
        if args.reuse is not None:  # a log generated by an earlier run with --keep: copied, used once
            say(f"  reusing the large log of {args.reuse} ...")
            shutil.copytree(args.reuse / "large-gen", root / "large", dirs_exist_ok=False)
            g = json.loads((args.reuse / "large-gen.json").read_text())
        else:
            say("  generating the large log through the core ...")
            # Two records a report (its artifact's, its own) and the dispatches: about 90% of
            # the cells selected at the cut-off, as before.
            g = generate(root / "large-gen", spec_text, args.workers, records_min=2 * cells)
            (root / "large-gen.json").write_text(json.dumps(g))
            if args.keep:
                shutil.copytree(root / "large-gen", root / "large", dirs_exist_ok=False)
            else:
                (root / "large-gen").rename(root / "large")
        fig["gen"] = g
        say(f"  {g['records']:,} records ({g['selected']:,} cells selected, {g['attempts']:,} attempts), newest "
            f"snapshot at {g['snapshot_index']:,}, in {g['seconds']:.0f} s (one snapshot encode+store "
            f"{g['snapshot_encode_store_s']:.1f} s)")

        # 3. the daemon on it: start, read, snapshot under probes, kill -9, recover.
        # The snapshot interval is set so that the two admin commands of step 3 cross it, and
        # not the CoordinatorRecovered record of the start: the snapshot happens under probes.
        tail = g["records"] - g["snapshot_index"]
        b = Daemon(root / "large", root / "large.log", "--snapshot-every", str(tail + 3), limit=limit)
        daemons.append(b)
        tree.enter("recovery of the cut-off log")
        fig["start_large_s"] = b.start()
        fig["start_rss_mb"], fig["start_hwm_mb"] = b.rss_mb()
        rec = b.events("recovered")[-1]
        fig["start_replayed"] = rec.get("replayed")
        say(f"  started on it in {fig['start_large_s']:.2f} s (replayed {rec.get('replayed')} records)")
        tree.enter("the full read")
        r = read_results(b, g["run_id"])
        fig["read"] = r
        fig["read_rss_mb"], fig["read_hwm_mb"] = b.rss_mb()
        say(f"  GetResults: {r['cells']:,} cells in {r['pages']} pages, {r['bytes'] / 1e6:.0f} MB, {r['seconds']:.1f} s")
        fig["probe_idle_ms"] = statistics.median(sorted(b.probe() for _ in range(50))) * 1e3
        tree.enter("a snapshot")
        s = snapshot_under_probes(b, g["run_id"])
        fig["snap"] = s
        fig["snap_rss_mb"], fig["snap_hwm_mb"] = b.rss_mb()
        say(f"  snapshot while probing: {json.dumps(s['snapshot'])}")
        b.kill9()
        tree.enter("recovery from the snapshot")
        fig["recover_large_s"] = b.start()
        fig["recover_rss_mb"], fig["recover_hwm_mb"] = b.rss_mb()
        rec = b.events("recovered")[-1]
        fig["recover_replayed"] = rec.get("replayed")
        b.kill9()

        # 4. the core's cost per command.
        tree.stop()
        fig["tree_peaks_mb"] = {k: (t / 1024, c / 1024) for k, (t, c) in tree.peaks.items()}
        fig["tree_anon_mb"] = {k: a / 1024 for k, a in tree.anon_peaks.items()}
        fig["cgroup_mb"] = {k: (v / 1024, n) for k, (v, n) in tree.cgroup_peaks.items()}
        say("  core cost per command ...")
        fig["core"] = core_cost(cells, args.workers, args.commands, args.repeats)
    finally:
        tree.stop()
        for d in daemons:
            d.kill9()
        if limit is not None:
            fig["oom_kills"] = limit.oom_kills()
            say(f"  memory cgroup, limit {limit.limit_mb:,} MB: {fig['oom_kills']} OOM kills")
            if (left := limit.close()) is not None:
                say(f"  {left}")
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    g, r, s, k = fig["gen"], fig["read"], fig["snap"], fig["core"]
    snap = s["snapshot"] or {}
    say(f"\nfigures at {cells:,} cells (goals are for 1,000,000 cells):")
    row("submit (SubmitRun call)", f"{fig['submit_s']:.2f} s", "<= 10 s", fig["submit_s"] <= 10)
    row("recovery after kill -9, submit-only log", f"{fig['recover_submit_s']:.2f} s", "<= 10 s",
        fig["recover_submit_s"] <= 10)
    row(f"recovery of a cut-off {g['records']:,}-record log (snapshot + {fig['start_replayed']:,} replayed)",
        f"{fig['start_large_s']:.2f} s", "<= 10 s", fig["start_large_s"] <= 10)
    row(f"recovery after kill -9 just after a snapshot ({fig['recover_replayed']:,} replayed)",
        f"{fig['recover_large_s']:.2f} s", "<= 10 s", fig["recover_large_s"] <= 10)
    row(f"GetResults whole, {r['cells']:,} cells in {r['pages']} pages", f"{r['seconds']:.1f} s "
        f"({1e3 * r['seconds'] / max(1, r['cells']) * 1000:.0f} ms/1k)", "reads back whole", r["cells"] == cells)
    row("coordinator RSS after the cut-off log's recovery (peak)",
        f"{fig['start_rss_mb']:.0f} MB ({fig['start_hwm_mb']:.0f})", "<= 2048 MB", fig["start_hwm_mb"] <= 2048)
    row("coordinator RSS after recovery from a snapshot (peak)",
        f"{fig['recover_rss_mb']:.0f} MB ({fig['recover_hwm_mb']:.0f})", "<= 2048 MB", fig["recover_hwm_mb"] <= 2048)
    row("coordinator RSS after the full read (peak)", f"{fig['read_rss_mb']:.0f} MB ({fig['read_hwm_mb']:.0f})",
        "<= 2048 MB", fig["read_hwm_mb"] <= 2048)
    row("coordinator RSS after the snapshot (its peak since it started)",
        f"{fig['snap_rss_mb']:.0f} MB ({fig['snap_hwm_mb']:.0f})", "<= 2048 MB", fig["snap_hwm_mb"] <= 2048)
    row("coordinator RSS after submit (peak)", f"{fig['submit_rss_mb']:.0f} MB ({fig['submit_hwm_mb']:.0f})",
        "<= 2048 MB", fig["submit_hwm_mb"] <= 2048)
    for phase, (total, kids) in fig["tree_peaks_mb"].items():
        row(f"all told (coordinator + children) RSS peak: {phase}", f"{total:.0f} MB ({kids:.0f} children; "
            f"anonymous {fig['tree_anon_mb'].get(phase, 0):.0f})", "<= 2048 MB", total <= 2048)
    for phase, (peak, kills) in fig["cgroup_mb"].items():
        row(f"under a hard {args.memory_limit_mb:,} MB memory cgroup: {phase}", f"{peak:.0f} MB peak charge, "
            f"{kills} OOM kills", "no OOM kill", kills == 0)
    if snap:
        row("snapshot: encoded by the snapshot process", "yes" if snap.get("in_child") else "no", "off the actor",
            bool(snap.get("in_child")))
        row("snapshot: encode (wall; off the actor when in its process)", f"{snap.get('encode_s', 0):.2f} s", "-", None)
        row("snapshot: actor stall to start its process", f"{1e3 * snap.get('spawn_s', 0):.1f} ms", "< 20 ms",
            snap.get("spawn_s", 1) < 0.020)
        # encoded on the actor thread (no snapshot process could be had): the whole encode stalls it
        stall = snap.get("store_stall_max_s", snap.get("store_s", 1)) if snap.get("in_child") \
            else snap.get("encode_s", 1) + snap.get("store_s", 0)
        row(f"snapshot: store write, {snap.get('parts', 1)} parts (total)", f"{1e3 * snap.get('store_s', 0):.0f} ms",
            "-", None)
        row("snapshot: longest actor stall of the store write" if snap.get("in_child")
            else "snapshot: the actor's stall (encoded on its thread)", f"{1e3 * stall:.1f} ms", "< 20 ms",
            stall < 0.020)
    row("snapshot processes failed before it (OOM-killed under --memory-limit-mb)", f"{s['child_failures']}",
        "-", None)
    row(f"actor probe p99 during the snapshot ({s['probes']} probes)", f"{s['probe_p99_ms']:.1f} ms "
        f"(max {s['probe_max_ms']:.0f})", "refill p99 < 20 ms", s["probe_p99_ms"] < 20)
    row("actor probe median, idle", f"{fig['probe_idle_ms']:.1f} ms", "-", None)
    row(f"core us/command at {cells:,} cells / at 120 cells", f"{k['large_us']:.1f} / {k['small_us']:.1f} us",
        "-", None)
    row(f"core cost ratio, {args.workers:,} workers registered", f"{k['ratio']:.2f}x", "<= 2x", k["ratio"] <= 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
