"""Benchmark of the coordinator's report path, stage by stage, without gRPC or a disk.

    python -m tools.bench.report_path [--cells 32] [--reports 40000] [--repeats 3]

A run of groups of `--cells` no-op cells on 64 workers of 2 slots. For each group pushed, the
ReportBatch frame a worker would send (every cell completed, score 1) is serialized, then
taken through what the coordinator does with it, each stage timed on its own:

    parse    WorkerFrame.FromString of the frame (gRPC's deserializer)
    decode   the servicer's loop: each report decoded, its ids checked (event loop)
    make     the CellReported commands built (actor)
    step     the core's step of each (actor); the group's last report releases the group
             and dispatches the next one, which `last-step` shows apart
    encode   each log record (actor)
    push     the frame of each new assignment (actor)
    acks     the AckBatch frames (event loop), and `ackser` their serialization

The collector is off while stages are timed (the coordinator's collections depend on what
else lives in its heap: the reports bench of tools/bench/coordinator measures them); the
run's records are frozen after the submit, as the actor does. What is left out: the log's
commit, the event loop's and gRPC's own work per frame, events and metrics. Prints the
median over `--repeats` of microseconds per report for each stage, and their total.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

from common.fleetpb import coordinator_pb2
from common.ids import AssignmentId, AttemptId, RunId, WorkerId
from common.policy import Policy
from common.spec import parse_spec
from coordinator import codec
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import PushAssignment
from coordinator.logcodec import encode_cell_reported
from tools.bench.clients import bench_report, noop_spec
from tools.bench.core import answer_offers

WORKERS = 64
SLOTS = 2
STAGES = ("parse", "decode", "make", "step", "encode", "push", "acks", "ackser", "last-step")


def once(cells: int, reports: int) -> dict[str, float]:
    """Microseconds per report of each stage, over about `reports` reports."""
    groups = reports // cells + WORKERS * SLOTS + 1
    spec = parse_spec(noop_spec(groups, cap=WORKERS * SLOTS, subjects=cells))
    state, t = step(new_state(), c.RunSubmitted(0, RunId("run-bench"), spec, Policy()))
    assert t.outcome.ok, t.outcome
    gc.collect()
    gc.freeze()
    queue: list[PushAssignment] = []
    for i in range(WORKERS):
        state, t = step(state, c.WorkerRegistered(1, WorkerId(f"w{i}"), 1, SLOTS, "env"))
        state, effects = answer_offers(state, t.effects, 1)
        queue.extend(e for e in effects if isinstance(e, PushAssignment))
    parts = codec.RunParts.of(spec)
    spent = dict.fromkeys(STAGES, 0.0)
    done = 0
    now = 10
    clock = time.perf_counter
    gc.disable()
    try:
        while queue and done < reports:
            push = queue.pop(0)
            now += 1
            data = coordinator_pb2.WorkerFrame(seq=5, report_batch=coordinator_pb2.ReportBatch(reports=[
                coordinator_pb2.CellReport(attempt_id=cd.attempt_id, assignment_id=push.assignment_id,
                                           generation=push.generation, report=bench_report(now))
                for cd in push.cells])).SerializeToString()
            t0 = clock()
            frame = coordinator_pb2.WorkerFrame.FromString(data)
            t1 = clock()
            rows = []
            wire = []
            for r in frame.report_batch.reports:
                report = codec.decode_report(r.report)
                rows.append((AttemptId(codec.require_id(r.attempt_id, "attempt_id")),
                             AssignmentId(codec.require_id(r.assignment_id, "assignment_id")), r.generation, report))
                wire.append(r.report)
            t2 = clock()
            cmds = [c.CellReported(now, push.worker_id, a, g, n, rep) for a, g, n, rep in rows]
            t3 = clock()
            transitions = []
            for cmd in cmds[:-1]:
                state, t = step(state, cmd)
                transitions.append(t)
            t_last = clock()
            state, t = step(state, cmds[-1])
            transitions.append(t)
            t4 = clock()
            records = [encode_cell_reported(i, cmd, w) for i, (cmd, w) in enumerate(zip(cmds, wire))]
            t5 = clock()
            frames = []
            for t in transitions:
                for e in t.effects:
                    if isinstance(e, PushAssignment):
                        frames.append(codec.push_frame(e, parts, now))
                        queue.append(e)
            t6 = clock()
            acks = codec.ack_batch_frames([(5 + i, t.outcome) for i, t in enumerate(transitions)])
            t7 = clock()
            for f in acks:
                f.SerializeToString()
            t8 = clock()
            assert all(t.outcome.ok for t in transitions) and len(records) == len(cmds)
            state, _ = step(state, c.GroupFinished(now, push.worker_id, push.assignment_id))
            for name, took in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t8 - t7,
                                           t4 - t_last)):
                spent[name] += took
            done += len(cmds)
    finally:
        gc.enable()
        gc.unfreeze()
    return {name: s / done * 1e6 for name, s in spent.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.report_path", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=32, help="cells per group, so reports per frame (default 32)")
    ap.add_argument("--reports", type=int, default=40_000, help="reports timed per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    runs = [once(a.cells, a.reports) for _ in range(a.repeats)]
    print(f"report path, {a.cells} cells per group, {a.reports} reports, median of {a.repeats} "
          f"(us per report; last-step is part of step):")
    for name in STAGES:
        print(f"  {name:9s} {statistics.median(r[name] for r in runs):6.2f}")
    total = statistics.median(sum(v for k, v in r.items() if k != "last-step") for r in runs)
    print(f"  {'total':9s} {total:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
