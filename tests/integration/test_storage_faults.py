"""Goal: a coordinator whose storage is taken, corrupt, full or failing stops with a clear line
and a distinct non-zero exit, never serves on unverified state, and restarts with everything it
acknowledged; method: real coordinator processes on one data dir, a second owner, bytes of a log
record altered with the `lmdb` module while it is down, a 1 MiB map ceiling filled by
submissions, and a failing `Store.append` injected into the child by a generated sitecustomize."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import lmdb
import pytest

from common.fleetpb import common_pb2
from coordinator.store import DB_LOG, DB_META, DB_SNAP, FRAME_HEADER, WAL_DIR_NAME, frame, index_key, \
    key_index
from tests.integration import rawclient as rc
from tests.integration.harness import PY, REPO, Cluster, intbench_spec

pytestmark = [pytest.mark.crash, pytest.mark.timeout(60)]

# Liveness far beyond a test's length: no suspicion or expiry adds log records of its own.
SLOW_POLICY = {"heartbeatIntervalMs": 1_000, "suspectAfterMs": 60_000, "expireAfterMs": 120_000,
               "recoveryGraceMs": 120_000}
EXIT_WAIT_S = 20
EX_TEMPFAIL, EX_SOFTWARE, EX_CANTCREAT, EX_IOERR = 75, 70, 73, 74
# The test opens the coordinator's environment itself; the map must cover the file.
TEST_MAP_BYTES = 1 << 30


@pytest.fixture
def cluster(tmp_path: Path):
    cl = Cluster(tmp_path)
    try:
        yield cl
    finally:
        cl.stop_all()


def wait_exit(cl: Cluster) -> int:
    try:
        return cl.coordinator.popen.wait(EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the coordinator did not exit within {EXIT_WAIT_S}s\n{cl.tails()}") from None


def log_text(cl: Cluster) -> str:
    return cl.coordinator.log_path.read_text(errors="replace")


def fail_stop_lines(cl: Cluster) -> list[str]:
    return [line for line in log_text(cl).splitlines() if line.startswith("fleet-coordinator: fail-stop:")]


def files_under(root: Path) -> dict[str, int]:
    """Relative path -> inode of every file under `root`."""
    return {str(p.relative_to(root)): p.stat().st_ino for p in root.rglob("*") if p.is_file()}


def runs(cl: Cluster) -> list[dict]:
    return sorted(cl.status()["runs"], key=lambda r: r["run_id"])


def submit_distinct(cl: Cluster, n: int, *, groups: int = 2, pad_bytes: int = 0) -> str:
    """Submit the n-th of a family of distinct specs (task inputs padded to `pad_bytes`)."""
    spec = intbench_spec(groups)
    spec["benchmark"]["version"] = f"v{n}"
    if pad_bytes:
        for t in spec["tasks"]:
            t["input"] = t["input"] + "." + "p" * pad_bytes
    return cl.submit(spec, SLOW_POLICY)


# ---- (a) the data directory has one owner ------------------------------------------------------

def test_second_coordinator_is_refused_naming_the_owner_and_kill9_releases_the_lock(cluster):
    owner = cluster.start_coordinator()
    run_id = submit_distinct(cluster, 1)
    before_results = cluster.results(run_id)
    data = cluster.data_dir
    files_before = files_under(data)
    lock_before = (data / "LOCK").read_text().strip()
    assert lock_before == str(owner.pid)

    second = subprocess.run([PY, "-m", "coordinator.main", "--data-dir", str(data), "--listen", "127.0.0.1:0"],
                            capture_output=True, text=True, timeout=30, env=cluster.env(), cwd=REPO)
    assert second.returncode == EX_TEMPFAIL, (second.returncode, second.stderr)
    assert f"locked by pid {owner.pid}" in second.stderr, second.stderr
    assert "never delete" in second.stderr, "the refusal tells the operator not to remove the lock by hand"
    assert owner.alive(), "the refused opener must not disturb the owner"
    assert (data / "LOCK").read_text().strip() == lock_before
    assert files_under(data) == files_before, "the refused opener created or replaced files"
    assert cluster.results(run_id) == before_results

    owner.kill9()
    restarted = cluster.start_coordinator()
    assert restarted.pid != owner.pid
    after = files_under(data)
    missing = {f for f in files_before if f not in after and f != "listen.addr"}
    assert not missing, f"restart after kill -9 needed files deleted: {missing}"
    assert after["LOCK"] == files_before["LOCK"], "the lock file is reused, not replaced"
    assert (data / "LOCK").read_text().strip() == str(restarted.pid)
    assert cluster.results(run_id) == before_results
    assert cluster.coordinator.term() == 0


# ---- (b) a corrupt log record refuses the start --------------------------------------------

def with_log(data_dir: Path, edit) -> None:
    """Open the stopped coordinator's environment directly and run `edit(txn, log_db, meta_db)`."""
    env = lmdb.open(str(data_dir / WAL_DIR_NAME), subdir=True, max_dbs=3, map_size=TEST_MAP_BYTES)
    try:
        with env.begin(write=True) as txn:
            log_db = env.open_db(DB_LOG, txn=txn)
            meta_db = env.open_db(DB_META, txn=txn)
            env.open_db(DB_SNAP, txn=txn)
            edit(txn, log_db, meta_db)
    finally:
        env.close()


def log_indexes(data_dir: Path) -> list[int]:
    out: list[int] = []
    with_log(data_dir, lambda txn, log_db, meta_db: out.extend(key_index(k) for k, _ in txn.cursor(db=log_db)))
    return out


def flip_payload_byte(txn, log_db, index: int) -> None:
    key = index_key(index)
    value = bytearray(txn.get(key, db=log_db))
    value[FRAME_HEADER.size + (len(value) - FRAME_HEADER.size) // 2] ^= 0x5A
    txn.put(key, bytes(value), db=log_db)


def reframe_garbage(txn, log_db, index: int) -> None:
    """A record whose checksum is right but whose bytes are no LogRecord."""
    key = index_key(index)
    txn.put(key, frame(key, b"\xff\xfe not a log record \x00"), db=log_db)


def drop_record(txn, log_db, index: int) -> None:
    assert txn.delete(index_key(index), db=log_db)


def flip_header_byte(txn, log_db, index: int) -> None:
    key = index_key(index)
    value = bytearray(txn.get(key, db=log_db))
    value[1] ^= 0x01  # inside the stored CRC
    txn.put(key, bytes(value), db=log_db)


CORRUPTIONS = {
    "payload-byte-flipped": (flip_payload_byte, "log record {i} failed verification: CRC-32 mismatch"),
    "crc-byte-flipped": (flip_header_byte, "log record {i} failed verification: CRC-32 mismatch"),
    "valid-crc-garbage": (reframe_garbage, "log record {i} does not decode"),
    "record-missing": (drop_record, "record {i} is missing"),
}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_corrupt_log_record_refuses_the_start_naming_its_index(cluster, how):
    cluster.start_coordinator()
    for n in range(3):
        submit_distinct(cluster, n)
    cluster.coordinator.kill9()  # no shutdown snapshot: recovery must read every record
    indexes = log_indexes(cluster.data_dir)
    assert len(indexes) >= 4 and indexes == list(range(1, len(indexes) + 1)), indexes
    victim = indexes[len(indexes) // 2]
    edit, message = CORRUPTIONS[how]
    with_log(cluster.data_dir, lambda txn, log_db, meta_db: edit(txn, log_db, victim))
    files_before = files_under(cluster.data_dir)
    files_before.pop("listen.addr")  # the harness removes the dead owner's, to see a new one appear
    cluster.address = ""  # any port: this start must never listen

    for attempt in range(2):  # refused every time, not just once
        mark = len(log_text(cluster))
        cluster.start_coordinator(wait=False)
        code = wait_exit(cluster)
        assert code == EX_SOFTWARE, f"exit {code}\n{cluster.tails()}"
        lines = fail_stop_lines(cluster)
        assert len(lines) == attempt + 1, log_text(cluster)
        assert message.format(i=victim) in lines[-1], lines[-1]
        assert "restore" in lines[-1], "the line says what an operator can do"
        assert not (cluster.data_dir / "listen.addr").exists(), "a refused start must never serve"
        assert '"event": "listening"' not in log_text(cluster)[mark:], "a refused start listened"
    after = files_under(cluster.data_dir)
    assert set(files_before) <= set(after), f"the refused start deleted {set(files_before) - set(after)}"
    # Nothing was repaired or rewritten behind the operator's back: the damage is still there.
    expected = [i for i in indexes if i != victim] if how == "record-missing" else indexes
    assert log_indexes(cluster.data_dir) == expected


# ---- (c) a full map is fail-stop, and a larger map recovers ----------------------------------

def test_full_map_fail_stops_and_a_larger_map_recovers_every_acknowledged_submission(cluster):
    cluster.start_coordinator("--map-size-mb", "1")
    acked: list[str] = []
    shown: list[dict] = []
    for n in range(100):
        try:
            acked.append(submit_distinct(cluster, n, groups=20, pad_bytes=4_000))
        except Exception:  # noqa: BLE001 - the fail-stop drops the call; the exit code says why
            break
        shown = runs(cluster)
    else:
        raise AssertionError(f"100 submissions of ~100 KB did not fill a 1 MiB map\n{cluster.tails()}")
    code = wait_exit(cluster)
    assert code == EX_CANTCREAT, f"exit {code}\n{cluster.tails()}"
    lines = fail_stop_lines(cluster)
    assert len(lines) == 1, log_text(cluster)
    assert "map is full" in lines[0] and "--map-size-mb" in lines[0], lines[0]
    assert "restart with a larger --map-size-mb" in lines[0], lines[0]
    assert len(acked) >= 2, "the map held a few submissions before it filled"

    cluster.start_coordinator("--map-size-mb", "64")
    assert runs(cluster) == shown, "the restart must show exactly what was acknowledged"
    assert sorted(r["run_id"] for r in shown) == sorted(acked)
    # And it takes writes again.
    acked.append(submit_distinct(cluster, 1_000, groups=20, pad_bytes=4_000))
    assert cluster.coordinator.term() == 0
    cluster.start_coordinator("--map-size-mb", "64")
    assert sorted(r["run_id"] for r in runs(cluster)) == sorted(acked)


# ---- (d) a failing write is fail-stop, and a restart has everything acknowledged ---------------

FAIL_WHEN_ENV = "FLEET_TEST_FAIL_APPEND_WHEN"
SITECUSTOMIZE = f'''"""Injected into a coordinator child by tests/integration/test_storage_faults.py only: once the
file named by ${FAIL_WHEN_ENV} exists, coordinator.store.Store.append raises StoreIOError (EIO)
without writing anything, as a disk that fails a write would."""
import errno
import os

_when = os.environ.get("{FAIL_WHEN_ENV}")
if _when:
    from coordinator import store as _store
    from coordinator.errors import StoreIOError

    _real_append = _store.Store.append

    def _failing_append(self, records):
        if os.path.exists(_when):
            first = self.last_index + 1
            raise StoreIOError(f"appending log records {{first}}..{{first + len(records) - 1}}: "
                               "Input/output error (injected by the test)", self._wal_dir, errno=errno.EIO)
        return _real_append(self, records)

    _store.Store.append = _failing_append
'''


def test_failing_write_fail_stops_and_a_restart_has_everything_acknowledged(cluster, tmp_path):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trigger = tmp_path / "fail-appends-now"
    cluster.extra_env = {"PYTHONPATH": f"{inject}{os.pathsep}{REPO}", FAIL_WHEN_ENV: str(trigger)}
    cluster.start_coordinator()
    run_id = cluster.submit(intbench_spec(3), SLOW_POLICY)
    token = (cluster.data_dir / "enroll.token").read_text().strip()
    ok_reports = 3  # the fourth report meets the failing disk
    acked: dict[str, tuple[str, float]] = {}
    with rc.RawSession(cluster.address, rc.worker_metadata(token, "w1")) as s:
        credential = s.open(rc.hello("w1", slots=1)).worker_credential
        failed_at = None
        for n in range(2 * 3):
            push = s.push(n // 2 + 1)[n // 2]
            cell = push.cells[n % 2]
            score = float(n % 2)
            if n == ok_reports:
                trigger.touch()
            try:
                ack = s.ack(s.report(push, n % 2, rc.good_report(score=score)), timeout=10)
            except rc.SessionClosed:
                failed_at = n
                break
            assert ack.outcome == common_pb2.ACK_OUTCOME_ACCEPTED, ack
            acked[cell.cell_id] = (cell.attempt_id, score)
    assert failed_at == ok_reports, f"the write after {ok_reports} reports should have failed\n{cluster.tails()}"
    code = wait_exit(cluster)
    assert code == EX_IOERR, f"exit {code}\n{cluster.tails()}"
    lines = fail_stop_lines(cluster)
    assert len(lines) == 1, log_text(cluster)
    assert "Input/output error" in lines[0] and "appending log records" in lines[0], lines[0]
    assert "restart" in lines[0], lines[0]

    cluster.extra_env = {}
    cluster.start_coordinator()
    cells = {c["cell_id"]: c for c in cluster.results(run_id)["cells"]}
    for cell_id, (attempt_id, score) in acked.items():
        got = cells[cell_id]
        assert (got["state"], got["attempt_id"], got["score"], got["worker_id"]) == (
            "selected", attempt_id, score, "w1"), got
    unacked = [c for cid, c in cells.items() if cid not in acked]
    assert all(c["state"] != "selected" for c in unacked), json.dumps(unacked, indent=1)
    # The worker's enrollment survived too: its credential opens a session after the restart.
    with rc.RawSession(cluster.address, rc.worker_metadata(credential, "w1")) as s:
        welcome = s.open(rc.hello("w1", incarnation=2, slots=1))
        assert welcome.worker_credential == "", "an enrolled worker is not enrolled again"
