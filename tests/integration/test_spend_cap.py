"""A run's spend is capped (issue 22): real processes on 127.0.0.1. The intbench subject
reports $0.001 a cell; with `maxObservedCostUsd` at $0.006 the run pauses once its known
observed cost reaches the cap (running groups settle, so it may pass it by what they spend),
`fleetctl status` names the reason, `fleetctl recover RUN` without a higher cap is refused,
and `fleetctl recover RUN --max-cost 1` resumes it to completion."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.integration.harness import FAST_POLICY, PY, REPO, Cluster, intbench_spec

GROUPS = 20
CAP = 0.006


def fleetctl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", cluster.address, "--token-file",
                           str(cluster.data_dir / "admin.token"), *args], cwd=REPO, env=cluster.env(),
                          capture_output=True, text=True, timeout=60)


def test_the_spend_cap_pauses_the_run_and_recover_with_a_higher_cap_finishes_it(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_coordinator()
        cluster.start_worker("w1", slots=2)
        run_id = cluster.submit(intbench_spec(GROUPS, subjects=("medium",)), dict(FAST_POLICY, maxObservedCostUsd=CAP))
        deadline = time.monotonic() + 60
        while True:
            [run] = [r for r in cluster.status()["runs"] if r["run_id"] == run_id]
            if run["pause_reason"]:
                break
            assert time.monotonic() < deadline, cluster.tails()
            time.sleep(0.1)
        assert run["pause_reason"].startswith("spend cap reached"), run
        time.sleep(1.0)  # running groups settle; nothing new starts
        paused = cluster.results(run_id)
        assert paused["summary"]["state"] not in ("complete",), paused["summary"]
        selected = paused["summary"]["selected"]
        assert 6 <= selected <= 8, f"{selected} selected: the cap stops the run at $0.006 (+ what was running)"
        time.sleep(0.5)
        assert cluster.results(run_id)["summary"]["selected"] == selected, "a paused run starts nothing"
        text = fleetctl(cluster, "status").stdout
        assert "spend cap reached" in text and "--max-cost" in text, text
        refused = fleetctl(cluster, "recover", run_id)
        assert refused.returncode != 0 and "SPEND_CAP_REACHED" in refused.stderr, refused.stderr
        ok = fleetctl(cluster, "recover", run_id, "--max-cost", "1")
        assert ok.returncode == 0, ok.stderr
        final = cluster.wait_settled(run_id, timeout_s=120)
        assert final["summary"]["state"] == "complete" and final["summary"]["selected"] == GROUPS
    finally:
        cluster.stop_all()
