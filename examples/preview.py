#!/usr/bin/env python3
"""Run every cell of an example spec through the worker's command executor, without a
coordinator, and print what each cell got: a preview of `fleetctl local`, and the serial
baseline that a fleet's wall time is measured against.

    .venv/bin/python examples/preview.py examples/quick/experiment.json             # serial
    .venv/bin/python examples/preview.py examples/quick/experiment.json --groups 6  # as a fleet

The bench root is the spec's directory; the policy is policy.json beside it (or --policy).
Serial (the default) runs one cell at a time. With --groups N, up to N task groups run at
once and the subjects of a group start together, as on a worker. Retries follow the
coordinator's rule in miniature: an attempt whose report is not selectable (INDETERMINATE,
or INFRA_FAILED without an environment failure) is dispatched again after the policy's
backoff with the next attempt id (`:a2`, ...) until maxAttemptsPerCell; a selectable report
(a score, zero included) ends the cell. An environment failure would pause a real run; here
it is reported and the cell left incomplete. Exit status: 0 when every cell has a selected
result, 1 when some are incomplete.
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.evidence import Report, Usage, is_selectable
from common.ids import assignment_id_for, attempt_id_for, cell_id_for, group_id_for, run_id_for
from common.policy import Policy, parse_policy_text
from common.spec import ExperimentSpec, parse_spec_text
from worker.executor import CellJob, Executor, executor_for
from worker.executor.base import AttemptDirs


@dataclass
class Cell:
    id: str
    subject: str
    trail: list[str] = field(default_factory=list)  # one "status(seconds)" per attempt
    reports: list[Report] = field(default_factory=list)
    selected: Report | None = None


def job_for(spec: ExperimentSpec, policy: Policy, index: int, subject: dict, dispatch: int,
            bench_root: Path, work_root: Path) -> CellJob:
    """The job a worker would be given for dispatch `dispatch` of one cell of group `index`."""
    doc = spec.document()
    run = run_id_for(spec.canonical, policy.canonical())
    task_id, rep = spec.group_key(index)
    cell = cell_id_for(task_id, rep, subject["id"])
    return CellJob(
        run_id=run, assignment_id=assignment_id_for(run, group_id_for(task_id, rep), dispatch),
        attempt_id=attempt_id_for(run, cell, dispatch), cell_id=cell, task_id=task_id,
        repetition=rep, subject_id=subject["id"],
        task=next(t for t in doc["tasks"] if t["id"] == task_id), subject=subject,
        verifier=doc["verifier"], executor=doc["executor"],
        subject_timeout_s=spec.subject_timeout_ms // 1000, bench_root=bench_root,
        work_root=work_root, credentials={})


async def run_cell(executor: Executor, spec: ExperimentSpec, policy: Policy, index: int,
                   subject: dict, bench_root: Path, work_root: Path) -> Cell:
    task_id, rep = spec.group_key(index)
    cell = Cell(cell_id_for(task_id, rep, subject["id"]), subject["id"])
    for dispatch in range(1, policy.max_attempts_per_cell + 1):
        if dispatch > 1:
            await asyncio.sleep(policy.backoff_ms(dispatch - 1) / 1000)
        job = job_for(spec, policy, index, subject, dispatch, bench_root, work_root)
        t0 = time.monotonic()
        r = (await executor.run(job, asyncio.Event())).report
        # No session uploads the attempt's logs here: drop them at once.
        shutil.rmtree(AttemptDirs.of(work_root, job.attempt_id).root, ignore_errors=True)
        cell.trail.append(f"{r.status.name.lower()}({time.monotonic() - t0:.1f}s)")
        cell.reports.append(r)
        if r.environment_failure:
            cell.trail.append(f"[environment failure: {r.environment_failure}; a run would pause]")
            break
        if is_selectable(r):
            cell.selected = r
            break
    return cell


def cost(r: Report | None) -> str:
    if r is None:
        return ""
    return f"${r.cost_usd:.4f}" if r.cost_usd is not None else "unknown"


async def run_all(spec: ExperimentSpec, policy: Policy, bench_root: Path, work_root: Path,
                  groups: int) -> list[Cell]:
    executor = executor_for(spec.executor_kind)
    subjects = spec.document()["subjects"]
    if groups <= 1:
        return [await run_cell(executor, spec, policy, i, s, bench_root, work_root)
                for i in range(spec.group_count) for s in subjects]
    slots = asyncio.Semaphore(groups)

    async def group(i: int) -> list[Cell]:
        async with slots:  # a group holds its slot until all its cells settle
            return list(await asyncio.gather(*(run_cell(executor, spec, policy, i, s, bench_root, work_root)
                                               for s in subjects)))

    done = await asyncio.gather(*(group(i) for i in range(spec.group_count)))
    return [c for cells in done for c in cells]


def summarize(spec: ExperimentSpec, cells: list[Cell], wall: float, groups: int) -> None:
    width = max(len(c.id) for c in cells) + 2
    print(f"{'cell':<{width}}{'attempts':<44}{'score':>6}{'cost':>10}")
    for c in cells:
        score = f"{c.selected.score:.2f}" if c.selected else "-"
        print(f"{c.id:<{width}}{' '.join(c.trail):<44}{score:>6}{cost(c.selected):>10}")
    print()
    for subject in spec.subjects:
        mine = [c.selected for c in cells if c.subject == subject.id and c.selected]
        known = [r.cost_usd for r in mine if r.cost_usd is not None]
        mean = f"{sum(r.score for r in mine) / len(mine):.3f}" if mine else "-"
        unknown = f" + {len(mine) - len(known)} unknown" if len(known) < len(mine) else ""
        print(f"{subject.id:<12} selected {len(mine)}/{spec.group_count}  mean score {mean}  "
              f"selected cost ${sum(known):.4f}{unknown}")
    reports = [r for c in cells for r in c.reports]
    observed = sum(r.cost_usd for r in reports if r.cost_usd is not None)
    partial = sum(r.usage != Usage.COMPLETE for r in reports)
    incomplete = sum(c.selected is None for c in cells)
    print(f"{len(reports)} attempts for {len(cells)} cells, {incomplete} incomplete; observed cost "
          f"${observed:.4f} over all attempts ({partial} without complete usage)")
    mode = "serial" if groups <= 1 else f"{groups} groups at once"
    print(f"wall time {wall:.1f}s ({mode})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec", type=Path)
    p.add_argument("--policy", type=Path, help="default: policy.json beside the spec, else {}")
    p.add_argument("--groups", type=int, default=1, help="task groups run at once (default 1: one cell at a time)")
    args = p.parse_args(argv)
    spec = parse_spec_text(args.spec.read_text())
    policy_path = args.policy or args.spec.with_name("policy.json")
    policy = parse_policy_text(policy_path.read_text() if policy_path.is_file() else "{}")
    bench_root = args.spec.resolve().parent
    work_root = Path(tempfile.mkdtemp(prefix="fleet-preview-"))
    try:
        started = time.monotonic()
        cells = asyncio.run(run_all(spec, policy, bench_root, work_root, args.groups))
        summarize(spec, cells, time.monotonic() - started, args.groups)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    return 1 if any(c.selected is None for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
