"""The coordinator's Prometheus endpoint, scraped over loopback during and after a real run:
the conventional names exist and the counters agree with the run's results."""
from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

from tests.integration.harness import Cluster, intbench_spec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_follow_a_run(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    port = free_port()
    try:
        cluster.start_coordinator("--metrics-listen", f"127.0.0.1:{port}")
        cluster.start_worker("w1", slots=2)
        run_id = cluster.submit(intbench_spec(8, ("good", "bad"), cap=2))
        results = cluster.wait_settled(run_id, 60)
        deadline = time.monotonic() + 15
        while True:
            m = scrape(port)
            if m.get(f'fleet_cells{{run="{run_id}",state="selected"}}') == 16 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        cluster.stop_all()
    assert results["summary"]["selected"] == 16
    assert m["fleet_cells_selected_total"] == 16
    assert m[f'fleet_cells{{run="{run_id}",state="selected"}}'] == 16
    assert m[f'fleet_groups{{run="{run_id}",state="settled"}}'] == 8
    assert m["fleet_connected_workers"] == 1
    assert m['fleet_slots{state="free"}'] == 2
    assert m["fleet_commit_batch_records_count"] > 0
    assert m["fleet_commit_latency_seconds_count"] == m["fleet_commit_batch_records_count"]
    assert m["fleet_slot_refill_seconds_count"] >= 6  # 8 groups on 2 slots: at least 6 refills
    assert m["fleet_artifact_bytes_stored_total"] > 0
    assert any(k.startswith("fleet_workers{") for k in m)


def test_the_worker_serves_its_own_metrics(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    port = free_port()
    try:
        cluster.start_coordinator()
        cluster.start_worker("w1", slots=2, extra=("--metrics-listen", f"127.0.0.1:{port}"))
        run_id = cluster.submit(intbench_spec(4, ("good",), cap=2))
        cluster.wait_settled(run_id, 60)
        deadline = time.monotonic() + 10
        while True:
            try:
                m = scrape(port)
                if m.get("fleet_worker_outbox_depth") == 0 and m.get("fleet_worker_held_groups") == 0:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.2)
    finally:
        cluster.stop_all()
    assert m["fleet_worker_running_cells"] == 0
    assert m["fleet_worker_streams_opened_total"] >= 1
    assert m["fleet_worker_incarnation"] == 1
