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

`--quick` shrinks every benchmark (about a minute in all) for a smoke check. `--profile DIR`
samples the coordinator with py-spy (when installed) during each measured window and prints
its hottest functions. Every process is started here, stopped by its pid, and every load loop
ends by itself (a stop file, and a hard deadline). Only 127.0.0.1.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from common import limits
from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tools.bench.clients import ENVIRONMENT_ID, SUBJECTS, Clients, aio_channel, bench_report, hello_frame, noop_spec
from tools.bench.harness import (PY, REPO, START_TIMEOUT_S, Coordinator, Proc, Profiler, cpu_seconds, memory_kb, mono,
                                 percentile, process_cpu_seconds, say)
from tools.fleetctl.pages import results_whole

NOOPBENCH = REPO / "tools" / "bench" / "data" / "noopbench"
NAMES = ("w1", "commit", "refill", "idle", "upload", "reports")
W1_SYSTEMS = ["fleet", "dask", "celery", "celery-defaults"]  # --w1-systems: the peers W1 runs after fleet
# The peers fleet's W1 targets are taken from (issue 8: "coordinator <= 0.3 s, workers <= 1.2 s",
# Dask's figures): celery-defaults is shown beside them, not a target, since its broker keeps
# nothing on disk and acks a task before it ran (a task dies with its worker).
W1_TARGET_PEERS = ("dask", "celery")
REPORTS_LARGE_GROUP = 32  # reports: groups of this many cells, so frames of as many reports
# --reports-shapes: the (slots per worker, cells per group) of each reports window
REPORTS_SHAPES = [(2, SUBJECTS), (8, SUBJECTS), (2, REPORTS_LARGE_GROUP)]


@dataclass(frozen=True)
class Sizes:
    w1_groups: int
    w1_repeats: int
    commit_clients: int
    commit_window_s: float
    commit_groups: int
    commit_rounds: int
    reports_cells: int  # the reports bench's run: enough for its warm-up and window above 20,000/s
    bare_window_s: float
    actor_window_s: float
    refill_workers: int
    refill_window_s: float
    refill_hold_ms: tuple[int, int]
    refill_groups: int
    idle_workers: int
    idle_clients: int
    idle_window_s: float
    upload_bytes: int
    upload_repeats: int


FULL = Sizes(w1_groups=2_000, w1_repeats=3, commit_clients=64, commit_window_s=8, commit_groups=30_000, commit_rounds=3,
             reports_cells=360_000,
             bare_window_s=3, actor_window_s=5,
             refill_workers=50, refill_window_s=20, refill_hold_ms=(100, 300), refill_groups=10_000,
             idle_workers=1_000, idle_clients=4,
             idle_window_s=30, upload_bytes=64 << 20, upload_repeats=5)
QUICK = Sizes(w1_groups=150, w1_repeats=1, commit_clients=64, commit_window_s=3, commit_groups=15_000, commit_rounds=1,
              reports_cells=120_000,
              bare_window_s=1.5, actor_window_s=2,
              refill_workers=50, refill_window_s=4, refill_hold_ms=(100, 300), refill_groups=2_000,
              idle_workers=200, idle_clients=2,
              idle_window_s=6, upload_bytes=16 << 20, upload_repeats=1)


# ---- W1: the peer comparison -------------------------------------------------------------------

def _w1_fleet_once(sz: Sizes, root: Path, profile: Path | None, rep: int) -> dict:
    r = root / f"w1-{rep}"
    coord = Coordinator(r, counters=True)
    workers: list[Proc] = []
    try:
        for i in range(4):
            state = r / "workers" / f"w{i}"
            state.mkdir(parents=True)
            workers.append(Proc(f"worker w{i}", [
                PY, "-m", "worker.main", "--coordinator", coord.address,
                "--token-file", str(coord.data_dir / "enroll.token"), "--worker-id", f"w{i}", "--slots", "2",
                "--state-dir", str(state), "--bench-root", str(NOOPBENCH)], r / f"worker-w{i}.log"))
        coord.wait_workers(4, START_TIMEOUT_S)
        spec = noop_spec(sz.w1_groups, cap=8)
        cells = sz.w1_groups * SUBJECTS
        cpu0, c0 = cpu_seconds(coord.pid), coord.counters()
        wcpu0 = sum(cpu_seconds(w.pid) for w in workers)
        prof = Profiler(profile, f"w1-{rep}", coord.pid, 12)
        wprof = Profiler(profile, f"w1-{rep}-worker-w0", workers[0].pid, 12)
        t0 = mono()
        run_id = coord.submit(spec)
        selected = 0
        while True:
            st = coord.call("GetStatus", admin_pb2.GetStatusRequest(run_id=run_id)).runs[0]
            now = mono()
            if st.state in (admin_pb2.RUN_STATE_COMPLETE, admin_pb2.RUN_STATE_INCOMPLETE):
                t1 = now
                break
            if now - t0 > 1_800:
                raise RuntimeError(f"W1 run did not settle in 30 min: {st}")
            selected = st.cells_selected
            rate = selected / (now - t0) if selected else 0
            left = (cells - selected) / rate if rate else 1.0
            time.sleep(min(0.5, max(0.01, left / 5)))  # sparse polling, finer near the end
        elapsed = t1 - t0
        coord_cpu = (cpu_seconds(coord.pid) - cpu0) / elapsed
        c1 = coord.counters()
        worker_cpu = (sum(cpu_seconds(w.pid) for w in workers) - wcpu0) / elapsed
        coord_k, worker_k = coord_cpu * elapsed / cells * 1000, worker_cpu * elapsed / cells * 1000
        prof.finish()
        wprof.finish()
        res = results_whole(coord, run_id)
        good = sum(1 for c in res.cells if c.state == "selected" and c.score == 1.0)
        if good != cells or not res.summary.usage_complete:
            raise RuntimeError(f"W1: {good} of {cells} cells selected with score 1 "
                               f"(usage complete: {res.summary.usage_complete})")
        say(f"  run {rep + 1}: {cells} cells in {elapsed:.2f} s = {cells / elapsed:.0f} cells/s "
            f"(coordinator {100 * coord_cpu:.0f}% of a core, 4 workers {100 * worker_cpu:.0f}%; CPU per "
            f"1,000 cells: coordinator {coord_k:.2f} s, workers {worker_k:.2f} s; {c1['commits'] - c0['commits']} "
            f"commits of {c1['records'] - c0['records']} records, actor busy {100 * (c1['busy_s'] - c0['busy_s']) / elapsed:.0f}% "
            f"(in Store.append {100 * (c1['append_s'] - c0['append_s']) / elapsed:.0f}%))")
        return {"cells_per_s": cells / elapsed, "coordinator_cpu": coord_cpu, "workers_cpu": worker_cpu,
                "coordinator_cpu_s_per_1000": coord_k, "workers_cpu_s_per_1000": worker_k}
    finally:
        for w in workers:
            w.stop(60)
        coord.stop()


def bench_w1(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Rounds: each runs fleet once, then each peer once, every system on fresh processes. The
    host's speed drifts by tens of percent within minutes here, so each system's runs are
    spread over the whole bench instead of being taken one system after another; the ratios
    are also given per round (each round's systems ran minutes apart at most)."""
    from tools.bench import peers as bench_peers

    say(f"W1: {sz.w1_groups} groups x {SUBJECTS} no-op python cells, 4 fleet-worker processes x 2 slots, "
        f"{sz.w1_repeats} round(s) of every system in turn")
    peer_benches = [(name, bench) for name, bench in (
        ("dask", bench_peers.bench_dask), ("celery", bench_peers.bench_celery),
        ("celery-defaults", functools.partial(bench_peers.bench_celery, durable=False))) if name in W1_SYSTEMS]
    fleet: list[dict] = []
    rounds: dict[str, list[dict]] = {name: [] for name, _ in peer_benches}
    for rep in range(sz.w1_repeats):
        fleet.append(_w1_fleet_once(sz, root, profile, rep))
        for name, bench in peer_benches:
            got = bench(sz.w1_groups, rep + 1, root / f"w1-{name}-{rep}", Proc, say)
            if got is not None:
                rounds[name].append(got)
    keys = ("cells_per_s", "coordinator_cpu_s_per_1000", "workers_cpu_s_per_1000")
    med = statistics.median(f["cells_per_s"] for f in fleet)
    fleet_k = (statistics.median(f["coordinator_cpu_s_per_1000"] for f in fleet),
               statistics.median(f["workers_cpu_s_per_1000"] for f in fleet))
    peers = {}
    for name, runs in rounds.items():
        if len(runs) != len(fleet):
            continue  # skipped (not installed)
        peers[name] = {k: statistics.median(r[k] for r in runs) for k in keys}
        peers[name]["runs"] = [r["cells_per_s"] for r in runs]
        paired = {k: [f[k] / r[k] for f, r in zip(fleet, runs)] for k in keys}
        peers[name]["paired_ratios"] = paired
        say(f"  fleet / {name}: cells/s {med / peers[name]['cells_per_s']:.2f}x; CPU per 1,000 cells: coordinator "
            f"{fleet_k[0] / peers[name]['coordinator_cpu_s_per_1000']:.2f}x, workers "
            f"{fleet_k[1] / peers[name]['workers_cpu_s_per_1000']:.2f}x (ratio of medians)")
        say(f"    per round: cells/s {', '.join(f'{x:.2f}' for x in paired['cells_per_s'])}; coordinator "
            f"{', '.join(f'{x:.2f}' for x in paired['coordinator_cpu_s_per_1000'])}; workers "
            f"{', '.join(f'{x:.2f}' for x in paired['workers_cpu_s_per_1000'])}")
    return {"w1_cells_per_s": med, "w1_runs": [f["cells_per_s"] for f in fleet], "w1_peers": peers,
            "w1_vs_dask": med / peers["dask"]["cells_per_s"] if "dask" in peers else float("nan"),
            "w1_vs_celery": med / peers["celery"]["cells_per_s"] if "celery" in peers else float("nan"),
            "w1_coordinator_cpu": statistics.median(f["coordinator_cpu"] for f in fleet),
            "w1_workers_cpu": statistics.median(f["workers_cpu"] for f in fleet),
            "w1_coordinator_cpu_s_per_1000": fleet_k[0],
            "w1_workers_cpu_s_per_1000": fleet_k[1]}


# ---- group commit ------------------------------------------------------------------------------

def grpc_commit_rate(sz: Sizes, root: Path, batch_max: int | None, profile: Path | None, *,
                     protocol: int = 3, slots: int = 2, cells: int = SUBJECTS, total_cells: int = 0) -> dict:
    """`total_cells`: the run's size (default `commit_groups` groups of 3 cells). The run must
    outlast the warm-up and the window: a run that settles inside the window measures idle time
    (the 32-cell shape did, and understated its rate by a third), so that is checked after the
    window and reported as `ran_out`."""
    label = "default batching" if batch_max is None else f"batch_max={batch_max}"
    if protocol >= 4:
        label += f", protocol {protocol} (ReportBatch), {slots} slots per worker, {cells} cells per group"
    coord = Coordinator(root, batch_max=batch_max, counters=True)
    clients = None
    try:
        workers = sz.commit_clients
        groups = max(workers * slots * 4, (total_cells or sz.commit_groups * SUBJECTS) // cells)
        run_id = coord.submit(noop_spec(groups, cap=workers * slots, name="commitbench", subjects=cells))
        clients = Clients(root, coord, mode="commit", workers=workers, processes=2, slots=slots, protocol=protocol)
        coord.wait_workers(workers, START_TIMEOUT_S)
        time.sleep(1.0)  # warm-up: every slot busy, the log past its first batches
        c0, cpu0, own0, ccpu0 = coord.counters(), cpu_seconds(coord.pid), process_cpu_seconds(coord.pid), clients.cpu()
        # One file per window: the reports shapes share the mode, and overwrote each other's.
        name = f"commit-{'batched' if batch_max is None else 'unbatched'}"
        if protocol >= 4:
            name = f"reports-{slots}x{cells}"
        prof = Profiler(profile, name, coord.pid, sz.commit_window_s)
        time.sleep(sz.commit_window_s)
        c1, cpu1, own1, ccpu1 = coord.counters(), cpu_seconds(coord.pid), process_cpu_seconds(coord.pid), clients.cpu()
        status = next(r for r in coord.call("GetStatus", admin_pb2.GetStatusRequest()).runs if r.run_id == run_id)
        ran_out = status.cells_selected >= status.cells_total
        prof.finish()
        out = clients.finish()
        clients = None
    finally:
        if clients is not None:
            clients.kill()
        coord.stop()
    if ran_out:
        say(f"  warning: the run's {groups * cells} cells were all selected within the window: the rate "
            f"below counts idle time (a lower bound); give the run more cells")
    dt = c1["t"] - c0["t"]
    records, commits = c1["records"] - c0["records"], c1["commits"] - c0["commits"]
    acked = sum(1 for t in out["accepted_at"] if c0["t"] <= t <= c1["t"])
    sizes = log_record_sizes(coord.data_dir / "wal")
    r = {"rate": records / dt, "acked_rate": acked / dt, "batch_mean": records / max(1, commits),
         "commits_per_s": commits / dt, "cpu": (cpu1 - cpu0) / dt, "cpu_process": (own1 - own0) / dt,
         "record_bytes": sizes,
         "actor_busy": (c1["busy_s"] - c0["busy_s"]) / dt, "actor_append": (c1["append_s"] - c0["append_s"]) / dt,
         "client_cpu": (ccpu1 - ccpu0) / dt, "rejected": dict(out["rejected"]), "errors": out["errors"],
         "ran_out": ran_out, "cells": groups * cells}
    say(f"  gRPC, {label}: {r['rate']:.0f} durable commands/s ({r['acked_rate']:.0f}/s accepted report acks seen "
        f"by clients), {r['commits_per_s']:.0f} commits/s, {r['batch_mean']:.1f} records/commit, coordinator "
        f"{100 * r['cpu']:.0f}% of a core (its own process {100 * r['cpu_process']:.0f}%, the rest its snapshot "
        f"processes; clients {100 * r['client_cpu']:.0f}%), {1e6 * r['cpu'] / max(1.0, r['acked_rate']):.0f} µs of "
        f"coordinator CPU per report ({1e6 * r['cpu_process'] / max(1.0, r['acked_rate']):.0f} in its own process); actor busy {100 * r['actor_busy']:.0f}% of the window (in Store.append "
        f"{100 * r['actor_append']:.0f}%); log record {sizes:.0f} B (median)")
    if out["errors"] or out["rejected"]:
        say(f"    client errors {out['error_count']}: {out['errors'][:3]}; rejections {dict(out['rejected'])}")
    return r


def log_record_sizes(wal_dir: Path) -> float:
    import lmdb

    env = lmdb.open(str(wal_dir), readonly=True, lock=False, max_dbs=3, subdir=True)
    try:
        db = env.open_db(b"log", create=False)
        with env.begin(db=db) as txn:
            lens = [len(v) for _, v in txn.cursor()]
    finally:
        env.close()
    return statistics.median(lens) if lens else 0.0  # the run's spec record is large and rare


def bare_lmdb_rate(root: Path, record_bytes: int, batch: int, seconds: float) -> float:
    """Records/s committed by LMDB alone: same flags as the coordinator's store (sync, metasync),
    `batch` records of `record_bytes` appended per write transaction plus the last-index key."""
    import lmdb

    path = root / f"bare-{batch}"
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), subdir=True, max_dbs=3, map_size=1 << 30, sync=True, metasync=True,
                    writemap=False, map_async=False, lock=True)
    try:
        log, meta = env.open_db(b"log"), env.open_db(b"meta")
        payload = os.urandom(record_bytes)
        index = 0
        t0 = mono()
        while mono() - t0 < seconds:
            with env.begin(write=True) as txn:
                for _ in range(batch):
                    index += 1
                    txn.put(index.to_bytes(8, "big"), payload, db=log, append=True)
                txn.put(b"last_index", index.to_bytes(8, "big"), db=meta)
        return index / (mono() - t0)
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)


def actor_rate(root: Path, batch_max: int | None, seconds: float, groups: int, workers: int = 64,
               slots: int = 2) -> dict:
    """The actor and store alone, in this process: the same closed loop as the gRPC clients
    (every push answered by its cells' reports, GroupFinished once they are done), driven from
    the actor's delivery callback; no gRPC, no protobuf decode of reports."""
    from common.evidence import Cleanup, Execution, Report, Status, Usage, Verification
    from common.ids import RunId, WorkerId
    from common.policy import Policy
    from common.spec import parse_spec
    from coordinator.actor import Actor, Overloaded, Request
    from coordinator.core import commands as c
    from coordinator.core import new_state
    from coordinator.store import Store

    path = root / f"actor-{batch_max or 'default'}"
    store = Store.open(path)
    report = Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE, Cleanup.CONFIRMED,
                    score=1.0, input_tokens=0, output_tokens=0, cost_usd=0.0, detail="subject completed; score 1")
    stopping = threading.Event()
    outstanding: dict[str, int] = {}
    finished: set[str] = set()
    held: dict[str, dict[str, None]] = {WorkerId(f"a{i:03d}"): {} for i in range(workers)}
    rejected: collections.Counter[str] = collections.Counter()
    actor: Actor

    def on_batch(batch: Any) -> None:
        for done, value in batch.completions:
            done(value)
        for o in batch.outgoing:
            if stopping.is_set() or not o.worker_id:
                continue
            body = o.frame.WhichOneof("body")
            if body == "run_offer":  # a worker of the run's build: its measurement is the reference's
                offer = o.frame.run_offer
                actor.submit(Request(make=lambda now, w=WorkerId(o.worker_id), r=RunId(offer.run_id):
                                     c.RunEnvironmentMeasured(now, w, 1, r, ())))
                continue
            if body != "assignment":
                continue
            p = o.frame.assignment
            wid, aid, gen = WorkerId(o.worker_id), p.assignment_id, p.generation
            if aid in outstanding or aid in finished:
                continue  # a repeated push: a worker ignores it
            outstanding[aid] = len(p.cells)
            held[wid][aid] = None
            for cell in p.cells:
                actor.submit(Request(
                    make=lambda now, t=cell.attempt_id, w=wid, a=aid, g=gen: c.CellReported(now, w, t, a, g, report),
                    done=lambda tr, a=aid, w=wid: reported(tr, a, w)))

    def reported(t: Any, aid: str, wid: str) -> None:
        if not t.outcome.ok:
            rejected[t.outcome.rejection.name] += 1
        outstanding[aid] -= 1
        if outstanding[aid] == 0 and not stopping.is_set():
            del outstanding[aid]
            finished.add(aid)
            actor.submit(Request(make=lambda now: c.GroupFinished(now, wid, aid),
                                 done=lambda _t: held[wid].pop(aid, None)))

    def heartbeats() -> None:  # as every worker does, or the core suspects it after 3.5 s
        while not stopping.wait(1.0):
            for w in list(held):
                try:
                    actor.submit(Request(make=lambda now, w=w: c.HeartbeatReceived(now, w, tuple(held[w]))))
                except Overloaded:
                    return  # stopping

    kw = {} if batch_max is None else {"batch_max": batch_max}
    beater = None
    actor = Actor(store, new_state(), 0, deliver=on_batch, **kw)
    try:
        spec = parse_spec(noop_spec(groups, cap=workers * slots, name="actorbench"))
        actor.start()
        # No manifest: every key a run offer names is measured as absent, as the reference has it.
        actor.submit(Request(make=lambda now: c.RunSubmitted(now, RunId("run-actorbench"), spec, Policy())))
        for w in held:
            actor.submit(Request(make=lambda now, w=w: c.WorkerRegistered(
                now, w, 1, slots, ENVIRONMENT_ID, 1_000 * slots, 1_024 * slots)))
        beater = threading.Thread(target=heartbeats, daemon=True)
        beater.start()
        time.sleep(1.0)
        r0, k0, t0 = actor.records, actor.commits, mono()
        time.sleep(seconds)
        r1, k1, t1 = actor.records, actor.commits, mono()
    finally:
        stopping.set()
        actor.stop()
        store.close()
        if beater is not None:
            beater.join(5)
        shutil.rmtree(path, ignore_errors=True)
    if rejected:
        raise RuntimeError(f"in-process actor bench: reports rejected {dict(rejected)}")
    if r1 >= groups * SUBJECTS:
        say("  warning: the in-process run ran out of groups within the window: raise commit_groups")
    return {"rate": (r1 - r0) / (t1 - t0), "batch_mean": (r1 - r0) / max(1, k1 - k0)}


def bench_commit(sz: Sizes, root: Path, profile: Path | None) -> dict:
    say(f"Group commit: {sz.commit_clients} simulated workers x 2 slots on loopback, {sz.commit_window_s:g} s "
        f"windows, {sz.commit_rounds} round(s) of every variant back to back (the disk is shared: paired ratios)")
    got: dict[str, list[float]] = collections.defaultdict(list)
    for rnd in range(sz.commit_rounds):
        prof = profile if rnd == 0 else None
        b = grpc_commit_rate(sz, root / f"commit-{rnd}-batched", None, prof)
        u = grpc_commit_rate(sz, root / f"commit-{rnd}-unbatched", 1, prof)
        record = max(1, round(b["record_bytes"]))
        batch = max(1, round(b["batch_mean"]))
        bare = bare_lmdb_rate(root, record, batch, sz.bare_window_s)
        bare1 = bare_lmdb_rate(root, record, 1, sz.bare_window_s)
        say(f"  bare LMDB, sync=True, {record} B records: {bare:.0f} records/s at {batch} per commit, "
            f"{bare1:.0f}/s at 1 per commit")
        act = actor_rate(root, None, sz.actor_window_s, sz.commit_groups)
        act1 = actor_rate(root, 1, sz.actor_window_s, sz.commit_groups)
        say(f"  actor in process (same closed loop, no gRPC): {act['rate']:.0f} durable commands/s default "
            f"({act['batch_mean']:.1f}/commit), {act1['rate']:.0f}/s with batch_max=1")
        for k, v in (("batched", b["rate"]), ("unbatched", u["rate"]), ("batch", b["batch_mean"]),
                     ("record", record), ("bare", bare), ("bare1", bare1), ("actor", act["rate"]),
                     ("actor1", act1["rate"]), ("actor_batch", act["batch_mean"]), ("cpu", b["cpu"]),
                     ("cpu1", u["cpu"]), ("client_cpu", b["client_cpu"]),
                     ("ratio", b["rate"] / u["rate"]), ("vs_bare", b["rate"] / bare),
                     ("actor_ratio", act["rate"] / act1["rate"]), ("unbatched_vs_bare1", u["rate"] / bare1)):
            got[k].append(v)
    m = {k: statistics.median(v) for k, v in got.items()}
    say(f"  medians of {sz.commit_rounds} round(s): group commit {m['batched']:.0f}/s, batch_max=1 "
        f"{m['unbatched']:.0f}/s, ratio {m['ratio']:.2f}x; bare LMDB {m['bare']:.0f}/s, group commit / bare "
        f"{m['vs_bare']:.3f}; actor alone {m['actor_ratio']:.2f}x")
    return {
        "commit_batched_per_s": m["batched"], "commit_unbatched_per_s": m["unbatched"], "commit_ratio": m["ratio"],
        "commit_batch_mean": m["batch"], "commit_coordinator_cpu": m["cpu"], "commit_unbatched_cpu": m["cpu1"],
        "commit_client_cpu": m["client_cpu"], "commit_record_bytes": round(m["record"]),
        "bare_lmdb_per_s": m["bare"], "bare_lmdb_batch": round(m["batch"]), "bare_lmdb_batch1_per_s": m["bare1"],
        "commit_vs_bare": m["vs_bare"], "commit_unbatched_vs_bare1": m["unbatched_vs_bare1"],
        "actor_batched_per_s": m["actor"], "actor_unbatched_per_s": m["actor1"], "actor_ratio": m["actor_ratio"],
        "actor_batch_mean": m["actor_batch"], "commit_rounds": dict(got),
    }


# ---- slot refill latency -----------------------------------------------------------------------

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


# ---- idle fleet --------------------------------------------------------------------------------

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


# ---- artifact upload ---------------------------------------------------------------------------

async def _upload_session(coord: Coordinator, blobs: list[bytes], window: int,
                          before_each: Any = None) -> tuple[list[float], str]:
    channel = aio_channel(coord.address)
    md = (("authorization", f"Bearer {coord.enroll_token}"), ("x-fleet-worker-id", "uploader"))
    call = coordinator_pb2_grpc.CoordinatorStub(channel).Session(metadata=md)
    seq = 1
    try:
        await call.write(hello_frame("uploader", 1))
        push = None
        while push is None:
            f = await asyncio.wait_for(call.read(), 30)
            if f is grpc.aio.EOF:
                raise RuntimeError("upload session ended before a push")
            if f.WhichOneof("body") == "assignment":
                push = f.assignment
            elif f.WhichOneof("body") == "run_offer":
                seq += 1
                await call.write(coordinator_pb2.WorkerFrame(seq=seq, run_environment=coordinator_pb2.RunEnvironment(
                    run_id=f.run_offer.run_id)))
        attempt = push.cells[0].attempt_id
        acks: asyncio.Queue = asyncio.Queue()

        async def reader() -> None:
            while True:
                fr = await call.read()
                if fr is grpc.aio.EOF:
                    return
                if fr.WhichOneof("body") == "ack":
                    acks.put_nowait(fr.ack)
                elif fr.WhichOneof("body") == "acks":
                    for ack in fr.acks.acks:
                        acks.put_nowait(ack)

        rt = asyncio.create_task(reader())
        times = []
        digest = ""
        for n, data in enumerate(blobs):
            if before_each is not None:
                before_each(data)  # the local baselines, interleaved with the uploads (a shared disk drifts)
            digest = "sha256:" + hashlib.sha256(data).hexdigest()  # known to a worker before it uploads
            chunk = limits.CHUNK_BYTES_MAX
            offsets = list(range(0, len(data), chunk))
            t0 = mono()
            in_flight = 0
            last_seq = 0
            for off in offsets:
                seq += 1
                last = off + chunk >= len(data)
                await call.write(coordinator_pb2.WorkerFrame(seq=seq, upload_chunk=coordinator_pb2.UploadChunk(
                    upload_id=f"u{n}", attempt_id=attempt, digest=digest, total_length=len(data), offset=off,
                    data=data[off:off + chunk], last=last)))
                in_flight += 1
                last_seq = seq
                while in_flight >= window:
                    a = await acks.get()
                    in_flight -= 1
                    if a.outcome == common_pb2.ACK_OUTCOME_REJECTED:
                        raise RuntimeError(f"chunk refused: {a}")
            while True:
                a = await acks.get()
                if a.outcome == common_pb2.ACK_OUTCOME_REJECTED:
                    raise RuntimeError(f"chunk refused: {a}")
                if a.seq == last_seq:
                    break
            times.append(mono() - t0)
        # The report referencing the last artifact must be accepted: the digest is really stored.
        seq += 1
        rep = bench_report(int(time.time() * 1000))
        rep.artifacts.append(common_pb2.ArtifactRef(name="big.bin", digest=digest, size_bytes=len(blobs[-1])))
        await call.write(coordinator_pb2.WorkerFrame(seq=seq, cell_report=coordinator_pb2.CellReport(
            run_id=push.run_id, attempt_id=attempt, assignment_id=push.assignment_id, generation=push.generation,
            report=rep)))
        while True:
            a = await asyncio.wait_for(acks.get(), 30)
            if a.seq == seq:
                verdict = common_pb2.AckOutcome.Name(a.outcome)
                break
        rt.cancel()
        return times, verdict
    finally:
        call.cancel()
        await channel.close(grace=None)


def local_write(root: Path, data: bytes, *, chunked: bool = False, rehash: bool = False) -> float:
    """SHA-256 of the bytes plus writing them to a file on the same disk and one fsync (the
    baseline). `chunked`: an fsync after every CHUNK_BYTES_MAX instead, as the coordinator
    commits each chunk; `rehash`: the SHA-256 computed by reading the file back afterwards, as
    the coordinator's finish does. Both only explain the gap; the baseline is neither."""
    path = root / "local.bin"
    t0 = mono()
    if not rehash:
        hashlib.sha256(data).hexdigest()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        step = limits.CHUNK_BYTES_MAX if chunked else len(data) or 1
        for off in range(0, len(data), step):
            view = memoryview(data)[off:off + step]
            while view:
                view = view[os.write(fd, view):]
            if chunked:
                os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    if rehash:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(limits.CHUNK_BYTES_MAX):
                h.update(block)
        h.hexdigest()
    dt = mono() - t0
    path.unlink()
    return dt


def bench_upload(sz: Sizes, root: Path, profile: Path | None) -> dict:
    mib = sz.upload_bytes / (1 << 20)
    say(f"Artifact upload: {mib:.0f} MiB in {limits.CHUNK_BYTES_MAX >> 20} MiB chunks, 8 in flight, "
        f"{sz.upload_repeats} repeat(s), against SHA-256 + write + fsync locally")
    r = root / "upload"
    coord = Coordinator(r)
    try:
        coord.submit(noop_spec(1, cap=1, name="uploadbench"))
        blobs = [os.urandom(sz.upload_bytes) for _ in range(sz.upload_repeats)]
        local_write(r, blobs[0])  # warm-up, not counted
        local: list[float] = []
        chunked: list[float] = []
        both: list[float] = []

        def before_each(data: bytes) -> None:
            local.append(local_write(r, data))
            chunked.append(local_write(r, data, chunked=True))
            both.append(local_write(r, data, chunked=True, rehash=True))

        prof = Profiler(profile, "upload", coord.pid, 5)
        times, verdict = asyncio.run(_upload_session(coord, blobs, window=8, before_each=before_each))
        prof.finish()
    finally:
        coord.stop()
    mib_s = lambda ts: sz.upload_bytes / (1 << 20) / statistics.median(ts)  # noqa: E731
    up, loc = mib_s(times), mib_s(local)
    res = {"upload_mib_s": up, "local_mib_s": loc, "upload_ratio": up / loc, "upload_report": verdict,
           "local_chunk_fsync_mib_s": mib_s(chunked), "local_chunk_fsync_rehash_mib_s": mib_s(both)}
    say(f"  upload {up:.0f} MiB/s (median of {len(times)}), local SHA-256 + write + fsync {loc:.0f} MiB/s "
        f"(median of {len(local)}): ratio {up / loc:.2f}; report referencing it: {verdict}")
    say(f"  to explain the gap, locally: an fsync per 1 MiB chunk {mib_s(chunked):.0f} MiB/s; that plus the "
        f"SHA-256 read back from the file afterwards {mib_s(both):.0f} MiB/s")
    return res


# ---- the table ---------------------------------------------------------------------------------

def table(fig: dict) -> list[str]:
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: str, target: str, met: bool | None) -> None:
        rows.append((name, value, target, "—" if met is None else ("yes" if met else "NO")))

    if "w1_cells_per_s" in fig:
        peers = {k: v for k, v in fig.get("w1_peers", {}).items() if k in W1_TARGET_PEERS}
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
    for slots, cells in REPORTS_SHAPES:
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


def bench_reports(sz: Sizes, root: Path, profile: Path | None) -> dict:
    """Durable reports/s over gRPC from 64 simulated workers of protocol 4 (every group's
    reports in one ReportBatch), with 2 and with 8 slots per worker."""
    say(f"Reports over gRPC: {sz.commit_clients} simulated workers of protocol 4, {sz.commit_window_s:g} s windows")
    out: dict = {}
    for slots, cells in REPORTS_SHAPES:
        r = grpc_commit_rate(sz, root / f"reports-{slots}-{cells}", None, profile, protocol=4, slots=slots, cells=cells,
                             total_cells=sz.reports_cells)
        key = f"reports_p4_{slots}slots" + ("" if cells == SUBJECTS else f"_{cells}cells")
        out[f"{key}_per_s"] = r["acked_rate"]
        out[key] = r
    return out


BENCHES = {"w1": bench_w1, "commit": bench_commit, "refill": bench_refill, "idle": bench_idle,
           "reports": bench_reports,
           "upload": bench_upload}


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
    ap.add_argument("--reports-shapes", default=",".join(f"{s}x{c}" for s, c in REPORTS_SHAPES),
                    help="reports: the windows, each SLOTSxCELLS (slots per worker, cells per group); "
                         "default: %(default)s")
    ap.add_argument("--w1-systems", default=",".join(W1_SYSTEMS),
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
    W1_SYSTEMS[:] = [n.strip() for n in a.w1_systems.split(",")]
    try:
        REPORTS_SHAPES[:] = [(int(s), int(c)) for s, c in (p.strip().split("x") for p in a.reports_shapes.split(","))]
    except ValueError:
        ap.error(f"--reports-shapes {a.reports_shapes!r}: expected SLOTSxCELLS[,SLOTSxCELLS...], e.g. 2x32")
    Coordinator.switch_interval_ms = a.switch_interval_ms
    Coordinator.cprofile = a.cprofile
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    say(f"bench_coordinator: {'quick' if a.quick else 'full'} run on {os.cpu_count()} cores, scratch {root}")
    figures: dict = {}
    started = mono()
    try:
        probe = [bare_lmdb_rate(root, 200, 1, 2.0)]
        say(f"disk probe: {probe[0]:.0f} synchronous 1-record LMDB commits/s ({1000 / probe[0]:.2f} ms each)")
        for n in names:
            t = mono()
            figures.update(BENCHES[n](sz, root, a.profile))
            say(f"  ({n}: {mono() - t:.0f} s)")
        probe.append(bare_lmdb_rate(root, 200, 1, 2.0))
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
