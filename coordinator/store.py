"""The coordinator's write-ahead store: an append-only log of opaque records plus snapshots.

Rules, in the order they protect the state:
- One process owns a data directory. `Store.open` takes `fcntl.flock` on `data_dir/LOCK`
  before LMDB is touched and holds it for the store's lifetime; the owner's pid is written
  into the file so a refused opener can name it. The kernel drops the lock when its owner
  dies, so nothing is ever deleted by hand. It is flock and not fcntl/lockf on purpose:
  LMDB's own lock file uses POSIX fcntl locks, which belong to (process, file) and are
  dropped by closing any descriptor of the file; flock locks are separate and belong to our
  one open descriptor. The same lock also keeps one process from opening the environment
  twice, which LMDB forbids.
- The log lives in LMDB under `data_dir/wal/` in sub-database `log`: key = 8-byte big-endian
  index, contiguous from 1; value = a 5-byte header (format version, CRC-32 over key and
  payload) then the opaque record. `meta` holds the format version and the last index,
  written in the same transaction as the records, so a lost tail is detected.
- `append` writes one batch in one write transaction with `sync=True`: when it returns the
  batch is on disk; when it raises, none of it is.
- Snapshots live in `snap`, framed like records and keyed by the index they cover. The newest
  `SNAPSHOTS_KEPT` (2) are kept. Retention rule: writing a snapshot deletes log records with
  index <= the OLDER kept snapshot's index, never the newer's, so if the newest snapshot
  fails its checksum the older one and every record after it are still there.
- A large snapshot may be written in parts, so that no single transaction holds the actor
  for long: `write_snapshot_part` stores each part (framed, keyed index || part number) in
  sub-database `snapparts`, then `finish_snapshot` writes the `snap` entry, a manifest
  (part count, total length, CRC-32 of the whole), in one transaction: a snapshot exists only
  once its manifest does, so a crash between parts leaves orphans, never a partial snapshot
  (orphans are deleted by later compaction steps). The log records and parts that retention
  frees are then deleted by `compact_step`, a bounded number of keys per transaction.
- `load` verifies everything it returns: a snapshot that fails its checksum is skipped with a
  warning (fallback to the older); a record that fails, or a gap, raises `StoreCorrupt`
  naming the index. The coordinator never starts on state it cannot verify.
- Environment failures become `StorageError`s (coordinator/errors.py); a full map is grown
  by doubling up to a ceiling first. The caller fail-stops on any of them.

A `Store` is used by one thread at a time (the actor), with one exception: `copy_to` (the
online backup) runs on another thread. LMDB allows a reader beside the writer, and the copy is
one read transaction; what LMDB forbids is changing the map size while any transaction of this
process is open, so `copy_to`, `_grow_map` and `close` share `_copy_lock` (the actor waits on
it only when the map must grow during a backup). It knows nothing of commands.
"""
from __future__ import annotations

import errno as errno_mod
import fcntl
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lmdb

from common.durable import fsync_dir as _fsync_dir
from common.limits import (
    LOG_RECORD_BYTES_MAX,
    SNAPSHOT_EVERY_RECORDS,
    SNAPSHOTS_KEPT,
    STORE_MAP_BYTES_DEFAULT,
    STORE_MAP_BYTES_MAX,
    STORE_RECOVERY_BATCH_RECORDS,
)
from coordinator.errors import StorageError, StoreCorrupt, StoreFull, StoreIOError, StoreLocked

LOCK_FILE_NAME = "LOCK"
WAL_DIR_NAME = "wal"
DB_LOG = b"log"
DB_SNAP = b"snap"
DB_META = b"meta"
DB_SNAP_PARTS = b"snapparts"
MAX_DBS = 4
META_FORMAT = b"format"
META_LAST_INDEX = b"last_index"
META_PROBE = b"probe"  # written and deleted by probe_write, never kept
# 2: runs carry the submitter's environment manifest and workers measure each run they serve
# (RunEnvironmentMeasured, RunPinReleased); a format-1 log would replay to other decisions,
# so a data dir written by format 1 is refused with a message, never folded.
STORE_FORMAT = b"fleet-wal-2"

FRAME_VERSION = 1
FRAME_HEADER = struct.Struct(">BI")  # frame version, CRC-32 of key || payload
KEY_BYTES = 8
PART_KEY_BYTES = KEY_BYTES + 4  # snapshot index, then the part's number
# A snapshot's `snap` value when its bytes are in parts: tag, parts, total length, CRC-32.
PARTS_MANIFEST = struct.Struct(">8sIQI")
PARTS_TAG = b"fleetprt"
# A refused opener may read LOCK between the owner's flock and its pid write: retry briefly.
LOCK_PID_READ_TRIES = 20
LOCK_PID_READ_PAUSE_S = 0.005

_CORRUPTION_ERRORS = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.VersionMismatchError,
    lmdb.InvalidError,
    lmdb.PanicError,
)


def index_key(index: int) -> bytes:
    return index.to_bytes(KEY_BYTES, "big")


def key_index(key: bytes) -> int:
    assert len(key) == KEY_BYTES, f"log key of {len(key)} bytes"
    return int.from_bytes(key, "big")


def frame(key: bytes, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(FRAME_VERSION, zlib.crc32(payload, zlib.crc32(key))) + payload


def unframe(key: bytes, value: bytes) -> bytes | str:
    """The payload, or a sentence saying why the value fails verification."""
    if len(value) < FRAME_HEADER.size:
        return f"value of {len(value)} bytes is shorter than its {FRAME_HEADER.size}-byte header"
    version, crc = FRAME_HEADER.unpack_from(value)
    if version != FRAME_VERSION:
        return f"unknown frame version {version}"
    payload = value[FRAME_HEADER.size:]
    actual = zlib.crc32(payload, zlib.crc32(key))
    if actual != crc:
        return f"CRC-32 mismatch (stored {crc:08x}, computed {actual:08x})"
    return payload


@dataclass(frozen=True, slots=True)
class Recovery:
    """What `load` found: fold `snapshot`'s state, then every record of `records` in order.

    `records` is lazy and verifies as it goes (it may raise `StoreCorrupt`); consume it
    before appending. `warnings` are sentences for the caller's log (a skipped snapshot).
    """

    snapshot_index: int | None
    # The snapshot's bytes in their stored parts, each verified and the whole checked against
    # the manifest, read from the store one at a time as they are consumed (once);
    # `decode_state` takes them as they come, so a large snapshot is never held whole.
    snapshot_parts: Iterator[bytes]
    records: Iterator[tuple[int, bytes]]
    last_index: int
    warnings: tuple[str, ...]

    _whole: list[bytes] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def snapshot(self) -> tuple[int, bytes] | None:
        """The snapshot whole, for callers that want one bytes object (tests, tools): joined at
        the first call, which consumes `snapshot_parts`."""
        if self.snapshot_index is None:
            return None
        if not self._whole:
            self._whole.append(b"".join(self.snapshot_parts))
        return self.snapshot_index, self._whole[0]


class Store:
    """See the module docstring. Build with `Store.open`."""

    def __init__(
        self,
        *,
        data_dir: Path,
        lock_fd: int,
        env: lmdb.Environment,
        dbs: tuple[object, object, object, object],
        map_size_bytes: int,
        map_size_bytes_max: int,
        snapshot_every: int,
        last_index: int,
        snapshot_indexes: list[int],
        readonly: bool = False,
    ) -> None:
        self._readonly = readonly  # open_reader's view: nothing may be written through it
        self._data_dir = data_dir
        self._wal_dir = data_dir / WAL_DIR_NAME
        self._lock_fd = lock_fd
        self._env = env
        self._log, self._snap, self._meta, self._parts = dbs
        self._map_size_bytes = map_size_bytes
        self._map_size_bytes_max = map_size_bytes_max
        self._snapshot_every = snapshot_every
        self._last_index = last_index
        self._snapshot_indexes = snapshot_indexes  # ascending, at most SNAPSHOTS_KEPT
        self._bad_snapshot_indexes: list[int] = []  # found by load, dropped by the next snapshot
        self._compact_through = 0  # log records up to here are freed by retention, not yet deleted
        self._parts_freed = True  # parts of no kept snapshot may exist (orphans, dropped ones)
        self._parts_writing = 0  # the index whose parts are being written: compaction spares them
        self._failed: StoreIOError | None = None
        self._closed = False
        self._copy_lock = threading.Lock()  # copy_to against set_mapsize and close (module rules)

    # ---- opening and closing -------------------------------------------------------------

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        map_size_bytes: int = STORE_MAP_BYTES_DEFAULT,
        map_size_bytes_max: int = STORE_MAP_BYTES_MAX,
        snapshot_every: int = SNAPSHOT_EVERY_RECORDS,
    ) -> Store:
        if not 0 < map_size_bytes <= map_size_bytes_max:
            raise ValueError(f"map size {map_size_bytes} must be positive and at most the "
                             f"ceiling {map_size_bytes_max} (--map-size-mb)")
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be at least 1, not {snapshot_every}")
        data_dir = Path(data_dir)
        lock_fd = _lock_data_dir(data_dir)
        env = None
        try:
            wal_dir = data_dir / WAL_DIR_NAME
            try:
                created = not wal_dir.exists()
                wal_dir.mkdir(exist_ok=True)
                if created:
                    _fsync_dir(data_dir)
                env = lmdb.open(
                    str(wal_dir),
                    subdir=True,
                    max_dbs=MAX_DBS,
                    map_size=map_size_bytes,
                    sync=True,
                    metasync=True,
                    writemap=False,
                    map_async=False,
                    lock=True,
                )
                # Reader slots of a killed process stay in lock.mdb until cleared.
                env.reader_check()
                with env.begin(write=True) as txn:
                    dbs = (
                        env.open_db(DB_LOG, txn=txn),
                        env.open_db(DB_SNAP, txn=txn),
                        env.open_db(DB_META, txn=txn),
                        env.open_db(DB_SNAP_PARTS, txn=txn),
                    )
                    last_index, snapshot_indexes = _check_layout(txn, dbs, wal_dir)
                # The file may remember a map grown by an earlier process.
                actual_map = env.info()["map_size"]
            except (lmdb.Error, OSError) as e:
                raise _wrap(e, "opening the write-ahead log", wal_dir) from e
            return cls(
                data_dir=data_dir,
                lock_fd=lock_fd,
                env=env,
                dbs=dbs,
                map_size_bytes=max(actual_map, map_size_bytes),
                map_size_bytes_max=map_size_bytes_max,
                snapshot_every=snapshot_every,
                last_index=last_index,
                snapshot_indexes=snapshot_indexes,
            )
        except BaseException:
            if env is not None:
                env.close()
            os.close(lock_fd)
            raise

    @classmethod
    def open_reader(cls, data_dir: Path) -> Store:
        """A read-only view of a store that another process (the coordinator) has open for
        writing: the snapshot process's (coordinator/snapshotter.py). LMDB serves readers of
        other processes while one writes; this takes no data-dir lock and can write nothing."""
        data_dir = Path(data_dir)
        wal_dir = data_dir / WAL_DIR_NAME
        env = None
        try:
            # The ceiling as its map: the writer grows its map as the log grows, and a reader
            # whose map is smaller than the writer's last one gets MDB_MAP_RESIZED at its next
            # transaction (a read-only map larger than the file costs address space only).
            env = lmdb.open(str(wal_dir), subdir=True, max_dbs=MAX_DBS, readonly=True, lock=True,
                            map_size=STORE_MAP_BYTES_MAX)
            # Each handle in a transaction of its own that ends committed (py-lmdb's way for a
            # read-only environment): a handle opened inside a longer read transaction dies with it.
            dbs = tuple(env.open_db(name, create=False) for name in (DB_LOG, DB_SNAP, DB_META, DB_SNAP_PARTS))
            with env.begin() as txn:
                last_index, snapshot_indexes = _check_layout(txn, dbs, wal_dir)  # type: ignore[arg-type]
            actual_map = env.info()["map_size"]
        except (lmdb.Error, OSError) as e:
            if env is not None:
                env.close()
            raise _wrap(e, "opening the write-ahead log to read it", wal_dir) from e
        return cls(data_dir=data_dir, lock_fd=-1, env=env, dbs=dbs,  # type: ignore[arg-type]
                   map_size_bytes=actual_map, map_size_bytes_max=actual_map,
                   snapshot_every=SNAPSHOT_EVERY_RECORDS, last_index=last_index,
                   snapshot_indexes=snapshot_indexes, readonly=True)

    def close(self) -> None:
        """Close LMDB, then release the lock (in that order: the lock guards the env)."""
        with self._copy_lock:
            if self._closed:
                return
            self._closed = True
            self._env.close()
            if self._lock_fd >= 0:  # a reader (open_reader) holds none
                os.close(self._lock_fd)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading the position ------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self._last_index

    @property
    def snapshot_indexes(self) -> tuple[int, ...]:
        return tuple(self._snapshot_indexes)

    @property
    def map_size_bytes(self) -> int:
        return self._map_size_bytes

    @property
    def snapshot_due(self) -> bool:
        """True once `snapshot_every` records follow the newest snapshot: the actor then
        calls `write_snapshot(last_index, encoded state)`; the store cannot encode state."""
        newest = self._snapshot_indexes[-1] if self._snapshot_indexes else 0
        return self._last_index - newest >= self._snapshot_every

    # ---- writing -------------------------------------------------------------------------

    def append(self, records: Sequence[bytes]) -> int:
        """Append `records` in one write transaction; durable when this returns the last index."""
        if not records:
            return self._last_index
        first = self._last_index + 1
        last = self._last_index + len(records)

        def body(txn: lmdb.Transaction) -> None:
            for index, record in enumerate(records, start=first):
                assert isinstance(record, bytes), f"record {index} is {type(record).__name__}"
                assert len(record) <= LOG_RECORD_BYTES_MAX, f"record {index}: {len(record)} bytes"
                key = index_key(index)
                appended = self._put(txn, key, frame(key, record), self._log, append=True)
                assert appended, f"log key {index} is not past the last one"
            self._put(txn, META_LAST_INDEX, index_key(last), self._meta)

        self._write(body, f"appending log records {first}..{last}")
        self._last_index = last
        return last

    def write_snapshot(self, last_index: int, state: bytes) -> None:
        """Store `state` as the fold of records 1..last_index, then compact (module rules)."""
        assert isinstance(state, bytes)
        assert 1 <= last_index <= self._last_index, (
            f"snapshot at {last_index} outside the log 1..{self._last_index}")
        assert not self._snapshot_indexes or last_index > self._snapshot_indexes[-1], (
            f"snapshot at {last_index} not after the newest at {self._snapshot_indexes[-1]}")
        candidates = self._snapshot_indexes + [last_index]
        kept = candidates[-SNAPSHOTS_KEPT:]
        dropped = candidates[:-SNAPSHOTS_KEPT] + self._bad_snapshot_indexes
        compact_through = kept[0] if len(kept) == SNAPSHOTS_KEPT else 0

        def body(txn: lmdb.Transaction) -> None:
            key = index_key(last_index)
            self._put(txn, key, frame(key, state), self._snap)
            for index in dropped:
                txn.delete(index_key(index), db=self._snap)
            self._delete_parts(txn, lambda index: index not in kept and index != self._parts_writing, None)
            if compact_through:
                cursor = txn.cursor(db=self._log)
                if cursor.first():
                    while cursor.key() and key_index(cursor.key()) <= compact_through:
                        if not cursor.delete():
                            break

        self._write(body, f"writing the snapshot at index {last_index}")
        self._snapshot_indexes = kept
        self._bad_snapshot_indexes = []
        self._parts_freed = False

    def write_snapshot_part(self, last_index: int, part: int, data: bytes) -> None:
        """One part of the snapshot at `last_index`, in its own transaction (module rules)."""
        assert isinstance(data, bytes)
        assert 1 <= last_index <= self._last_index
        assert not self._snapshot_indexes or last_index > self._snapshot_indexes[-1]
        key = index_key(last_index) + part.to_bytes(4, "big")
        self._parts_writing = last_index
        self._write(lambda txn: self._put(txn, key, frame(key, data), self._parts),
                    f"writing part {part} of the snapshot at index {last_index}")

    def finish_snapshot(self, last_index: int, parts: int, total_bytes: int, crc: int) -> None:
        """Make the parts written for `last_index` its snapshot; retention as `write_snapshot`,
        but what it frees is deleted by later `compact_step`s."""
        assert 1 <= last_index <= self._last_index
        assert not self._snapshot_indexes or last_index > self._snapshot_indexes[-1]
        candidates = self._snapshot_indexes + [last_index]
        kept = candidates[-SNAPSHOTS_KEPT:]
        dropped = candidates[:-SNAPSHOTS_KEPT] + self._bad_snapshot_indexes

        def body(txn: lmdb.Transaction) -> None:
            key = index_key(last_index)
            self._put(txn, key, frame(key, PARTS_MANIFEST.pack(PARTS_TAG, parts, total_bytes, crc)), self._snap)
            for index in dropped:
                txn.delete(index_key(index), db=self._snap)

        self._write(body, f"writing the manifest of the snapshot at index {last_index}")
        self._parts_writing = 0
        self._snapshot_indexes = kept
        self._bad_snapshot_indexes = []
        if len(kept) == SNAPSHOTS_KEPT:
            self._compact_through = max(self._compact_through, kept[0])
        self._parts_freed = self._parts_freed or bool(dropped)

    def abandon_parts(self, last_index: int) -> None:
        """The parts written for `last_index` will never get their manifest (the child that
        encoded them failed): later `compact_step`s delete them."""
        if self._parts_writing == last_index:
            self._parts_writing = 0
        self._parts_freed = True

    @property
    def compaction_due(self) -> bool:
        return self._compact_through > 0 or self._parts_freed

    def compact_step(self, keys_max: int) -> None:
        """Delete at most `keys_max` log records that retention freed, then as many parts of no
        kept snapshot, in one transaction."""
        kept = tuple(self._snapshot_indexes)
        through = self._compact_through
        left = [keys_max]
        done = {"log": True, "parts": True}

        def body(txn: lmdb.Transaction) -> None:
            left[0] = keys_max
            done["log"] = done["parts"] = True
            if through:
                cursor = txn.cursor(db=self._log)
                if cursor.first():
                    while cursor.key() and key_index(cursor.key()) <= through:
                        if left[0] == 0:
                            done["log"] = False
                            break
                        left[0] -= 1
                        if not cursor.delete():
                            break
            if left[0] > 0:
                done["parts"] = self._delete_parts(
                    txn, lambda index: index not in kept and index != self._parts_writing, left)
            else:
                done["parts"] = False

        self._write(body, "deleting log records and snapshot parts freed by retention")
        if done["log"]:
            self._compact_through = 0
        if done["parts"]:
            self._parts_freed = False

    def _delete_parts(self, txn: lmdb.Transaction, unwanted: Callable[[int], bool],
                      left: list[int] | None) -> bool:
        """Delete parts whose snapshot index is `unwanted` (at most left[0] when given);
        True when none is left."""
        cursor = txn.cursor(db=self._parts)
        if not cursor.first():
            return True
        while True:
            key = cursor.key()
            if not key:
                return True
            index = key_index(key[:KEY_BYTES]) if len(key) == PART_KEY_BYTES else -1
            if index < 0 or unwanted(index):
                if left is not None:
                    if left[0] == 0:
                        return False
                    left[0] -= 1
                if not cursor.delete():
                    return True
            elif not cursor.next():
                return True

    # ---- the online backup (any thread) ---------------------------------------------------

    def copy_to(self, wal_dir: Path) -> None:
        """LMDB's own copy of the log, snapshots and meta into the empty directory `wal_dir`,
        compacted (free pages left out), taken in one read transaction: consistent as of the
        moment it begins, while the actor keeps committing. Errors are the destination's and
        are raised as they come (lmdb.Error, OSError); they never mark this store unusable."""
        with self._copy_lock:
            if self._closed:
                raise OSError("the store is closed: the coordinator is stopping")
            self._env.copy(str(wal_dir), compact=True)

    # ---- recovery ------------------------------------------------------------------------

    def load(self) -> Recovery:
        """The newest valid snapshot and the verified records after it (see `Recovery`)."""
        self._check_usable()
        warnings: list[str] = []
        chosen: tuple[int, Iterator[bytes]] | None = None
        bad: list[int] = []
        try:
            with self._env.begin(db=self._snap) as txn:
                stored = list(txn.cursor())
        except lmdb.Error as e:
            raise _wrap(e, "reading snapshots", self._wal_dir) from e
        for key, value in reversed(stored):
            if len(key) != KEY_BYTES:
                warnings.append(f"snapshot key of {len(key)} bytes skipped")
                continue
            index = key_index(key)
            verdict = unframe(key, value)
            if isinstance(verdict, str):
                warnings.append(f"snapshot at index {index} failed verification ({verdict}); "
                                "falling back to the older snapshot")
                bad.append(index)
                continue
            if index > self._last_index:
                warnings.append(f"snapshot at index {index} is past the log's last index "
                                f"{self._last_index}; falling back to the older snapshot")
                bad.append(index)
                continue
            if verdict.startswith(PARTS_TAG):
                whole = self._assemble(key, verdict)
                if isinstance(whole, str):
                    warnings.append(f"snapshot at index {index} failed verification ({whole}); "
                                    "falling back to the older snapshot")
                    bad.append(index)
                    continue
                chosen = (index, whole)
            else:
                chosen = (index, iter([verdict]))
            break
        self._bad_snapshot_indexes = bad
        self._snapshot_indexes = [i for i in self._snapshot_indexes if i not in bad]
        start = chosen[0] + 1 if chosen else 1
        self._check_first_record(start, warnings)
        return Recovery(
            snapshot_index=chosen[0] if chosen else None,
            snapshot_parts=chosen[1] if chosen else iter(()),
            records=self._iter_records(start, self._last_index),
            last_index=self._last_index,
            warnings=tuple(warnings),
        )

    def _assemble(self, key: bytes, manifest: bytes) -> Iterator[bytes] | str:
        """A parted snapshot's parts, verified here and read again one at a time as they are
        consumed, or a sentence saying why they fail verification. The check reads the map in
        place (no copy): recovery never holds the snapshot's bytes beside the state they are
        decoded into (246 MB at a million cells, the peak of a recovery from a snapshot)."""
        if len(manifest) != PARTS_MANIFEST.size:
            return f"a parts manifest of {len(manifest)} bytes"
        _, parts, total, crc = PARTS_MANIFEST.unpack(manifest)
        size, actual = 0, 0
        try:
            with self._env.begin(db=self._parts, buffers=True) as txn:
                for part in range(parts):
                    pkey = key + part.to_bytes(4, "big")
                    value = txn.get(pkey)
                    if value is None:
                        return f"part {part} of {parts} is missing"
                    verdict = unframe(pkey, value)
                    if isinstance(verdict, str):
                        return f"part {part}: {verdict}"
                    size += len(verdict)
                    actual = zlib.crc32(verdict, actual)
                    del value, verdict  # views into the map: not kept past the transaction
        except lmdb.Error as e:
            raise _wrap(e, "reading snapshot parts", self._wal_dir) from e
        if size != total or actual != crc:
            return f"its {parts} parts hold {size} bytes that do not match the manifest"
        return self._read_parts(key, parts)

    def _read_parts(self, key: bytes, parts: int) -> Iterator[bytes]:
        """The verified parts again, each a copy out of one read transaction (what was verified is
        what is read: a writer's later changes are not seen). A part that fails now fails loudly."""
        index = key_index(key)
        try:
            with self._env.begin(db=self._parts) as txn:
                for part in range(parts):
                    pkey = key + part.to_bytes(4, "big")
                    value = txn.get(pkey)
                    verdict = "it is missing" if value is None else unframe(pkey, value)
                    if isinstance(verdict, str):
                        raise StoreCorrupt(f"snapshot at index {index}, part {part} of {parts}, changed "
                                           f"after it was verified: {verdict}", self._wal_dir, index=index)
                    yield verdict
        except lmdb.Error as e:
            raise _wrap(e, "reading snapshot parts", self._wal_dir) from e

    def _check_first_record(self, start: int, warnings: list[str]) -> None:
        """Fail at `load`, not mid-fold, when the log does not begin where recovery needs it."""
        if start > self._last_index:
            return
        try:
            with self._env.begin(db=self._log) as txn:
                cursor = txn.cursor()
                first = key_index(cursor.key()) if cursor.first() else None
        except lmdb.Error as e:
            raise _wrap(e, "reading the log", self._wal_dir) from e
        if first is None or first > start:
            why = "; ".join(warnings) or "no snapshot"
            raise StoreCorrupt(
                f"log record {start} is missing (the log starts at {first}) and no valid "
                f"snapshot covers it ({why})", self._wal_dir, index=start)

    def _iter_records(self, start: int, end: int) -> Iterator[tuple[int, bytes]]:
        expected = start
        while expected <= end:
            batch: list[tuple[int, bytes]] = []
            try:
                with self._env.begin(db=self._log) as txn:
                    cursor = txn.cursor()
                    if not cursor.set_range(index_key(expected)):
                        raise StoreCorrupt(
                            f"log record {expected} is missing: the log ends before its last "
                            f"index {end}", self._wal_dir, index=expected)
                    for key, value in cursor:
                        index = key_index(key) if len(key) == KEY_BYTES else -1
                        if index != expected:
                            raise StoreCorrupt(
                                f"gap in the log: record {expected} is missing, the next key "
                                f"is {index if index >= 0 else key.hex()}",
                                self._wal_dir, index=expected)
                        verdict = unframe(key, value)
                        if isinstance(verdict, str):
                            raise StoreCorrupt(f"log record {index} failed verification: "
                                               f"{verdict}", self._wal_dir, index=index)
                        batch.append((index, verdict))
                        expected += 1
                        if expected > end or len(batch) >= STORE_RECOVERY_BATCH_RECORDS:
                            break
            except lmdb.Error as e:
                raise _wrap(e, f"reading log record {expected}", self._wal_dir) from e
            if expected <= end and len(batch) < STORE_RECOVERY_BATCH_RECORDS:
                raise StoreCorrupt(f"log record {expected} is missing: the log ends before its "
                                   f"last index {end}", self._wal_dir, index=expected)
            yield from batch

    # ---- the one write path --------------------------------------------------------------

    def _put(self, txn: lmdb.Transaction, key: bytes, value: bytes, db: object, *,
             append: bool = False) -> bool:
        """Every write goes through here: the seam where tests inject a failing disk."""
        return txn.put(key, value, db=db, append=append)

    def _commit(self, txn: lmdb.Transaction) -> None:
        txn.commit()

    def _check_usable(self) -> None:
        assert not self._closed, "store used after close"
        if self._failed is not None:
            # LMDB may be in an undefined state after a failed commit: fail-stop, never retry.
            raise StoreIOError(f"store unusable after an earlier failure ({self._failed.what})",
                               self._wal_dir, errno=self._failed.errno)

    def _write(self, body: Callable[[lmdb.Transaction], None], what: str) -> None:
        """Run `body` in one write transaction and commit it; on a full map, grow and retry.

        Every growth doubles the map and is followed by one retry, so the loop ends at the
        ceiling with `StoreFull`. An aborted transaction leaves nothing behind.
        """
        self._check_usable()
        assert not self._readonly, f"{what}: a read-only view of the store (open_reader) writes nothing"
        while True:
            txn = self._env.begin(write=True)
            try:
                body(txn)
                self._commit(txn)
                return
            except lmdb.MapFullError:
                _abort_quietly(txn)
                self._grow_map(what)
            except (lmdb.Error, OSError) as e:
                _abort_quietly(txn)
                err = _wrap(e, what, self._wal_dir)
                if isinstance(err, StoreIOError):
                    self._failed = err
                raise err from e
            except BaseException:
                _abort_quietly(txn)
                raise

    def probe_write(self) -> None:
        """One small write transaction (a key of its own in meta, put and deleted): whether the
        disk takes writes again. Raises a StorageError as `append` does."""
        def body(txn: lmdb.Transaction) -> None:
            self._put(txn, META_PROBE, b"probe" * 200, self._meta)
            txn.delete(META_PROBE, db=self._meta)
        self._write(body, "probing whether the disk takes writes again")

    def reopen(self) -> None:
        """After a failed commit LMDB's environment is not to be trusted: close it and open the
        data dir's log again (the kernel lock stays held), so reads, and later writes, go on. The
        log must end where this store believes it does: else StoreCorrupt (fail-stop)."""
        with self._copy_lock:
            self._env.close()
            try:
                self._env = lmdb.open(str(self._wal_dir), subdir=True, max_dbs=MAX_DBS,
                                      map_size=self._map_size_bytes, sync=True, metasync=True, writemap=False,
                                      map_async=False, lock=True)
                self._env.reader_check()
                with self._env.begin(write=True) as txn:
                    dbs = (self._env.open_db(DB_LOG, txn=txn), self._env.open_db(DB_SNAP, txn=txn),
                           self._env.open_db(DB_META, txn=txn), self._env.open_db(DB_SNAP_PARTS, txn=txn))
                    last_index, snapshot_indexes = _check_layout(txn, dbs, self._wal_dir)
            except (lmdb.Error, OSError) as e:
                raise _wrap(e, "opening the write-ahead log again", self._wal_dir) from e
        if last_index != self._last_index:
            raise StoreCorrupt(f"the log ends at {last_index} after a failed write, not at the committed "
                               f"{self._last_index}", self._wal_dir, index=last_index)
        self._log, self._snap, self._meta, self._parts = dbs
        self._snapshot_indexes = snapshot_indexes
        self._failed = None

    def _grow_map(self, what: str) -> None:
        current = self._map_size_bytes
        ceiling = self._map_size_bytes_max
        if current >= ceiling:
            mib = ceiling / (1 << 20)
            raise StoreFull(
                f"the LMDB map is full at its ceiling of {ceiling} bytes ({mib:g} MiB) while "
                f"{what}; nothing was written", self._wal_dir,
                advice=(f"restart with a larger --map-size-mb (now {mib:g}, e.g. "
                        f"--map-size-mb {max(2 * ceiling >> 20, 1)}) on a disk with room"))
        grown = min(current * 2, ceiling)
        try:
            with self._copy_lock:  # no backup's read transaction may be open (module rules)
                self._env.set_mapsize(grown)
        except lmdb.Error as e:
            raise _wrap(e, f"growing the LMDB map to {grown} bytes", self._wal_dir) from e
        self._map_size_bytes = grown


def _abort_quietly(txn: lmdb.Transaction) -> None:
    try:
        txn.abort()
    except lmdb.Error:
        pass  # A transaction whose commit failed is already gone.


def _wrap(e: BaseException, what: str, path: Path) -> StorageError:
    if isinstance(e, StorageError):
        return e
    if isinstance(e, lmdb.MapFullError):
        return StoreFull(f"{what}: the LMDB map is full", path,
                         advice="restart with a larger --map-size-mb")
    if isinstance(e, _CORRUPTION_ERRORS):
        return StoreCorrupt(f"{what}: LMDB reports {type(e).__name__}: {e}", path)
    if isinstance(e, lmdb.DiskError):  # MDB's ENOSPC
        return StoreIOError(f"{what}: disk full ({e})", path, errno=errno_mod.ENOSPC)
    if isinstance(e, OSError):
        return StoreIOError(f"{what}: {e.strerror or e}", path, errno=e.errno)
    return StoreIOError(f"{what}: LMDB reports {type(e).__name__}: {e}", path)


def _check_layout(txn: lmdb.Transaction, dbs: tuple[object, object, object, object],
                  wal_dir: Path) -> tuple[int, list[int]]:
    """Stamp a new store; for an existing one, agree the log's last key with `meta`."""
    log, snap, meta, _parts = dbs
    stored_format = txn.get(META_FORMAT, db=meta)
    cursor = txn.cursor(db=log)
    last_key = cursor.key() if cursor.last() else None
    if stored_format is None:
        if last_key is not None or txn.cursor(db=snap).first():
            raise StoreCorrupt("write-ahead log has records but no format stamp", wal_dir)
        txn.put(META_FORMAT, STORE_FORMAT, db=meta)
        txn.put(META_LAST_INDEX, index_key(0), db=meta)
        return 0, []
    if stored_format != STORE_FORMAT:
        raise StoreCorrupt(f"unknown store format {stored_format!r} (expected "
                           f"{STORE_FORMAT!r})", wal_dir)
    raw_last = txn.get(META_LAST_INDEX, db=meta)
    if raw_last is None or len(raw_last) != KEY_BYTES:
        raise StoreCorrupt("meta has no valid last index", wal_dir)
    last_index = key_index(raw_last)
    if last_key is None or len(last_key) != KEY_BYTES:
        if last_index != 0:
            raise StoreCorrupt(f"the log is empty but meta says its last index is {last_index}",
                               wal_dir, index=last_index)
    elif key_index(last_key) != last_index:
        raise StoreCorrupt(f"the log ends at {key_index(last_key)} but meta says "
                           f"{last_index}", wal_dir, index=min(last_index, key_index(last_key)))
    snapshot_indexes = sorted(key_index(k) for k, _ in txn.cursor(db=snap) if len(k) == KEY_BYTES)
    return last_index, snapshot_indexes[-SNAPSHOTS_KEPT:]


def _lock_data_dir(data_dir: Path) -> int:
    """Take the kernel lock on data_dir/LOCK and write our pid; refuse with the owner's pid."""
    path = data_dir / LOCK_FILE_NAME
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        # O_CLOEXEC: a child process (a forked helper) must not inherit, and so keep, the lock.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StoreIOError(f"opening the lock file: {e.strerror or e}", path, errno=e.errno) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_owner_pid(fd)
        os.close(fd)
        raise StoreLocked(path, pid) from None
    except OSError as e:
        os.close(fd)
        raise StoreIOError(f"locking: {e.strerror or e}", path, errno=e.errno) from e
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as e:
        os.close(fd)
        raise StoreIOError(f"writing the owner pid: {e.strerror or e}", path,
                           errno=e.errno) from e
    return fd


def _read_owner_pid(fd: int) -> int | None:
    for _ in range(LOCK_PID_READ_TRIES):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return int(text)
        time.sleep(LOCK_PID_READ_PAUSE_S)
    return None


