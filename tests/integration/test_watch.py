"""`fleetctl watch` against a real coordinator: it says when it is live, then shows every
event of a run once, in order (WatchEvents, several events to a message), and the old
one-event-per-message Watch gives the same events."""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import grpc

from common.fleetpb import admin_pb2, admin_pb2_grpc
from tests.integration.harness import PY, REPO, Cluster, intbench_spec

GROUPS = 12


def test_fleetctl_watch_shows_every_cell_of_a_run_once_after_saying_it_is_live(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    watch = None
    try:
        cluster.start_coordinator()
        argv = [PY, "-m", "tools.fleetctl", "--coordinator", cluster.address,
                "--token-file", str(cluster.data_dir / "admin.token"), "watch"]
        watch = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cluster.env(), cwd=REPO)
        lines: list[dict] = []
        reader = threading.Thread(target=lambda: lines.extend(json.loads(raw) for raw in watch.stdout), daemon=True)
        reader.start()
        # The raw Watch stream too, as an older fleetctl reads it.
        channel = grpc.insecure_channel(cluster.address)
        md = (("authorization", f"Bearer {(cluster.data_dir / 'admin.token').read_text().strip()}"),)
        old = admin_pb2_grpc.AdminStub(channel).Watch(admin_pb2.WatchRequest(), metadata=md)
        old_events: list[admin_pb2.Event] = []
        first = next(old)
        assert first.event == "watch_started"

        def read_old() -> None:
            try:
                old_events.extend(old)
            except grpc.RpcError:  # cancelled at the end
                pass

        threading.Thread(target=read_old, daemon=True).start()
        deadline = time.monotonic() + 30
        while not lines:
            assert time.monotonic() < deadline and watch.poll() is None, watch.stderr.read().decode()
            time.sleep(0.05)
        assert lines[0]["event"] == "watch_started" and lines[0]["detail"] == "watching every run"

        cluster.start_worker("w1", slots=3)
        run_id = cluster.submit(intbench_spec(GROUPS, ("good", "bad")))
        cluster.wait_settled(run_id, 90)
        deadline = time.monotonic() + 20
        while not any(ln["event"] == "run_settled" for ln in lines):
            assert time.monotonic() < deadline, (lines[-5:], cluster.tails())
            time.sleep(0.05)
        selected = [ln["subject"] for ln in lines if ln["event"] == "cell_selected" and ln["run_id"] == run_id]
        assert len(selected) == len(set(selected)) == 2 * GROUPS, selected
        names = [ln["event"] for ln in lines]
        assert names.index("run_submitted") < names.index("cell_selected") < names.index("run_settled")
        stamps = [ln["at_ms"] for ln in lines[1:]]  # the coordinator's clock, in the order applied
        assert stamps == sorted(stamps)
        old.cancel()
        channel.close()
        assert [e.subject for e in old_events if e.event == "cell_selected"] == selected
    finally:
        if watch is not None:
            watch.kill()
            watch.wait(10)
        cluster.stop_all()
