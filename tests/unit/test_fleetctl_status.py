"""`fleetctl status` on a large fleet: past WORKERS_LISTED_MAX workers it prints counts by
state, the slowest and the refused instead of a line per worker, and `--workers` lists every
one; method: GetStatus answers built as protos, printed through the real formatter."""
from __future__ import annotations

import contextlib
import io

from common.fleetpb import admin_pb2
from tools.fleetctl import views as fleetctl


def status(workers: int) -> dict:
    resp = admin_pb2.GetStatusResponse()
    for i in range(workers):
        w = admin_pb2.WorkerStatus(worker_id=f"w{i:05d}", status="suspect" if i % 100 == 0 else "active",
                                   slots=4, busy_slots=i % 5, last_heartbeat_age_ms=i, environment_id="env")
        if i % 1000 == 7:
            w.refused_run_id, w.refused_reason, w.refused_age_ms = "run-a", "environment differs", 5_000
        resp.workers.append(w)
    return fleetctl.status_json(resp)


def printed(data: dict, list_workers: bool) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fleetctl.print_status(data, list_workers)
    return out.getvalue()


def test_ten_thousand_workers_are_summarised_unless_listed():
    data = status(10_000)
    text = printed(data, False)
    assert "10000 workers: 9900 active, 100 suspect" in text
    assert "w09999" in text.split("slowest to be heard from:")[1], "the slowest is named"
    assert "10 workers refused by a run (the first 5):" in text
    assert len(text.splitlines()) < 60
    assert len(printed(data, True).splitlines()) > 10_000


def test_a_small_fleet_is_listed_as_before():
    text = printed(status(fleetctl.WORKERS_LISTED_MAX), False)
    assert "workers:" not in text and "w00019" in text
