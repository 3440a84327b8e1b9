"""Snapshots stored in parts (one transaction each, then a manifest): they load whole, a part
that fails verification falls back to the older snapshot, parts without a manifest (a crash
between parts) are never loaded and are deleted by compaction, and compaction in bounded
steps deletes exactly what retention frees; method: real LMDB in a temp dir, raw values
rewritten between opens."""
from __future__ import annotations

import zlib
from pathlib import Path

import lmdb
import pytest

from coordinator.errors import StoreCorrupt
from coordinator.store import DB_LOG, DB_SNAP_PARTS, MAX_DBS, WAL_DIR_NAME, Store, index_key
from tests.unit.test_store import fill, loaded

PART = 7


def parted(store: Store, index: int, data: bytes, *, finish: bool = True) -> None:
    parts = [data[i:i + PART] for i in range(0, len(data), PART)]
    for i, p in enumerate(parts):
        store.write_snapshot_part(index, i, p)
    if finish:
        store.finish_snapshot(index, len(parts), len(data), zlib.crc32(data))


def keys(data_dir: Path, db_name: bytes) -> list[bytes]:
    env = lmdb.open(str(data_dir / WAL_DIR_NAME), max_dbs=MAX_DBS)
    try:
        db = env.open_db(db_name)
        with env.begin(db=db) as txn:
            return [k for k, _ in txn.cursor()]
    finally:
        env.close()


def compact_all(store: Store, step: int = 3) -> int:
    steps = 0
    while store.compaction_due:
        store.compact_step(step)
        steps += 1
        assert steps < 10_000
    return steps


def test_a_parted_snapshot_loads_whole(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        fill(store, 30)
        parted(store, 25, b"the state at twenty-five, in parts")
    with Store.open(tmp_path) as store:
        snapshot, records, warnings = loaded(store)
    assert snapshot == (25, b"the state at twenty-five, in parts") and warnings == ()
    assert [i for i, _ in records] == list(range(26, 31))


def test_a_corrupt_part_falls_back_to_the_older_snapshot(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        fill(store, 30)
        parted(store, 10, b"older state, also in parts")
        parted(store, 20, b"newer state in several parts")
    env = lmdb.open(str(tmp_path / WAL_DIR_NAME), max_dbs=MAX_DBS)
    try:
        db = env.open_db(DB_SNAP_PARTS)
        with env.begin(write=True, db=db) as txn:
            key = index_key(20) + (1).to_bytes(4, "big")
            value = txn.get(key)
            txn.put(key, value[:-1] + bytes([value[-1] ^ 1]))
    finally:
        env.close()
    with Store.open(tmp_path) as store:
        snapshot, records, warnings = loaded(store)
    assert snapshot == (10, b"older state, also in parts")
    assert "snapshot at index 20 failed verification (part 1: CRC-32 mismatch" in warnings[0]
    assert records[0][0] == 11


def test_parts_without_a_manifest_are_never_loaded_and_compaction_deletes_them(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        fill(store, 30)
        parted(store, 10, b"kept state")
        parted(store, 20, b"a crash came before the manifest", finish=False)
    with Store.open(tmp_path) as store:
        snapshot, records, _ = loaded(store)
        assert snapshot == (10, b"kept state") and records[0][0] == 11
        compact_all(store)
    assert all(k[:8] == index_key(10) for k in keys(tmp_path, DB_SNAP_PARTS))
    with Store.open(tmp_path) as store:
        assert loaded(store)[0] == (10, b"kept state")


def test_bounded_compaction_deletes_only_what_retention_frees(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        fill(store, 40)
        parted(store, 10, b"s10 state")
        parted(store, 20, b"s20 state")
        compact_all(store)
        parted(store, 30, b"s30 state")  # keeps 20 and 30: frees records 1..20 and s10's parts
        assert store.compaction_due
        assert compact_all(store, step=3) > 3, "in several bounded steps"
    log_keys = keys(tmp_path, DB_LOG)
    assert log_keys[0] == index_key(21) and log_keys[-1] == index_key(40)
    assert {k[:8] for k in keys(tmp_path, DB_SNAP_PARTS)} == {index_key(20), index_key(30)}
    with Store.open(tmp_path) as store:
        snapshot, records, _ = loaded(store)
    assert snapshot == (30, b"s30 state") and [i for i, _ in records] == list(range(31, 41))


def test_a_whole_snapshot_after_parted_ones_drops_their_parts(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        fill(store, 40)
        parted(store, 10, b"s10 state")
        parted(store, 20, b"s20 state")
        store.write_snapshot(30, b"s30 whole")
    assert {k[:8] for k in keys(tmp_path, DB_SNAP_PARTS)} == {index_key(20)}
    with Store.open(tmp_path) as store:
        assert loaded(store)[0] == (30, b"s30 whole")


def test_parts_are_read_one_at_a_time_as_they_are_consumed(tmp_path: Path) -> None:
    data = b"a state stored in enough parts to be counted"
    with Store.open(tmp_path) as store:
        fill(store, 30)
        parted(store, 25, data)
        rec = store.load()
        assert not isinstance(rec.snapshot_parts, list), "the parts are drawn, not held"
        first = next(rec.snapshot_parts)
        assert first == data[:PART]
        assert first + b"".join(rec.snapshot_parts) == data


def test_a_part_that_changes_after_verification_fails_loudly_not_silently(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        fill(store, 30)
        parted(store, 25, b"verified at load, gone when read")
        rec = store.load()  # verified here; read when consumed
        with store._env.begin(write=True, db=store._parts) as txn:
            txn.delete(index_key(25) + (2).to_bytes(4, "big"))
        with pytest.raises(StoreCorrupt, match="part 2 of 5, changed after it was verified: it is missing"):
            b"".join(rec.snapshot_parts)
