"""Goal: the write-ahead store keeps, verifies and bounds what it is given; method: real LMDB in a
temp dir, corruption written straight into LMDB between opens, disk failures injected at the
store's one write seam, and a child process for the lock."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from coordinator import errors
from coordinator.errors import (
    ArtifactCorrupt,
    StorageError,
    StoreCorrupt,
    StoreFull,
    StoreIOError,
    StoreLocked,
)
from coordinator.store import DB_LOG, DB_SNAP, MAX_DBS, WAL_DIR_NAME, Store, index_key

REPO = Path(__file__).resolve().parents[2]
SMALL_MAP_BYTES = 256 << 10


def rec(i: int) -> bytes:
    return f"record-{i}".encode() + b"." * (i % 7)


def fill(store: Store, n: int, batch: int = 10) -> None:
    while store.last_index < n:
        first = store.last_index + 1
        store.append([rec(i) for i in range(first, min(first + batch, n + 1))])


def loaded(store: Store) -> tuple[tuple[int, bytes] | None, list[tuple[int, bytes]], tuple[str, ...]]:
    r = store.load()
    return r.snapshot, list(r.records), r.warnings


def tamper(data_dir: Path, db_name: bytes, index: int, change) -> None:
    """With the store closed, rewrite (or delete, when `change` returns None) one raw value."""
    env = lmdb.open(str(data_dir / WAL_DIR_NAME), max_dbs=MAX_DBS)
    try:
        db = env.open_db(db_name)
        with env.begin(write=True, db=db) as txn:
            value = txn.get(index_key(index))
            assert value is not None, f"no {db_name!r} value at {index}"
            new = change(value)
            if new is None:
                txn.delete(index_key(index))
            else:
                txn.put(index_key(index), new)
    finally:
        env.close()


def flip_last_byte(value: bytes) -> bytes:
    return value[:-1] + bytes([value[-1] ^ 0x01])


def raw_log_indexes(data_dir: Path) -> list[int]:
    env = lmdb.open(str(data_dir / WAL_DIR_NAME), max_dbs=MAX_DBS, readonly=True)
    try:
        with env.begin(db=env.open_db(DB_LOG, create=False)) as txn:
            return [int.from_bytes(k, "big") for k, _ in txn.cursor()]
    finally:
        env.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


# ---- append and load ------------------------------------------------------------------------


def test_append_returns_contiguous_indexes_from_one_and_roundtrips(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        assert store.last_index == 0
        assert store.append([b"a", b"b"]) == 2
        assert store.append([]) == 2
        assert store.append([b"c"]) == 3
        assert store.append([b""]) == 4
    with Store.open(data_dir) as store:
        assert store.last_index == 4
        assert loaded(store) == (None, [(1, b"a"), (2, b"b"), (3, b"c"), (4, b"")], ())
        assert store.append([b"d"]) == 5


def test_load_reads_past_one_recovery_batch(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 2_500, batch=500)
    with Store.open(data_dir) as store:
        _, records, _ = loaded(store)
    assert records == [(i, rec(i)) for i in range(1, 2_501)]


def test_a_batch_is_one_transaction(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The third put of the second batch fails: none of that batch may be visible.
    with Store.open(data_dir) as store:
        store.append([b"a", b"b"])
        real_put = store._put
        calls = []

        def failing_put(txn, key, value, db, **kw):
            calls.append(key)
            if len(calls) == 3:
                raise lmdb.DiskError("injected: no space left on device")
            return real_put(txn, key, value, db, **kw)

        monkeypatch.setattr(store, "_put", failing_put)
        with pytest.raises(StoreIOError) as info:
            store.append([b"c", b"d", b"e", b"f"])
        assert info.value.errno == errno.ENOSPC
        assert "appending log records 3..6" in str(info.value)
        assert store.last_index == 2
        # Fail-stop: the store refuses further writes rather than carry on.
        with pytest.raises(StoreIOError, match="earlier failure"):
            store.append([b"g"])
    assert raw_log_indexes(data_dir) == [1, 2]
    with Store.open(data_dir) as store:
        assert store.last_index == 2
        assert loaded(store) == (None, [(1, b"a"), (2, b"b")], ())


def test_a_failing_commit_leaves_nothing(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(data_dir) as store:
        store.append([b"a"])

        def failing_commit(txn):
            txn.abort()
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(store, "_commit", failing_commit)
        with pytest.raises(StoreIOError) as info:
            store.append([b"b", b"c"])
        assert info.value.errno == errno.EIO
        assert errors.exit_code_for(info.value) == 74
    with Store.open(data_dir) as store:
        assert loaded(store) == (None, [(1, b"a")], ())


# ---- snapshots and compaction -----------------------------------------------------------------


def test_load_returns_the_snapshot_and_only_the_records_after_it(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 30)
        store.write_snapshot(25, b"state@25")
        fill(store, 33)
    with Store.open(data_dir) as store:
        snapshot, records, warnings = loaded(store)
    assert snapshot == (25, b"state@25")
    assert records == [(i, rec(i)) for i in range(26, 34)]
    assert warnings == ()


def test_snapshot_at_the_last_index_leaves_no_records_to_replay(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 10)
        store.write_snapshot(10, b"s10")
        assert loaded(store) == ((10, b"s10"), [], ())


def test_retention_keeps_two_snapshots_and_the_records_after_the_older(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 10)
        store.write_snapshot(10, b"s10")
        assert raw_log_indexes_open(store) == list(range(1, 11)), "one snapshot: no compaction"
        fill(store, 20)
        store.write_snapshot(20, b"s20")
        assert store.snapshot_indexes == (10, 20)
        assert raw_log_indexes_open(store) == list(range(11, 21))
        fill(store, 35)
        store.write_snapshot(30, b"s30")
        assert store.snapshot_indexes == (20, 30)
        assert raw_log_indexes_open(store) == list(range(21, 36))
        assert loaded(store) == ((30, b"s30"), [(i, rec(i)) for i in range(31, 36)], ())
    with Store.open(data_dir) as store:
        assert store.snapshot_indexes == (20, 30)
        assert store.last_index == 35


def raw_log_indexes_open(store: Store) -> list[int]:
    with store._env.begin(db=store._log) as txn:
        return [int.from_bytes(k, "big") for k, _ in txn.cursor()]


def test_snapshot_due_counts_records_since_the_newest_snapshot(data_dir: Path) -> None:
    with Store.open(data_dir, snapshot_every=5) as store:
        fill(store, 4)
        assert not store.snapshot_due
        fill(store, 5)
        assert store.snapshot_due
        store.write_snapshot(5, b"s")
        assert not store.snapshot_due


def test_corrupt_newest_snapshot_falls_back_to_the_older(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 20)
        store.write_snapshot(10, b"s10")
        store.write_snapshot(20, b"s20")
        fill(store, 24)
    tamper(data_dir, DB_SNAP, 20, flip_last_byte)
    with Store.open(data_dir) as store:
        snapshot, records, warnings = loaded(store)
        assert snapshot == (10, b"s10")
        assert records == [(i, rec(i)) for i in range(11, 25)]
        assert len(warnings) == 1 and "snapshot at index 20" in warnings[0]
        assert "CRC-32 mismatch" in warnings[0]
        # The next snapshot drops the bad one instead of compacting through it.
        store.write_snapshot(24, b"s24")
        assert store.snapshot_indexes == (10, 24)
        assert loaded(store) == ((24, b"s24"), [], ())


def test_both_snapshots_corrupt_after_compaction_refuses_to_start(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 20)
        store.write_snapshot(10, b"s10")
        store.write_snapshot(20, b"s20")
    tamper(data_dir, DB_SNAP, 20, flip_last_byte)
    tamper(data_dir, DB_SNAP, 10, lambda v: v[:3])
    with Store.open(data_dir) as store:
        with pytest.raises(StoreCorrupt) as info:
            store.load()
    assert info.value.index == 1
    assert "log record 1 is missing" in str(info.value)
    assert "snapshot at index 10" in str(info.value)


def test_the_only_snapshot_corrupt_replays_the_whole_log(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 12)
        store.write_snapshot(10, b"s10")
    tamper(data_dir, DB_SNAP, 10, flip_last_byte)
    with Store.open(data_dir) as store:
        snapshot, records, warnings = loaded(store)
    assert snapshot is None
    assert records == [(i, rec(i)) for i in range(1, 13)]
    assert len(warnings) == 1


# ---- corruption of records -----------------------------------------------------------------


@pytest.mark.parametrize("index", [1, 7, 12])
def test_a_flipped_byte_in_a_record_names_its_index(data_dir: Path, index: int) -> None:
    with Store.open(data_dir) as store:
        fill(store, 12)
    tamper(data_dir, DB_LOG, index, flip_last_byte)
    with Store.open(data_dir) as store:
        recovery = store.load()
        seen = []
        with pytest.raises(StoreCorrupt) as info:
            for i, _ in recovery.records:
                seen.append(i)
    assert info.value.index == index
    assert f"log record {index} failed verification" in str(info.value)
    # Records are verified a read batch at a time, before any of the batch is yielded.
    assert seen == list(range(1, len(seen) + 1)) and len(seen) < index


def test_a_gap_in_the_log_names_the_missing_index(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 12)
    tamper(data_dir, DB_LOG, 5, lambda v: None)
    with Store.open(data_dir) as store:
        with pytest.raises(StoreCorrupt) as info:
            list(store.load().records)
    assert info.value.index == 5
    assert "record 5 is missing" in str(info.value)


def test_a_lost_tail_is_refused_at_open(data_dir: Path) -> None:
    with Store.open(data_dir) as store:
        fill(store, 12)
    tamper(data_dir, DB_LOG, 12, lambda v: None)
    with pytest.raises(StoreCorrupt, match="the log ends at 11 but meta says 12"):
        Store.open(data_dir)
    # A refused open released its lock: a fixed store opens again at once.
    with pytest.raises(StoreCorrupt):
        Store.open(data_dir)


# ---- a full map ---------------------------------------------------------------------------------


def test_a_full_map_grows_by_doubling_and_the_batch_lands(data_dir: Path) -> None:
    big = [bytes([i % 256]) * 4096 for i in range(300)]  # ~1.2 MiB against a 256 KiB map
    with Store.open(data_dir, map_size_bytes=SMALL_MAP_BYTES,
                    map_size_bytes_max=64 << 20) as store:
        assert store.append(big) == 300
        assert store.map_size_bytes >= 2 << 20
        assert store.map_size_bytes & (store.map_size_bytes - 1) == 0, "doubled from a power of 2"
    with Store.open(data_dir, map_size_bytes=SMALL_MAP_BYTES) as store:
        assert [r for _, r in store.load().records] == big


def test_a_full_map_at_its_ceiling_raises_store_full_and_writes_nothing(data_dir: Path) -> None:
    with Store.open(data_dir, map_size_bytes=SMALL_MAP_BYTES,
                    map_size_bytes_max=SMALL_MAP_BYTES) as store:
        store.append([b"a", b"b"])
        with pytest.raises(StoreFull) as info:
            store.append([b"x" * 4096] * 300)
        assert "--map-size-mb" in info.value.advice
        assert f"ceiling of {SMALL_MAP_BYTES} bytes" in info.value.what
        assert "nothing was written" in info.value.what
        assert errors.exit_code_for(info.value) == 73
        assert store.last_index == 2
        # Still readable and writable for what fits.
        assert loaded(store) == (None, [(1, b"a"), (2, b"b")], ())
        assert store.append([b"c"]) == 3
    with Store.open(data_dir, map_size_bytes=SMALL_MAP_BYTES,
                    map_size_bytes_max=SMALL_MAP_BYTES) as store:
        assert loaded(store) == (None, [(1, b"a"), (2, b"b"), (3, b"c")], ())


def test_map_size_above_its_ceiling_is_a_configuration_error(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="--map-size-mb"):
        Store.open(data_dir, map_size_bytes=2 << 20, map_size_bytes_max=1 << 20)


# ---- the lock ------------------------------------------------------------------------------------

HOLD_LOCK = """
import sys
from pathlib import Path
from coordinator.store import Store
store = Store.open(Path(sys.argv[1]))
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_second_opener_in_this_process_is_refused(data_dir: Path) -> None:
    with Store.open(data_dir):
        with pytest.raises(StoreLocked) as info:
            Store.open(data_dir)
        assert info.value.pid == os.getpid()
        assert f"pid {os.getpid()}" in str(info.value)
    with Store.open(data_dir):
        pass


def test_a_second_opener_in_another_process_is_refused_naming_the_owner(data_dir: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(data_dir)], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "locked\n"
        with pytest.raises(StoreLocked) as info:
            Store.open(data_dir)
        assert info.value.pid == child.pid
        assert f"pid {child.pid}" in str(info.value)
        assert errors.exit_code_for(info.value) == 75
        assert (data_dir / "LOCK").read_text().strip() == str(child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=10)
    with Store.open(data_dir) as store:  # a clean exit released it
        assert store.last_index == 0


# ---- fail-stop -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("err", "code"), [
    (StoreCorrupt("log record 3 failed verification", "/d/wal", index=3), 70),
    (ArtifactCorrupt("artifact changed", "/d/a", digest="sha256:" + "0" * 64), 70),
    (StoreFull("map full", "/d/wal", advice="raise --map-size-mb"), 73),
    (StoreIOError("append", "/d/wal", errno=errno.ENOSPC), 74),
    (StoreLocked("/d/LOCK", 42), 75),
    (OSError(errno.EIO, "io"), 74),
])
def test_each_storage_error_has_its_exit_code(err: BaseException, code: int) -> None:
    assert errors.exit_code_for(err) == code
    line = errors.fail_stop_line(err)
    assert "\n" not in line
    if isinstance(err, StorageError):
        assert str(err.path) in line and err.advice in line


def test_fail_stop_prints_one_line_and_exits_with_the_code(tmp_path: Path) -> None:
    code = (
        "from coordinator.errors import StoreIOError, fail_stop\n"
        "import errno, threading\n"
        "t = threading.Thread(target=fail_stop, args=(StoreIOError('appending', '/data/wal',"
        " errno=errno.ENOSPC),))\n"
        "t.start(); t.join()\n"
        "print('carried on')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 74, "fail-stop from a thread ends the whole process"
    assert "carried on" not in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert "appending" in lines[0] and "/data/wal" in lines[0] and "disk is full" in lines[0]
