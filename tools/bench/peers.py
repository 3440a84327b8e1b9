"""W1 on fleet's peers, in the same run as fleet's own W1 (tools/bench/coordinator.py --only w1):
Dask distributed, Celery with Redis (append-only file with appendfsync always, late acks), and
Celery with Redis as both come (`celery-defaults`: Redis without its append-only file, tasks
acked on receipt, prefetch 4): a task lost with a worker or the broker is then lost for good.

The same workload: GROUPS x 3 cells, each cell the no-op subject and verifier of
tools/bench/data/noopbench (tools/bench/data/peer_tasks.py), 4 worker processes with 2 group
slots of 3 cells each (6 threads), results read back through each system's own result path
and checked (every score 1). CPU per role is utime + stime of the process trees: the
scheduler or the broker (redis-server) for the coordinator's role, the 4 worker processes
for the workers'. The client (this process) is counted for no system, as for fleet. Each peer
runs the shape its users would write for this workload: one task per group whose 3 cells start
together (a group is the capacity unit and its subjects start together), 2 task threads per
worker as fleet's 2 slots; Dask also runs one task per cell (`dask-cells`, a named second row).

Needs `pip install -e '.[bench]'` and `redis-server` on PATH (`apt-get install redis-server`);
a system whose software is missing is skipped with a line saying so. Everything on 127.0.0.1,
every process started here and stopped by its pid.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from tools.bench.harness import PY, START_TIMEOUT_S, free_port, tree_cpu

SUBJECTS = 3
WORKERS = 4
SLOTS_PER_WORKER = 2  # group slots, as fleet's workers have
THREADS_PER_WORKER = SLOTS_PER_WORKER * SUBJECTS  # the per-cell shape: a thread per cell of 2 groups
RUN_TIMEOUT_S = 900


def _check(values: list[dict], groups: int, name: str) -> None:
    cells = groups * SUBJECTS
    good = sum(1 for v in values if v["score"] == 1.0 and v["usage"]["costUsd"] == 0.0)
    seen = {(v["group"], v["subject"]) for v in values}
    if good != cells or len(seen) != cells:
        raise RuntimeError(f"{name}: {good} of {cells} cells with score 1 ({len(seen)} distinct)")


def _measure(name: str, groups: int, number: int, coord_pids: Callable[[], list[int]],
             worker_pids: Callable[[], list[int]], run_once: Callable[[], list[dict]], say: Callable[[str], None]) -> dict:
    """One run, printed as run `number` (its round in bench_coordinator's W1)."""
    cells = groups * SUBJECTS
    c0, w0 = tree_cpu(coord_pids()), tree_cpu(worker_pids())
    t0 = time.monotonic()
    values = run_once()
    elapsed = time.monotonic() - t0
    c1, w1 = tree_cpu(coord_pids()), tree_cpu(worker_pids())
    _check(values, groups, name)
    got = {"cells_per_s": cells / elapsed, "coordinator_cpu_s_per_1000": (c1 - c0) / cells * 1000,
           "workers_cpu_s_per_1000": (w1 - w0) / cells * 1000}
    say(f"  {name} run {number}: {cells} cells in {elapsed:.2f} s = {got['cells_per_s']:.0f} cells/s (CPU per 1,000 "
        f"cells: {'scheduler' if name.startswith('dask') else 'broker'} {got['coordinator_cpu_s_per_1000']:.2f} s, "
        f"workers {got['workers_cpu_s_per_1000']:.2f} s)")
    return got


def _flat(results: list[list[dict]]) -> list[dict]:
    return [c for g in results for c in g]


def bench_dask(groups: int, number: int, root: Path, proc: Callable[..., Any], say: Callable[[str], None], *,
               per_cell: bool = False) -> dict | None:
    """One W1 run on a fresh scheduler and workers, printed as run `number`. The faithful shape
    (`dask`): one task per group, 2 threads per worker (its group slots), the group's 3 cells
    started together inside it (peer_tasks.group); `per_cell` (`dask-cells`): one task per cell
    on 6 threads per worker, a shape that no longer starts a group's subjects together."""
    name = "dask-cells" if per_cell else "dask"
    if importlib.util.find_spec("distributed") is None:
        say("  dask: skipped (pip install -e '.[bench]')")
        return None
    from distributed import Client

    from tools.bench.data.peer_tasks import cell, group

    root.mkdir(parents=True, exist_ok=True)
    sched_file = root / "scheduler.json"
    sched = proc("dask scheduler", [PY, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                                    "--no-dashboard", "--scheduler-file", str(sched_file)], root / "scheduler.log")
    workers = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not sched_file.exists():
            if time.monotonic() > deadline or not sched.alive():
                raise RuntimeError(f"dask scheduler did not start\n{sched.tail()}")
            time.sleep(0.1)
        for i in range(WORKERS):
            workers.append(proc(f"dask worker {i}", [
                PY, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sched_file), "--nworkers", "1",
                "--nthreads", str(THREADS_PER_WORKER if per_cell else SLOTS_PER_WORKER), "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                "--name", f"w{i}"], root / f"worker-{i}.log"))
        with Client(scheduler_file=str(sched_file), timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(WORKERS, timeout=START_TIMEOUT_S)

            def run_once() -> list[dict]:
                if not per_cell:
                    return _flat(client.gather(client.map(group, range(groups), pure=False)))
                gs = [g for g in range(groups) for _ in range(SUBJECTS)]
                ss = [s for _ in range(groups) for s in range(SUBJECTS)]
                futures = client.map(cell, gs, ss, pure=False)
                return client.gather(futures)

            return _measure(name, groups, number, lambda: [sched.pid], lambda: [w.pid for w in workers], run_once, say)
    finally:
        for w in workers:
            w.stop(30)
        sched.stop(30)


def bench_celery(groups: int, number: int, root: Path, proc: Callable[..., Any], say: Callable[[str], None], *,
                 durable: bool = True) -> dict | None:
    """One W1 run, as bench_dask, one task per group (peer_tasks.group on 2 threads per worker).
    `durable`: Redis's append-only file with appendfsync always and late acks; else the defaults
    of both (the `celery-defaults` row)."""
    name = "celery" if durable else "celery-defaults"
    redis_server = shutil.which("redis-server")
    if importlib.util.find_spec("celery") is None or importlib.util.find_spec("redis") is None or not redis_server:
        say("  celery: skipped (pip install -e '.[bench]' and apt-get install redis-server)")
        return None
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    os.environ["FLEET_BENCH_REDIS_URL"] = url  # read by peer_tasks in this process and the workers
    os.environ["FLEET_BENCH_CELERY_DEFAULTS"] = "0" if durable else "1"
    persistence = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""] if durable else []
    redis = proc("redis-server", [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(root),
                                  *persistence, "--protected-mode", "no", "--daemonize", "no"], root / "redis.log")
    workers = []
    try:
        import redis as redis_client

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                redis_client.Redis.from_url(url).ping()
                break
            except redis_client.ConnectionError:
                if time.monotonic() > deadline or not redis.alive():
                    raise RuntimeError(f"redis-server did not start\n{redis.tail()}") from None
                time.sleep(0.1)
        import tools.bench.data.peer_tasks as peer_tasks

        # An app configured from the URL and mode set above; the same task function each time,
        # so a second app (celery-defaults after celery) registers no conflicting callable.
        app = peer_tasks._celery_app()
        for i in range(WORKERS):
            workers.append(proc(f"celery worker {i}", [
                PY, "-m", "celery", "-A", "tools.bench.data.peer_tasks", "worker", "--pool", "threads",
                "--concurrency", str(SLOTS_PER_WORKER), "--loglevel", "WARNING", "--without-gossip",
                "--without-mingle", "--without-heartbeat", "-n", f"w{i}@bench"], root / f"worker-{i}.log"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(app.control.ping(timeout=1.0) or []) < WORKERS:
            if time.monotonic() > deadline:
                raise RuntimeError("celery workers did not answer a ping\n" + "\n".join(w.tail() for w in workers))
        from celery import group as celery_group

        def run_once() -> list[dict]:
            job = celery_group(app.signature("w1.group", (g,)) for g in range(groups))
            return _flat(job.apply_async().get(timeout=RUN_TIMEOUT_S))

        return _measure(name, groups, number, lambda: [redis.pid], lambda: [w.pid for w in workers], run_once, say)
    finally:
        for w in workers:
            w.stop(30)
        redis.stop(30)
        os.environ.pop("FLEET_BENCH_REDIS_URL", None)
        os.environ.pop("FLEET_BENCH_CELERY_DEFAULTS", None)
