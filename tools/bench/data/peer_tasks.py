"""W1's cell for the peer systems of tools/bench/peers.py: the same no-op subject and verifier
as fleet's python executor runs (tools/bench/data/noopbench), called in a worker of Dask or of
Celery. The Celery app is configured from FLEET_BENCH_REDIS_URL, with late acks (a task is
acknowledged only after it ran) and results stored in the same Redis; with
FLEET_BENCH_CELERY_DEFAULTS=1, Celery's own defaults instead (acked on receipt, prefetch 4)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "noopbench"))

from noopbench import accept, noop  # noqa: E402


def cell(group: int, subject: int) -> dict:
    """One cell: the subject, then the verifier on its result; what a result store keeps."""
    result = noop(None)
    return {"group": group, "subject": subject, "score": float(accept(None, result)), "usage": result["usage"]}


def _celery_app():  # noqa: ANN202 - only when Celery is asked for
    from celery import Celery

    url = os.environ.get("FLEET_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    app = Celery("fleet_bench_w1", broker=url, backend=url)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                    worker_hijack_root_logger=False, broker_connection_retry_on_startup=True, result_expires=3600)
    if os.environ.get("FLEET_BENCH_CELERY_DEFAULTS") != "1":
        app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1)
    app.task(name="w1.cell")(cell)
    return app


app = _celery_app() if os.environ.get("FLEET_BENCH_REDIS_URL") else None
