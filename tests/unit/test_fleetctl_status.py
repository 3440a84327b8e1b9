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


def test_the_coordinators_summary_is_printed_when_it_sent_no_list():
    """`fleetctl status` asks for WORKERS_VIEW_SUMMARY: the answer holds counts, the slowest
    and the refused, not 10,000 rows; printed like the summary of a full list."""
    resp = admin_pb2.GetStatusResponse()
    s = resp.worker_summary
    s.total, s.slots, s.busy_slots, s.refused_total = 10_000, 40_000, 100, 9_900
    s.counts.add(state="active", count=9_990)
    s.counts.add(state="suspected", count=10)
    s.slowest.add(worker_id="w00042", status="suspected", slots=4, last_heartbeat_age_ms=4_000)
    for i in range(5):
        s.refused.add(worker_id=f"r{i}", status="active", slots=4, refused_run_id="run-a",
                      refused_reason="environment differs", refused_age_ms=1_000)
    data = fleetctl.status_json(resp)
    assert data["workers"] == [] and data["worker_summary"]["refused_total"] == 9_900
    text = printed(data, False)
    assert "10000 workers: 9990 active, 10 suspected; 100/40000 slots busy" in text
    assert "w00042" in text.split("slowest to be heard from:")[1]
    assert "9900 workers refused by a run (the first 5):" in text and "worker r4 refused by run run-a" in text
    assert len(text.splitlines()) < 30


def test_an_expired_worker_is_counted_but_never_the_slowest():
    data = status(30)
    data["workers"][3]["status"], data["workers"][3]["last_heartbeat_age_ms"] = "expired", 10**9
    text = printed(data, False)
    assert "1 expired" in text and "w00003" not in text.split("slowest to be heard from:")[1]
