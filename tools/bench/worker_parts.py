"""CPU of a W1 group's worker-side parts, each alone in this process: the outbox's share and the
python executor's, so that a change to either is measured without W1's noise.

    python -m tools.bench.worker_parts [--groups N] [--rounds R]

  outbox      what the session asks of WorkerState for one group of 3 cells, 2 groups at a
              time (W1's 2 slots): the assignment recorded (urgent), 3 reports put (the last
              urgent), their 3 acks and the finish queued, group-committed as the session does;
  outbox, no fsync  the same on an environment opened with sync off: what the fsyncs cost
              (never a setting of fleet: shown only to split the figure);
  executor    PythonExecutor.run of W1's no-op subject and verifier (tools/bench/data/noopbench),
              6 cells at a time (2 groups x 3), its cell thread hop included.

Each figure is process CPU (utime + stime, every thread) per group, median of the rounds; a
group is 3 executor cells. Everything runs in this process, in a scratch dir removed at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import lmdb

from common.ids import AssignmentId, AttemptId, WorkerId
from tools.bench.harness import REPO, say
from worker.executor import CellJob
from worker.executor.base import CancelEvent
from worker.executor.pyfunc import PythonExecutor
from worker.outbox import WorkerState

NOOPBENCH = REPO / "tools" / "bench" / "data" / "noopbench"
SUBJECTS = 3
SLOTS = 2


@contextmanager
def _no_fsync() -> Iterator[None]:
    real = lmdb.open
    lmdb.open = lambda *a, **k: real(*a, **{**k, "sync": False, "metasync": False})  # type: ignore[assignment]
    try:
        yield
    finally:
        lmdb.open = real  # type: ignore[assignment]


async def _outbox_group(state: WorkerState, g: int) -> None:
    aid = AssignmentId(f"run-1:g{g}")
    await state.record_assignment_async(aid, b"p" * 300)
    attempts = [AttemptId(f"run-1:t{g}/s{s}:a1") for s in range(SUBJECTS)]
    await asyncio.gather(*(state.put_report_async(a, aid, b"r" * 200, (), urgent=s == SUBJECTS - 1)
                           for s, a in enumerate(attempts)))
    await asyncio.gather(*(state.ack_queued(a) for a in attempts))
    await state.finish_assignment_queued(aid)


def _job(root: Path, g: int, s: int) -> CellJob:
    return CellJob(run_id="run-1", assignment_id=f"run-1:g{g}", attempt_id=f"run-1:t{g}/s{s}:a1",
                   cell_id=f"t{g}/s{s}", task_id=f"t{g}", repetition=1, subject_id=f"s{s}", task={"id": f"t{g}"},
                   subject={"id": f"s{s}", "callable": "noopbench:noop"}, verifier={"callable": "noopbench:accept"},
                   executor={"kind": "python"}, subject_timeout_s=60, bench_root=NOOPBENCH, work_root=root,
                   credentials={})


async def _executor_group(ex: PythonExecutor, root: Path, g: int) -> None:
    outs = await asyncio.gather(*(ex.run(_job(root, g, s), CancelEvent()) for s in range(SUBJECTS)))
    bad = [o.report for o in outs if o.report.score != 1.0]
    if bad:
        raise RuntimeError(f"a no-op cell did not score 1: {bad[0]}")


async def _rounds(one: Callable[[int], Awaitable[None]], groups: int, rounds: int) -> list[float]:
    """CPU microseconds per group of each round; SLOTS lanes run groups one after another."""
    per_group = []
    for r in range(rounds + 1):  # round 0 warms up and is not counted
        async def lane(lane_no: int, r: int = r) -> None:
            for k in range(lane_no, groups, SLOTS):
                await one(r * groups + k)
        c0 = time.process_time()
        await asyncio.gather(*(lane(i) for i in range(SLOTS)))
        if r:
            per_group.append((time.process_time() - c0) / groups * 1e6)
    return per_group


async def bench(root: Path, groups: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name, fsync in (("outbox", True), ("outbox, no fsync", False)):
        with _no_fsync() if not fsync else nullcontext():
            state = WorkerState.open(root / name.replace(", ", "-").replace(" ", "-"), worker_id=WorkerId("w1"))
        try:
            out[name] = await _rounds(lambda g, st=state: _outbox_group(st, g), groups, rounds)
        finally:
            state.close()
    ex = PythonExecutor()
    out["executor"] = await _rounds(lambda g: _executor_group(ex, root / "scratch", g), groups, rounds)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=500, help="groups per round (default 500)")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    a = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="fleet-worker-parts-"))
    try:
        figures = asyncio.run(bench(root, a.groups, a.rounds))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    say(f"worker parts, CPU per group of {SUBJECTS} cells ({a.groups} groups a round, {SLOTS} at a time), "
        f"median of {a.rounds} rounds (each round)")
    for name, values in figures.items():
        say(f"  {name:18s} {statistics.median(values):6.0f} us  ({', '.join(f'{v:.0f}' for v in values)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
