"""The simulation at scale: `python -m tools.sim --scale` (10,000 workers x 4 slots, 1,000,000 cells).

The same model as tools/sim/simulation.py (the real core, virtual time, the faulty network, workers
with durable outboxes), sized up, with faults drawn per seed in proportion to the fleet:
worker crashes, partitions and stream resets on a fraction of the workers, several
coordinator restarts, lost, duplicated and late frames, a pause, an environment failure and
a straggler. Three things change so that it runs on one core in tens of minutes:

1. Invariants are checked incrementally after every durable command (tools/sim/invariants.py:
   what the command touched, and the run's counters against a mirror), and over the whole
   state at checkpoints: every `checkpoint_every` commands, after each coordinator restart,
   and at the end.
2. A coordinator restart recovers as the daemon does: the newest snapshot (the daemon's own
   codec, coordinator/snapshot.py, taken every `snapshot_every` log records) plus the tail of
   the log. The recovered state's durable fingerprint must equal the crashed one's.
3. At the end, the whole log is replayed once from nothing and must rebuild the final state.

It prints one JSON report: commands, wall time, the core's cost per command (its step alone,
and with the incremental checks), per command kind, peak RSS, the faults injected by kind, the
invariant checks run, and the final accounting (selected, lost, duplicated).
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from typing import Any

from common.evidence import Execution, Verification, is_selectable
from coordinator.core import commands as c
from coordinator.core import new_state, step, summarize
from coordinator.core.state import durable_view
from coordinator.snapshot import decode_state, encode_state
from tools.sim.invariants import IncrementalMonitor
from tools.sim.simulation import SimFailure, Simulation

SCALE_WORKERS = 10_000
SCALE_SLOTS = 4
SCALE_CELLS = 1_000_000
SCALE_SUBJECTS = 4  # cells per group: 250,000 groups at 1,000,000 cells
SCALE_RESTARTS = 3
# A worker's cells take 1-8 virtual seconds; with every slot busy a wave of groups takes about
# 8 s, so the run lasts groups / slots waves. Faults fall in the first part of that (at least a
# minute), so that they hit a run in full flight and the run then has to settle.
WAVE_MS = 8_000
FAULT_WINDOW_MS_MIN = 60_000
CRASH_FRACTION = 0.01  # of the workers: their process dies and restarts 2-10 s later
PARTITION_FRACTION = 0.01  # silent for 20-40 s; the keepalive ends the stream
RESET_FRACTION = 0.005  # stream reset by a middlebox; the worker reconnects at once
# Every this many commands the whole state is checked. At 1,000,000 cells a checkpoint costs
# seconds, so about a dozen of them over a run of ~5,000,000 commands.
CHECKPOINT_EVERY_COMMANDS = 500_000
# The daemon snapshots every limits.SNAPSHOT_EVERY_RECORDS (25,000) records, off its actor
# thread; here a snapshot is encoded on the simulation's only thread, so less often.
SNAPSHOT_EVERY_RECORDS = 250_000


class ScaleSimulation(Simulation):
    def __init__(self, seed: int, *, check: bool = True, workers: int = SCALE_WORKERS, slots: int = SCALE_SLOTS,
                 cells: int = SCALE_CELLS, subjects: int = SCALE_SUBJECTS, restarts: int = SCALE_RESTARTS,
                 checkpoint_every: int = CHECKPOINT_EVERY_COMMANDS, snapshot_every: int = SNAPSHOT_EVERY_RECORDS,
                 final_replay: bool = True) -> None:
        if cells % subjects:
            raise ValueError(f"{cells} cells do not divide into groups of {subjects} subjects")
        super().__init__(seed, check=check, groups_tasks=cells // subjects, repetitions=1, subjects=subjects,
                         workers=workers, max_concurrent_groups=workers * slots, slots=slots)
        self.faults.coordinator_restarts = restarts
        waves = -(-(cells // subjects) // (workers * slots))
        self.fault_window_ms = max(FAULT_WINDOW_MS_MIN, waves * WAVE_MS)
        self.checkpoint_every = checkpoint_every
        self.snapshot_every = snapshot_every
        self.final_replay = final_replay
        self.inc = IncrementalMonitor()
        self.snapshot: tuple[int, bytes] | None = None  # (log records it covers, encoded state)
        self.kinds: dict[str, list[int]] = {}  # command kind -> [count, step ns]
        self.step_ns = 0
        self.check_ns = 0
        self.seconds = {"checkpoints": 0.0, "snapshots": 0.0, "restart_replay": 0.0, "restart_comparisons": 0.0,
                        "final_replay": 0.0}
        self.checkpoint_reasons: dict[str, int] = {}
        self.restart_tails: list[int] = []
        self.injected: dict[str, int] = {}
        self.durable_commands = 0  # commands whose step wrote to the log (one or more records)

    # --- the coordinator ----------------------------------------------------------------------
    def apply(self, cmd: object) -> Any:
        self.commands += 1
        t0 = time.thread_time_ns()
        self.state, t = step(self.state, cmd)
        t1 = time.thread_time_ns()
        self.step_ns += t1 - t0
        kind = self.kinds.get(type(cmd).__name__)
        if kind is None:
            kind = self.kinds[type(cmd).__name__] = [0, 0]
        kind[0] += 1
        kind[1] += t1 - t0
        if t.durable:
            self.log.extend(t.durable)
            self.durable_commands += 1
            if self.check:
                bad = self.inc.observe(self.state, cmd, t)
                self.check_ns += time.thread_time_ns() - t1
                if bad:
                    raise SimFailure(self.seed, self.commands, self.now, f"{type(cmd).__name__}: {bad[0]}")
            if len(self.log) - (self.snapshot[0] if self.snapshot else 0) >= self.snapshot_every:
                self.take_snapshot()
        if self.check and self.commands % self.checkpoint_every == 0:
            self.checkpoint("every %d commands" % self.checkpoint_every)
        if isinstance(cmd, c.CellReported) and t.outcome.ok:
            self.count_outcome(cmd)
        return self.deliver(t)

    def count_outcome(self, cmd: c.CellReported) -> None:
        r = cmd.report
        if r.environment_failure:
            kind = "environment_failure_reports"
        elif r.execution == Execution.UNKNOWN:
            kind = "infrastructure_failure_reports"
        elif r.verification == Verification.INVALID:
            kind = "verifier_invalid_reports"
        elif r.execution == Execution.SUBJECT_FAILED:
            kind = "subject_failure_reports"
        else:
            return
        self.injected[kind] = self.injected.get(kind, 0) + 1

    def checkpoint(self, reason: str) -> None:
        # What lived this long lives to the end: out of the cyclic collector's walks.
        gc.freeze()
        started = time.thread_time()
        bad = self.inc.checkpoint(self.state)
        self.seconds["checkpoints"] += time.thread_time() - started
        self.checkpoint_reasons[reason] = self.checkpoint_reasons.get(reason, 0) + 1
        if bad:
            raise SimFailure(self.seed, self.commands, self.now, f"checkpoint ({reason}): {bad[0]}")

    def take_snapshot(self) -> None:
        started = time.thread_time()
        self.snapshot = (len(self.log), encode_state(self.state))
        self.seconds["snapshots"] += time.thread_time() - started

    def restart_coordinator(self) -> None:
        """Crash: lose memory and in-flight frames; recover from the newest snapshot and the log's tail."""
        started = time.thread_time()
        before = durable_view(self.state) if self.check else None
        self.seconds["restart_comparisons"] += time.thread_time() - started
        self.coordinator_up = False
        self.restarts += 1
        for w in self.workers.values():
            w.connected = False
        self.note("coord crashed")
        started = time.thread_time()
        done, data = self.snapshot if self.snapshot else (0, b"")
        state = decode_state(data) if data else new_state()
        for cmd in self.log[done:]:
            state, t = step(state, cmd)
            assert t.outcome.ok, f"replay of {cmd} was refused: {t.outcome}"
        self.seconds["restart_replay"] += time.thread_time() - started
        self.restart_tails.append(len(self.log) - done)
        if self.check:
            # The canonical view that `durable_fingerprint` hashes, compared as it is: half the
            # cost of two fingerprints at a million cells.
            started = time.thread_time()
            same = durable_view(state) == before
            del before
            self.seconds["restart_comparisons"] += time.thread_time() - started
            if not same:
                raise SimFailure(self.seed, self.commands, self.now,
                                 "the snapshot and the log's tail did not rebuild the state")
        self.state = state
        if self.check:
            self.checkpoint("after a coordinator restart")
        self.at(self.now + self.rng.randint(1_000, 5_000), "coord_up")

    # --- faults ---------------------------------------------------------------------------------
    def schedule_faults(self) -> None:
        f, rng = self.faults, self.rng
        wids = list(self.workers)
        t0, window = self.start_ms + 5_000, self.start_ms + self.fault_window_ms
        n = len(wids)
        chosen = rng.sample(wids, min(n, max(1, round(n * CRASH_FRACTION)) + max(1, round(n * PARTITION_FRACTION))
                                      + max(1, round(n * RESET_FRACTION))))
        crashes = chosen[:max(1, round(n * CRASH_FRACTION))]
        partitions = chosen[len(crashes):len(crashes) + max(1, round(n * PARTITION_FRACTION))]
        resets = chosen[len(crashes) + len(partitions):]
        for wid in crashes:
            self.at(rng.randint(t0, window), "crash", wid)
        for wid in partitions:
            self.at(rng.randint(t0, window), "partition", wid, rng.randint(20_000, 40_000))
        for wid in resets:
            self.at(rng.randint(t0, window), "stream_reset", wid)
        # Restarts spread over the window, so that each one recovers from a later snapshot.
        for i in range(f.coordinator_restarts):
            lo = t0 + (window - t0) * i // f.coordinator_restarts
            self.at(rng.randint(lo, lo + (window - t0) // f.coordinator_restarts), "coord_crash")
        if f.pause:
            start = rng.randint(t0, window)
            self.at(start, "pause")
            self.at(start + rng.randint(5_000, 30_000), "recover")
        self.injected.update(worker_crashes_scheduled=len(crashes), partitions_scheduled=len(partitions),
                             stream_resets_scheduled=len(resets), pause=int(f.pause))

    # --- the end -------------------------------------------------------------------------------
    def finish(self) -> dict:
        summary = summarize(self.state, self.run_id)
        run = self.state.runs[self.run_id]
        lost = [tid for tid, cid in self.acked_selectable.items() if run.cells[cid].selected != tid]
        selectable_per_cell: dict[str, int] = {}
        for attempt in self.state.attempts.values():
            if not attempt.late and (r := attempt.report) is not None and is_selectable(r):
                selectable_per_cell[attempt.cell_id] = selectable_per_cell.get(attempt.cell_id, 0) + 1
        duplicated = sum(1 for n in selectable_per_cell.values() if n > 1) + self.inc.selection_changes
        if self.check:
            self.checkpoint("at the end")
            self.final_checks_at_scale(summary, lost, duplicated)
        return {"summary": summary, "lost": len(lost), "duplicated": duplicated}

    def final_checks_at_scale(self, summary: Any, lost: list, duplicated: int) -> None:
        fail = self.fail
        self.settled_checks(summary)
        if lost:
            fail(f"acknowledged result {lost[0]} is not the selected result of its cell ({len(lost)} lost)")
        if duplicated:
            fail(f"{duplicated} cells have more than one selectable authoritative result")
        if self.final_replay:
            started = time.thread_time()
            replayed = new_state()
            for cmd in self.log:
                replayed, t = step(replayed, cmd)
                assert t.outcome.ok, f"replay of {cmd} was refused: {t.outcome}"
            same = durable_view(replayed) == durable_view(self.state)
            self.seconds["final_replay"] = time.thread_time() - started
            del replayed
            if not same:
                fail("replaying the whole log does not rebuild the final state")


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def run_scale(seed: int, *, check: bool = True, **sizes: Any) -> dict:
    """One scaled run; the JSON report. An assertion inside the core becomes a SimFailure."""
    started = time.perf_counter()
    cpu0 = time.process_time()
    sim = ScaleSimulation(seed, check=check, **sizes)
    setup_s = time.process_time() - cpu0
    # The state is millions of records that live to the end: the cyclic collector would walk
    # them again and again for garbage they never make (as coordinator/snapshot.py notes).
    gc.freeze()
    try:
        end = sim.run()
    except AssertionError as e:
        raise SimFailure(seed, sim.commands, sim.now, f"assertion failed: {e}") from e
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    summary = end["summary"]
    n = sim.commands
    durable_cmds = sim.inc.incremental_checks or 1
    kinds = {k: {"count": v[0], "core_us": round(v[1] / v[0] / 1e3, 2)} for k, v in sorted(sim.kinds.items())}
    checks_s = sim.check_ns / 1e9 + sim.seconds["checkpoints"]
    return {
        "scenario": {"seed": seed, "workers": len(sim.workers), "slots_per_worker": sim.workers[next(iter(sim.workers))].slots,
                     "cells": sim.spec.cell_count, "groups": sim.spec.group_count,
                     "max_concurrent_groups": sim.spec.max_concurrent_groups,
                     "fault_window_ms": sim.fault_window_ms, "checkpoint_every_commands": sim.checkpoint_every,
                     "snapshot_every_records": sim.snapshot_every, "check": check},
        "commands": n,
        "durable_records": len(sim.log),
        "durable_commands": sim.durable_commands,
        "elapsed_virtual_ms": sim.now,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "cpu_seconds_by_part": {"setup": round(setup_s, 1), "core_step": round(sim.step_ns / 1e9, 1),
                    "incremental_checks": round(sim.check_ns / 1e9, 1),
                    **{k: round(v, 1) for k, v in sim.seconds.items()}},
        "cost_per_command_us": {
            "core_step": round(sim.step_ns / n / 1e3, 2),
            "core_step_with_incremental_checks": round((sim.step_ns + sim.check_ns) / n / 1e3, 2),
            "core_step_with_all_checks": round((sim.step_ns / 1e9 + checks_s) / n * 1e6, 2),
            "incremental_check_per_durable_command": round(sim.check_ns / durable_cmds / 1e3, 2),
            "whole_simulation_cpu": round(cpu / n * 1e6, 2),
            "by_kind": kinds,
        },
        "peak_rss_mb": peak_rss_mb(),
        "faults": {**sim.injected, "worker_crashes": sim.stats["worker_crashes"],
                   "partitions": sim.stats["partitions"], "coordinator_restarts": sim.restarts,
                   "frames_dropped": sim.stats["frames_dropped"], "frames_duplicated": sim.stats["frames_duplicated"],
                   "late_reports": sim.stats["late_reports"],
                   "rates": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in vars(sim.faults).items()}},
        "invariants": {"incremental_checks": sim.inc.incremental_checks, "entities_checked": sim.inc.entities_checked,
                       "full_checkpoints": sim.inc.checkpoints, "checkpoints_by_reason": sim.checkpoint_reasons,
                       "restart_tail_records": sim.restart_tails,
                       "final_full_replay": bool(check and sim.final_replay)},
        "accounting": {"state": summary.state, "cells": sim.spec.cell_count, "selected": len(summary.selected),
                       "incomplete": len(summary.incomplete), "lost": end["lost"], "duplicated": end["duplicated"],
                       "attempts_dispatched": summary.attempts_dispatched, "late_reports": summary.late_reports,
                       "peak_concurrent_groups": summary.peak_concurrent_groups,
                       "usage_complete": summary.usage_complete},
    }


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("scale (with --scale)")
    g.add_argument("--workers", type=int, default=SCALE_WORKERS, help=f"workers (default {SCALE_WORKERS:,})")
    g.add_argument("--slots", type=int, default=SCALE_SLOTS, help=f"slots per worker (default {SCALE_SLOTS})")
    g.add_argument("--cells", type=int, default=SCALE_CELLS, help=f"cells (default {SCALE_CELLS:,})")
    g.add_argument("--subjects", type=int, default=SCALE_SUBJECTS, help="subjects: cells per group")
    g.add_argument("--restarts", type=int, default=SCALE_RESTARTS, help="coordinator restarts")
    g.add_argument("--checkpoint-every", type=int, default=CHECKPOINT_EVERY_COMMANDS,
                   help="commands between whole-state checks")
    g.add_argument("--snapshot-every", type=int, default=SNAPSHOT_EVERY_RECORDS,
                   help="log records between snapshots")
    g.add_argument("--no-final-replay", action="store_true", help="skip replaying the whole log at the end")


def main(args: argparse.Namespace) -> int:
    try:
        report = run_scale(args.seed, check=not args.no_check, workers=args.workers, slots=args.slots,
                           cells=args.cells, subjects=args.subjects, restarts=args.restarts,
                           checkpoint_every=args.checkpoint_every, snapshot_every=args.snapshot_every,
                           final_replay=not args.no_final_replay)
    except SimFailure as e:
        print(f"FAIL {e}\nreplay: python -m tools.sim --scale --seed {e.seed} --workers {args.workers} "
              f"--cells {args.cells}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1))
    return 0

