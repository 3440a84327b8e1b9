"""`fleetctl backup DEST` while a run is going: real coordinator and worker processes on
127.0.0.1, nothing killed. The live run keeps going to completion; a fresh coordinator started
on the backup alone has every result acknowledged before the backup began (same attempts,
scores and artifacts, re-hashed), finishes the run with new workers, and selects nothing twice
(no cell selected before the backup is executed again)."""
from __future__ import annotations

import hashlib
import json
import re
import stat
import subprocess
import time
from pathlib import Path

from common.fleetpb import admin_pb2
from tests.integration.harness import PY, REPO, Cluster, intbench_spec

GROUPS = 40


def executions(log: Path) -> dict[str, int]:
    """cell id -> how many times a subject started executing it."""
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if parts[0] == "start":
            counts[parts[1]] = counts.get(parts[1], 0) + 1
    return counts


def selected(results: dict) -> dict[str, dict]:
    return {c["cell_id"]: c for c in results["cells"] if c["state"] == "selected"}


def fetch_artifact(cluster: Cluster, digest: str) -> bytes:
    admin = cluster.admin()
    try:
        return b"".join(chunk.data for chunk in admin.call("GetArtifact", admin_pb2.GetArtifactRequest(digest=digest),
                                                           timeout=30))
    finally:
        admin.close()


def test_a_backup_mid_run_restores_to_a_coordinator_that_finishes_the_run(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    spec = intbench_spec(GROUPS, subjects=("medium",))
    spec["subjects"][0]["args"].append(str(log))
    live = Cluster(tmp_path / "live")
    (tmp_path / "restored").mkdir()
    dest = tmp_path / "restored" / "coordinator"  # the restored cluster's data dir
    try:
        live.start_coordinator()
        for w in ("w1", "w2"):
            live.start_worker(w, slots=2)
        run_id = live.submit(spec)
        deadline = time.monotonic() + 60
        while len(selected(live.results(run_id))) < 8:
            assert time.monotonic() < deadline, live.tails()
            time.sleep(0.1)
        before = selected(live.results(run_id))  # acknowledged before the backup began
        assert len(before) < GROUPS, "the backup must be taken mid-run"
        token = live.data_dir / "admin.token"
        out = subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", live.address, "--token-file", str(token),
                              "backup", str(dest)], cwd=REPO, env=live.env(), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr + live.tails()
        assert f"backup in {dest}" in out.stdout and "restore: fleet-coordinator --data-dir" in out.stdout
        # Nothing was stopped: the live run goes on to the end.
        assert live.coordinator.alive() and all(p.alive() for p in live.workers.values())
        finished = live.wait_settled(run_id, timeout_s=120)
        assert finished["summary"]["state"] == "complete"
        again = subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", live.address, "--token-file",
                                str(token), "backup", str(dest)], cwd=REPO, env=live.env(), capture_output=True,
                               text=True, timeout=60)
        assert again.returncode == 1 and "exists" in again.stderr, "a backup never overwrites"
    finally:
        live.stop_all()
    manifest = json.loads((dest / "BACKUP.json").read_text())
    assert manifest["runs"] == 1 and manifest["last_index"] > 0 and manifest["format"] == "fleet-backup-1"
    assert stat.S_IMODE((dest / "admin.token").stat().st_mode) == 0o600
    assert not (dest / "LOCK").exists() and not list(tmp_path.glob("restored/.*partial*"))
    executed_before_restore = executions(log)

    restored = Cluster(tmp_path / "restored")
    try:
        restored.start_coordinator()
        now = selected(restored.results(run_id))
        for cell_id, cell in before.items():
            got = now.get(cell_id)
            assert got is not None, f"{cell_id} was acknowledged before the backup and is missing"
            assert (got["attempt_id"], got["score"], got["worker_id"]) == \
                   (cell["attempt_id"], cell["score"], cell["worker_id"])
            assert got["artifacts"] == cell["artifacts"]
            for a in cell["artifacts"]:
                data = fetch_artifact(restored, a["digest"])  # the coordinator re-hashes on read
                assert "sha256:" + hashlib.sha256(data).hexdigest() == a["digest"] and len(data) == a["size_bytes"]
        digests = {a["digest"] for c in before.values() for a in c["artifacts"]}  # content-addressed: shared
        assert manifest["artifacts"] >= len(digests) > 0
        for w in ("n1", "n2"):  # new workers: the backup's coordinator has never seen them
            restored.start_worker(w, slots=2)
        final = restored.wait_settled(run_id, timeout_s=120)
        assert final["summary"]["state"] == "complete", restored.tails()
        cells = [c["cell_id"] for c in final["cells"]]
        assert len(cells) == len(set(cells)) == GROUPS and final["summary"]["selected"] == GROUPS
        for cell_id, cell in before.items():
            assert selected(final)[cell_id]["attempt_id"] == cell["attempt_id"], "selected once, never replaced"
    finally:
        restored.stop_all()
    executed = executions(log)
    again_run = [c for c in before if executed.get(c, 0) != executed_before_restore.get(c, 0)]
    assert again_run == [], f"cells selected before the backup were executed again: {again_run}"


# ---- `fleetctl backup --into ROOT --keep N` ------------------------------------------------------

def fleetctl_backup(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    token = cluster.data_dir / "admin.token"
    return subprocess.run([PY, "-m", "tools.fleetctl", "--coordinator", cluster.address or "127.0.0.1:1",
                           "--token-file", str(token), "backup", *args], cwd=REPO, env=cluster.env(),
                          capture_output=True, text=True, timeout=120)


def test_backups_into_a_root_keep_the_newest_and_never_touch_anything_else(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "fleet")
    root = tmp_path / "backups"
    root.mkdir()
    # Foreign entries under ROOT, each of a kind the pruning must leave alone; the time-named ones
    # sort before anything written now, so a pruning that looked only at names would take them.
    (root / "notes").mkdir()
    (root / "notes" / "README").write_text("the operator's\n")
    (root / "20200101T000000Z").mkdir()  # a backup's name, no manifest
    (root / "20200101T000001Z").mkdir()
    (root / "20200101T000001Z" / "BACKUP.json").write_text('{"format": "something-else"}\n')
    (root / "20200101T000002Z").write_text("a file\n")
    (root / ".20200101T000003Z.partial-1").mkdir()  # a crashed backup's leftover, manifest and all
    (root / ".20200101T000003Z.partial-1" / "BACKUP.json").write_text('{"format": "fleet-backup-1"}\n')
    foreign = sorted(p.name for p in root.iterdir())
    try:
        cluster.start_coordinator()
        cluster.submit(intbench_spec(2, ("good",)))
        elsewhere = tmp_path / "elsewhere"
        assert fleetctl_backup(cluster, str(elsewhere)).returncode == 0, "backup DEST works as before"
        (root / "20200101T000004Z").symlink_to(elsewhere)  # a whole backup, but through a symlink
        manual = fleetctl_backup(cluster, str(root / "by-hand"))  # a whole backup not named by --into
        assert manual.returncode == 0, manual.stderr + cluster.tails()
        foreign = sorted([*foreign, "20200101T000004Z", "by-hand"])
        written = []
        for i in range(3):
            out = fleetctl_backup(cluster, "--into", str(root), "--keep", "2")
            assert out.returncode == 0, out.stderr + cluster.tails()
            m = re.search(rf"^backup in ({re.escape(str(root))}/\S+): ", out.stdout, re.M)
            assert m, out.stdout
            written.append(Path(m.group(1)).name)
            assert re.fullmatch(r"\d{8}T\d{6}Z(-\d+)?", written[-1]), written
            kept = min(i + 1, 2)
            assert f"{kept} backup{'' if kept == 1 else 's'} kept under {root} (--keep 2)" in out.stdout, out.stdout
        assert len(set(written)) == 3, f"each backup in a new directory: {written}"
        assert f"pruned {root / written[0]}" in out.stdout and out.stdout.count("pruned ") == 1, out.stdout
        assert sorted(p.name for p in root.iterdir()) == sorted([*foreign, *written[1:]])
        assert (elsewhere / "BACKUP.json").is_file(), "a symlink's target is not pruned"
        assert (root / "notes" / "README").read_text() == "the operator's\n"
        manifest = json.loads((root / written[2] / "BACKUP.json").read_text())
        assert manifest["runs"] == 1 and manifest["dest_dir"] == str(root / written[2])

        # Command lines it cannot act on: exit 2, before any backup, and ROOT unchanged.
        before = sorted(p.name for p in root.iterdir())
        for bad in (["--into", str(root), "--keep", "0"], ["--into", str(root), "--keep", "-1"],
                    ["--into", str(root), "--keep", "two"], ["--into", str(root)], ["--keep", "2"],
                    [str(tmp_path / "new"), "--into", str(root), "--keep", "2"], [],
                    ["--into", str(tmp_path / "missing"), "--keep", "2"]):
            out = fleetctl_backup(cluster, *bad)
            assert out.returncode == 2 and out.stderr.strip() and "Traceback" not in out.stderr, (bad, out.stderr)
        assert sorted(p.name for p in root.iterdir()) == before and not (tmp_path / "new").exists()
    finally:
        cluster.stop_all()
    # A failed backup (no coordinator) prunes nothing, even with --keep 1.
    out = fleetctl_backup(cluster, "--into", str(root), "--keep", "1")
    assert out.returncode == 1 and "unreachable" in out.stderr, out.stderr
    assert sorted(p.name for p in root.iterdir()) == before
