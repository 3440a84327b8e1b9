"""W1's cell for the peer systems of tools/bench/peers.py: the same no-op subject and verifier
as fleet's python executor runs (tools/bench/data/noopbench), called in a worker of Dask or of
Celery: one task per group (`group`, the faithful shape) or one task per cell (`cell`). The
Celery app is configured from FLEET_BENCH_REDIS_URL, with late acks (a task is acknowledged
only after it ran) and results stored in the same Redis; with FLEET_BENCH_CELERY_DEFAULTS=1,
Celery's own defaults instead (acked on receipt, prefetch 4)."""
from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "noopbench"))

from noopbench import accept, noop  # noqa: E402


def cell(group: int, subject: int) -> dict:
    """One cell: the subject, then the verifier on its result; what a result store keeps."""
    result = noop(None)
    return {"group": group, "subject": subject, "score": float(accept(None, result)), "usage": result["usage"]}


_CELLS = ThreadPoolExecutor(max_workers=6, thread_name_prefix="cell")  # 2 group slots x 3 cells per process


def group(group: int, subjects: int = 3) -> list[dict]:
    """One group, as fleet runs it and as a user of Dask or Celery would write it (the seeds: a
    group is the unit of capacity and its subjects start together): one task whose cells start
    at once on the process's cell threads, its result the list of the cells' results."""
    futures = [_CELLS.submit(cell, group, s) for s in range(subjects)]
    return [f.result() for f in futures]


def _celery_app():  # noqa: ANN202 - only when Celery is asked for
    from celery import Celery

    url = os.environ.get("FLEET_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    app = Celery("fleet_bench_w1", broker=url, backend=url)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                    worker_hijack_root_logger=False, broker_connection_retry_on_startup=True, result_expires=3600)
    if os.environ.get("FLEET_BENCH_CELERY_DEFAULTS") != "1":
        app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1)
    app.task(name="w1.cell")(cell)
    app.task(name="w1.group")(group)
    return app


app = _celery_app() if os.environ.get("FLEET_BENCH_REDIS_URL") else None
