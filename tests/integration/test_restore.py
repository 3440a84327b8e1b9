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


def rerun(log: Path, acknowledged: dict[str, dict]) -> dict[str, str]:
    """cell id -> its latest execution's attempt, for the cells of `acknowledged` executed again."""
    return {c: a[-1] for c, a in executions(log).items() if c in acknowledged and a[-1] != acknowledged[c]["attempt_id"]}


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


def two_clusters(tmp_path: Path, groups: int, subject: str) -> tuple[Path, dict, Cluster, Path, Cluster]:
    """The executions log, a spec of `groups` groups of `subject` that writes to it, the live
    cluster, where its backup goes, and the cluster restored from it (not started)."""
    log = tmp_path / "executions.log"
    spec = intbench_spec(groups, subjects=(subject,))
    spec["subjects"][0]["args"].append(str(log))
    backup = tmp_path / "restored" / "coordinator"
    backup.parent.mkdir()
    return log, spec, Cluster(tmp_path / "live"), backup, Cluster(tmp_path / "restored")


def submit_and_back_up(live: Cluster, spec: dict, selected_first: int, backup: Path) -> str:
    """Submit `spec`, and once `selected_first` cells are selected, back the coordinator up."""
    run_id = live.submit(spec, FAST_POLICY)
    wait_selected(live, run_id, selected_first)
    out = subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", live.address, "--token-file",
                          str(live.data_dir / "admin.token"), "backup", str(backup)], cwd=REPO, env=live.env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + live.tails()
    return run_id


def restore_mid_run(tmp_path: Path, *, restart_workers: bool) -> None:
    log, spec, live, backup, restored = two_clusters(tmp_path, GROUPS, "medium")
    try:
        live.start_coordinator()
        for w in ("w1", "w2"):
            live.start_worker(w, slots=2)
        run_id = submit_and_back_up(live, spec, BACKUP_AT, backup)
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


def test_a_group_run_again_before_its_kept_results_were_offered_is_stopped_by_them(tmp_path: Path) -> None:
    """The worker that kept the lost results comes back only after the restore's hold: another
    worker is already running those groups again. Their offers answer every cell it runs, so the
    coordinator revokes those groups and the worker kills their processes: none of those second
    executions finishes (the subject holds each one until the test lets go, and a revoke is the
    only thing that ends one early)."""
    groups, backup_at, kill_at = 10, 1, 6
    log, spec, live, backup, restored = two_clusters(tmp_path, groups, "held")
    hold = Path(f"{log}.hold")
    try:
        live.start_coordinator()
        live.start_worker("w1", slots=1)
        run_id = submit_and_back_up(live, spec, backup_at, backup)
        acknowledged = wait_selected(live, run_id, kill_at)
        live.coordinator.kill9()
        live.workers["w1"].kill9()  # away until the hold is over; its state dir keeps what it reported
        assert len(acknowledged) < groups, "the kill must come mid-run"
        hold.write_text("")  # from now on every execution waits until the test lets go

        restored.address = live.address
        restored.start_coordinator()
        restored.start_worker("w2", slots=groups)
        deadline = time.monotonic() + 60
        while not (lost := rerun(log, acknowledged)):
            assert time.monotonic() < deadline, "w2 never ran a lost result's cell again\n" + restored.tails()
            time.sleep(0.1)
        time.sleep(0.5)  # every group the hold's end dispatched has started
        lost = rerun(log, acknowledged)

        restored.workers["w1"] = live.start_worker("w1", slots=1, address=restored.address)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = selected(restored.results(run_id))
            if all(now.get(c, {}).get("attempt_id") == acknowledged[c]["attempt_id"] for c in lost):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("w1's offers were not adopted\n" + restored.tails())
        time.sleep(1.0)  # the revokes reach w2, which kills those executions
        hold.unlink()  # the rest go on and finish

        final = restored.wait_settled(run_id, timeout_s=120)
        assert final["summary"]["state"] == "complete", restored.tails() + live.tails()
        assert final["summary"]["selected"] == groups
        done = {line.split()[2] for line in log.read_text().splitlines() if line.startswith("done ")}
        finished = {c: a for c, a in lost.items() if a in done}
        assert finished == {}, f"executions of cells the offers answered ran to the end: {finished}"
        for c in lost:
            assert selected(final)[c]["attempt_id"] == acknowledged[c]["attempt_id"], "the kept result is selected"
        coordinator_log = restored.coordinator.log_path.read_text()
        assert "every cell it still runs has a result offered after a restore" in coordinator_log
    finally:
        restored.stop_all()
        live.stop_all()
