"""A restore from a backup loses nothing the fleet still holds (issue 23): real processes on
127.0.0.1. A backup is taken mid-run, the coordinator runs on and is killed with -9 well after
it; a coordinator started on the backup, at the same address, finds the workers that kept
going, each with its own state dir and id. They offer again what the backup lacks (the reports
the killed coordinator had acknowledged), the restored coordinator adopts them, and, counted
from the subjects' own side, no cell acknowledged before the kill executes again; the run
completes with every cell selected once and nothing issued twice. The second test also
restarts every worker, on its old id and state dir, after the kill."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.integration.harness import FAST_POLICY, PY, REPO, Cluster, intbench_spec

GROUPS = 40
BACKUP_AT = 6
KILL_AT = 24


def executions(log: Path) -> dict[str, list[str]]:
    """cell id -> the attempt ids a subject started executing it under."""
    out: dict[str, list[str]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "start":
            out.setdefault(parts[1], []).append(parts[2])
    return out


def selected(results: dict) -> dict[str, dict]:
    return {c["cell_id"]: c for c in results["cells"] if c["state"] == "selected"}


def wait_selected(cluster: Cluster, run_id: str, n: int, timeout_s: float = 90) -> dict[str, dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        now = selected(cluster.results(run_id))
        if len(now) >= n:
            return now
        assert time.monotonic() < deadline, cluster.tails()
        time.sleep(0.05)


def restore_mid_run(tmp_path: Path, *, restart_workers: bool) -> None:
    log = tmp_path / "executions.log"
    spec = intbench_spec(GROUPS, subjects=("medium",))
    spec["subjects"][0]["args"].append(str(log))
    live = Cluster(tmp_path / "live")
    backup = tmp_path / "restored" / "coordinator"
    backup.parent.mkdir()
    restored = Cluster(tmp_path / "restored")
    try:
        live.start_coordinator()
        for w in ("w1", "w2"):
            live.start_worker(w, slots=2)
        run_id = live.submit(spec, FAST_POLICY)
        wait_selected(live, run_id, BACKUP_AT)
        out = subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", live.address, "--token-file",
                              str(live.data_dir / "admin.token"), "backup", str(backup)], cwd=REPO, env=live.env(),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr + live.tails()
        in_backup = json.loads((backup / "BACKUP.json").read_text())
        assert in_backup["backup_id"]
        acknowledged = wait_selected(live, run_id, KILL_AT)  # each was acknowledged to its worker
        live.coordinator.kill9()
        assert len(acknowledged) < GROUPS, "the kill must come mid-run"
        if restart_workers:
            for p in live.workers.values():
                p.kill9()
        executed_at_kill = executions(log)

        restored.address = live.address  # the same address: the workers' flag names it
        restored.start_coordinator()
        if restart_workers:
            for w in ("w1", "w2"):  # their old ids and state dirs (the live cluster's)
                restored.workers[w] = live.start_worker(w, slots=2, address=restored.address)
        final = restored.wait_settled(run_id, timeout_s=120)
        assert final["summary"]["state"] == "complete", restored.tails() + live.tails()
        assert final["summary"]["selected"] == GROUPS
        cells = [c["cell_id"] for c in final["cells"]]
        assert len(cells) == len(set(cells)) == GROUPS
        executed = executions(log)
        again = {c: executed[c] for c in acknowledged if executed.get(c) != executed_at_kill.get(c)}
        assert again == {}, f"cells acknowledged before the kill were executed again: {again}"
        for cell_id, cell in acknowledged.items():
            assert selected(final)[cell_id]["attempt_id"] == cell["attempt_id"], "the kept result is the one adopted"
        recovered = [c["cell_id"] for c in final["cells"] if c["recovered_after_restore"]]
        assert recovered and final["summary"]["recovered_after_restore"] == len(recovered), "provenance shown"
        attempts = [a for runs in executed.values() for a in runs]
        assert len(attempts) == len(set(attempts)), "an attempt id was issued twice"
        coordinator_log = restored.coordinator.log_path.read_text()
        assert '"coordinator_restored"' in coordinator_log
        assert any(p.log_path.read_text().count("offering again") for p in live.workers.values())
    finally:
        restored.stop_all()
        live.stop_all()


def test_a_restore_with_the_workers_running_on_executes_nothing_they_had_reported(tmp_path: Path) -> None:
    restore_mid_run(tmp_path, restart_workers=False)


def test_a_restore_with_the_workers_restarted_on_their_state_dirs_executes_nothing_again(tmp_path: Path) -> None:
    restore_mid_run(tmp_path, restart_workers=True)
