"""The coordinator bench `commit`: durable commands/s with 64 simulated workers (raw
`Coordinator.Session` clients in 2 processes: hello, welcome, pushes, cell reports, acks, group
finished) against the same coordinator with batching off (`Actor(batch_max=1)`: one LMDB transaction
per command), and against bare LMDB commits of the same record size and batch size with sync=True on
the same disk. Also the actor alone, in process, over the same closed loop of requests, with and
without batching.

Run by `python -m tools.bench.coordinator --only commit` (tools/bench/coordinator.py: sizes, the
table of every figure, the command line).
"""
from __future__ import annotations

import collections
import os
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from common.fleetpb import admin_pb2
from tools.bench.clients import ENVIRONMENT_ID, SUBJECTS, Clients, noop_spec
from tools.bench.harness import START_TIMEOUT_S, Coordinator, Profiler, cpu_seconds, mono, process_cpu_seconds, say
from tools.bench.sizes import Sizes


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
