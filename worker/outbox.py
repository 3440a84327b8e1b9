"""The worker's durable state directory: outbox, assignments, incarnation, credential.

Rules. A finished cell is never lost: its artifact files are copied into a content-addressed
store and made durable (file fsync, rename, directory fsync) before one LMDB transaction
records the report that references them, and `put_report` returns only after that commit.
An entry leaves the outbox only by `ack` (or `dead_letter`, which keeps it aside). An
acknowledged entry is kept, with its files, for a retention window bounded in age, bytes and
count (`kept`): a coordinator restored from a backup may have lost it with its log's tail, and
`begin_epoch` puts every kept entry back in the outbox, to offer again, when the coordinator's
epoch changes. Every
artifact file is referenced by a count kept in the same transaction as the entries; files
are deleted only after the commit that drops their last reference, so a crash can leave an
unreferenced file or a temporary file behind, never an entry without its file, and `open`
sweeps both. One state directory belongs to one worker process at a time (a kernel
`flock`, released by the kernel when the owner dies) and to one worker id forever.

Group commit. The `*_async` entry points queue their operation for one writer thread, which
applies everything queued (and whatever arrives within OUTBOX_GROUP_COMMIT_WAIT_MS, a window
an urgent operation, one a slot waits on, ends at once) in one write transaction and one
fsync, each operation in a nested transaction of its own. A caller
resumes only after that commit: the same promise as the synchronous methods, at one fsync
and one hop back to the event loop per batch instead of per operation.

Layout under `state_dir`:

    LOCK                       flock held while open; the owner's pid inside
    credential                 the worker's token, mode 0600, written atomically
    db/                        LMDB environment (tables listed at `_DBS`)
    artifacts/sha256/ab/cdef…  content-addressed files: hex[:2] / hex[2:]
    artifacts/tmp/             copies in progress; anything here at open is torn

Records are opaque bytes (the session encodes protobuf); this module stores and returns
them. Keys for ids are the SHA-256 of the id, so an id of any length fits LMDB's key limit.
Storage failures (disk full, map full, I/O errors) raise `OutboxStorageError` naming the
path and what to do; the failed transaction is aborted, so nothing partial is visible.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import queue
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import lmdb

from common.durable import fsync_dir as _fsync_dir
from common.evidence import ArtifactRef
from common.ids import DIGEST_PREFIX, AssignmentId, AttemptId, Digest, WorkerId, is_digest
from common.limits import (
    KEPT_REPORTS_BYTES_DEFAULT,
    KEPT_REPORTS_MAX,
    KEPT_AGE_CHECK_MS,
    KEPT_REPORTS_MS_DEFAULT,
    ARTIFACT_BYTES_MAX,
    ARTIFACT_COPY_CHUNK_BYTES,
    ARTIFACTS_PER_REPORT_MAX,
    DEAD_LETTERS_MAX,
    FINISHED_ASSIGNMENTS_KEPT_MAX,
    OUTBOX_ENTRIES_MAX,
    OUTBOX_GROUP_COMMIT_OPS_MAX,
    OUTBOX_GROUP_COMMIT_WAIT_MS,
    WORKER_RECORD_BYTES_MAX,
    WORKER_STATE_MAP_BYTES,
)

log = logging.getLogger(__name__)

__all__ = [
    "ArtifactTooLarge",
    "AssignmentConflict",
    "DeadLetter",
    "Keeping",
    "OutboxConflict",
    "OutboxEntry",
    "OutboxFull",
    "OutboxStorageError",
    "StateDirLocked",
    "StateError",
    "WorkerIdMismatch",
    "WorkerState",
]

# Bumped on any change to the on-disk layout; an unknown format is refused at open.
STATE_FORMAT = b"1"

_DBS = (
    b"meta",  # format, incarnation, worker_id, sequence counters
    b"outbox",  # u64 seq -> entry record (pending, in replay order)
    b"dead",  # u64 seq -> dead-letter record (the entry's own seq, never reused)
    b"by_attempt",  # sha256(attempt id) -> state byte (P pending, D dead, K kept) + u64 seq
    b"refs",  # digest (ascii) -> u64 number of references from pending and dead entries
    b"assign",  # u64 seq -> assignment record (active, in insertion order)
    b"assign_by_id",  # sha256(assignment id) -> u64 seq
    b"finished",  # u64 counter -> assignment id (bounded ring of finished ids)
    b"finished_by_id",  # sha256(assignment id) -> u64 counter
    b"kept",  # u64 seq -> acknowledged entry record + u64 acked_ms (in put order)
)

_PENDING = b"P"
_DEAD = b"D"
_KEPT = b"K"
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


# --- errors ----------------------------------------------------------------------------


class StateError(Exception):
    """Base of every expected failure of the state directory."""


class StateDirLocked(StateError):
    """Another live process holds the state directory."""

    def __init__(self, state_dir: Path, pid: int | None) -> None:
        self.state_dir = state_dir
        self.pid = pid
        owner = f"pid {pid}" if pid is not None else "a process whose pid is not yet written"
        super().__init__(
            f"state directory {state_dir} is in use by {owner}; one state directory serves "
            "one worker process: stop that process or give this one its own --state-dir"
        )


class WorkerIdMismatch(StateError):
    def __init__(self, state_dir: Path, bound: str, requested: str) -> None:
        self.bound = bound
        self.requested = requested
        super().__init__(
            f"state directory {state_dir} belongs to worker id {bound!r}, not {requested!r}; "
            "use that worker id or another --state-dir"
        )


class OutboxConflict(StateError):
    """The same attempt put again with different content: a bug upstream, kept out."""


class AssignmentConflict(StateError):
    """The same assignment id recorded again with a different payload."""


class OutboxFull(StateError):
    pass


class ArtifactTooLarge(StateError):
    pass


class OutboxStorageError(StateError):
    """The disk, the file system or the LMDB map failed; the operation changed nothing.
    `disk_full`: the file system had no room (the worker waits for space instead of stopping)."""

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


# How often a group commit that failed for a full disk is tried again.
DISK_FULL_RETRY_S = 0.5
# An I/O error on a file system with less free space than this is a full disk, not a failing one
# (LMDB's commit on a full file system fails with EIO as often as with ENOSPC).
DISK_FULL_FREE_BYTES = 1 << 20


def free_bytes(path: Path) -> int | None:
    """Free space for this process on the file system of `path`; None when it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


# --- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    seq: int
    attempt_id: AttemptId
    assignment_id: AssignmentId
    payload: bytes
    artifacts: tuple[ArtifactRef, ...]
    # Written by the put that returned it (not an identical earlier entry returned again, nor
    # one read back): the session hands such an entry to its stream's pump without reading
    # the outbox again. Not part of what was reported, nor stored.
    fresh: bool = field(default=False, compare=False)

    def same_content(self, other: OutboxEntry) -> bool:
        """Equality of what was reported; `seq` is where it was queued, not what it says."""
        return (
            self.attempt_id == other.attempt_id
            and self.assignment_id == other.assignment_id
            and self.payload == other.payload
            and self.artifacts == other.artifacts
        )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    entry: OutboxEntry
    reason: str
    dead_at_ms: int


def _pack(*fields: bytes) -> bytes:
    return b"".join(_U32.pack(len(f)) + f for f in fields)


def _unpack(data: bytes) -> list[bytes]:
    out: list[bytes] = []
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        (n,) = _U32.unpack_from(view, pos)
        pos += _U32.size
        assert pos + n <= len(view), "truncated record in the state database"
        out.append(bytes(view[pos : pos + n]))
        pos += n
    return out


def _encode_entry(e: OutboxEntry) -> bytes:
    arts = _pack(
        *(_pack(a.name.encode(), a.digest.encode(), _U64.pack(a.size_bytes)) for a in e.artifacts)
    )
    return _pack(b"E1", e.attempt_id.encode(), e.assignment_id.encode(), e.payload, arts)


def _decode_entry(seq: int, data: bytes) -> OutboxEntry:
    tag, attempt, assignment, payload, arts = _unpack(data)
    assert tag == b"E1", f"unknown outbox record tag {tag!r}"
    artifacts = []
    for a in _unpack(arts):
        name, digest, size = _unpack(a)
        artifacts.append(ArtifactRef(name.decode(), Digest(digest.decode()), _U64.unpack(size)[0]))
    return OutboxEntry(
        seq, AttemptId(attempt.decode()), AssignmentId(assignment.decode()), payload, tuple(artifacts)
    )


def _encode_dead(d: DeadLetter) -> bytes:
    return _pack(b"D1", _encode_entry(d.entry), d.reason.encode(), _U64.pack(d.dead_at_ms))


def _decode_dead(seq: int, data: bytes) -> DeadLetter:
    tag, entry, reason, at = _unpack(data)
    assert tag == b"D1", f"unknown dead-letter record tag {tag!r}"
    return DeadLetter(_decode_entry(seq, entry), reason.decode(), _U64.unpack(at)[0])


def _kept_record(entry_record: bytes, acked_ms: int) -> bytes:
    """A kept entry from its outbox record as stored (not decoded and encoded again)."""
    return _pack(b"K1", entry_record, _U64.pack(acked_ms))


def _decode_kept(seq: int, data: bytes) -> tuple[OutboxEntry, int]:
    tag, entry, at = _unpack(data)
    assert tag == b"K1", f"unknown kept record tag {tag!r}"
    return _decode_entry(seq, entry), _U64.unpack(at)[0]


def _kept_bytes(e: OutboxEntry) -> int:
    """What a kept entry costs the disk: its record and its files (a file two entries share
    counts twice: the bound errs towards keeping less)."""
    return len(e.payload) + sum(a.size_bytes for a in e.artifacts)


@dataclass(frozen=True, slots=True)
class Keeping:
    """How much of what the coordinator acknowledged a worker keeps, to offer again after a
    restore: the oldest entry goes first past any bound; all zero keeps nothing."""

    ms: int = KEPT_REPORTS_MS_DEFAULT
    bytes: int = KEPT_REPORTS_BYTES_DEFAULT
    entries: int = KEPT_REPORTS_MAX

    @property
    def anything(self) -> bool:
        return self.ms > 0 and self.bytes > 0 and self.entries > 0


def _id_key(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _check_id(kind: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{kind} must be a non-empty string, got {value!r}")


def _check_record(kind: str, payload: bytes) -> None:
    if not isinstance(payload, bytes):
        raise TypeError(f"{kind} payload must be bytes, got {type(payload).__name__}")
    if len(payload) > WORKER_RECORD_BYTES_MAX:
        raise ValueError(
            f"{kind} payload of {len(payload)} bytes exceeds WORKER_RECORD_BYTES_MAX "
            f"({WORKER_RECORD_BYTES_MAX})"
        )


# --- file helpers ----------------------------------------------------------------------




def _mkdir_durable(path: Path, mode: int = 0o700) -> None:
    """Create `path` (and missing parents) and make each new name durable in its parent."""
    if path.is_dir():
        return
    _mkdir_durable(path.parent, mode)
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        return
    _fsync_dir(path.parent)


def _storage_error(path: Path, action: str, exc: BaseException) -> OutboxStorageError:
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc)
    if not full and (isinstance(exc, lmdb.DiskError) or isinstance(exc, OSError) and exc.errno == errno.EIO
                     or "Input/output error" in str(exc)):
        room = free_bytes(path if path.exists() else path.parent)
        full = room is not None and room < DISK_FULL_FREE_BYTES
    if isinstance(exc, lmdb.MapFullError):
        hint = (
            "the state database map is full: let the coordinator acknowledge pending reports, "
            "or raise WORKER_STATE_MAP_BYTES"
        )
    elif full:
        hint = "the disk is full: free space on that file system; the worker waits for it and goes on"
    else:
        hint = "check the disk and the file system, then restart the worker"
    return OutboxStorageError(f"could not {action} at {path}: {exc}; {hint}", disk_full=full)


@dataclass(slots=True)
class _Op:
    """One group-committed operation: its body runs inside the batch's transaction and returns
    (value, digests freed); `fut` is resolved on `loop` after the commit."""

    action: str
    body: Callable[[lmdb.Transaction], tuple[Any, Sequence[Digest]]]
    loop: asyncio.AbstractEventLoop
    fut: asyncio.Future[Any]
    urgent: bool = False  # a slot waits on it: it cuts the group-commit window short


def _resolve(done: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in done:
        if fut.done():
            continue  # its waiter was cancelled; the operation is committed all the same
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


@dataclass(slots=True)
class _Staged:
    """One artifact copied and hashed into artifacts/tmp, not yet placed."""

    name: str
    digest: Digest
    size_bytes: int
    tmp_path: Path
    tmp_file: IO[bytes]


# --- the state directory ---------------------------------------------------------------


class WorkerState:
    """One open state directory. Thread-safe: writes are serialised by one in-process lock,
    which also orders artifact placement and garbage collection against each other."""

    def __init__(self, state_dir: Path, lock_fd: int, env: lmdb.Environment, incarnation: int,
                 entries_max: int, keeping: Keeping = Keeping()) -> None:
        self.state_dir = state_dir
        self._lock_fd: int | None = lock_fd
        self._env: lmdb.Environment | None = env
        self._db = {name.decode(): env.open_db(name) for name in _DBS}
        self._incarnation = incarnation
        self._entries_max = entries_max
        self.keeping = keeping
        self._kept_aged_ms = 0  # when the oldest kept entry's age was last looked at (_prune_kept)
        self._write_lock = threading.Lock()
        self._db_path = state_dir / "db"
        self._cas_dir = state_dir / "artifacts" / "sha256"
        self._tmp_dir = state_dir / "artifacts" / "tmp"
        self._credential_path = state_dir / "credential"
        self._ops: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._urgent = threading.Event()  # an urgent operation is queued: the window ends
        self._writer: threading.Thread | None = None
        self._writer_start = threading.Lock()
        self._stopping = threading.Event()
        # Set while a group commit waits for room on a full disk: what it said (for the status).
        self.disk_full = ""

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        state_dir: Path,
        *,
        worker_id: WorkerId | None = None,
        map_bytes: int = WORKER_STATE_MAP_BYTES,
        entries_max: int = OUTBOX_ENTRIES_MAX,
        keeping: Keeping = Keeping(),
    ) -> WorkerState:
        """Lock, open, count this incarnation, sweep leftovers, and bind `worker_id` if given.

        `map_bytes` and `entries_max` exist for tests; production uses the named limits.
        """
        state_dir = Path(state_dir)
        try:
            _mkdir_durable(state_dir)
        except OSError as exc:
            raise _storage_error(state_dir, "create the state directory", exc) from exc
        lock_fd = cls._acquire_lock(state_dir)
        try:
            try:
                for sub in (state_dir / "db", state_dir / "artifacts" / "sha256",
                            state_dir / "artifacts" / "tmp"):
                    _mkdir_durable(sub)
                env = lmdb.open(
                    str(state_dir / "db"),
                    map_size=map_bytes,
                    max_dbs=len(_DBS),
                    subdir=True,
                    sync=True,
                    metasync=True,
                    readahead=False,
                    meminit=False,
                )
            except (OSError, lmdb.Error) as exc:
                raise _storage_error(state_dir / "db", "open the state database", exc) from exc
            try:
                incarnation = cls._begin_incarnation(env, state_dir)
                state = cls(state_dir, lock_fd, env, incarnation, entries_max, keeping)
            except BaseException:
                env.close()
                raise
        except BaseException:
            os.close(lock_fd)
            raise
        try:
            state._sweep()
            if worker_id is not None:
                state.bind_worker_id(worker_id)
        except BaseException:
            state.close()
            raise
        log.info("worker state opened", extra={"state_dir": str(state_dir),
                                               "incarnation": incarnation, "depth": state.depth})
        return state

    @staticmethod
    def _acquire_lock(state_dir: Path) -> int:
        path = state_dir / "LOCK"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _storage_error(path, "open the lock file", exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise StateDirLocked(state_dir, int(text) if text.isdigit() else None) from None
        except OSError as exc:
            os.close(fd)
            raise _storage_error(path, "lock the state directory", exc) from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise _storage_error(path, "write the lock owner", exc) from exc
        return fd

    @staticmethod
    def _begin_incarnation(env: lmdb.Environment, state_dir: Path) -> int:
        meta = env.open_db(b"meta")
        for name in _DBS:
            env.open_db(name)
        try:
            with env.begin(write=True, db=meta) as txn:
                fmt = txn.get(b"format")
                if fmt is None:
                    txn.put(b"format", STATE_FORMAT)
                elif fmt != STATE_FORMAT:
                    raise StateError(
                        f"state directory {state_dir} has format {fmt.decode(errors='replace')}, "
                        f"this worker reads format {STATE_FORMAT.decode()}; use a matching worker "
                        "version or drain and remove the directory"
                    )
                raw = txn.get(b"incarnation")
                incarnation = (_U64.unpack(raw)[0] if raw else 0) + 1
                txn.put(b"incarnation", _U64.pack(incarnation))
        except lmdb.Error as exc:
            raise _storage_error(state_dir / "db", "record the incarnation", exc) from exc
        return incarnation

    def close(self) -> None:
        """Close the database and release the lock. Idempotent."""
        self._stop_writer()
        if self._env is not None:
            self._env.close()
            self._env = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the only descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> WorkerState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WorkerState({str(self.state_dir)!r}, incarnation={self._incarnation})"

    @property
    def incarnation(self) -> int:
        """Counts opens of this directory from 1; a restarted process has a larger one."""
        return self._incarnation

    # -- transactions ------------------------------------------------------------------

    def _live_env(self) -> lmdb.Environment:
        assert self._env is not None, "worker state used after close()"
        return self._env

    @contextlib.contextmanager
    def _read(self) -> Iterator[lmdb.Transaction]:
        try:
            with self._live_env().begin(write=False) as txn:
                yield txn
        except lmdb.Error as exc:
            raise _storage_error(self._db_path, "read the state database", exc) from exc

    @contextlib.contextmanager
    def _write(self, action: str) -> Iterator[lmdb.Transaction]:
        """A write transaction; the caller holds `_write_lock`. Aborted on any exception."""
        assert self._write_lock.locked()
        try:
            with self._live_env().begin(write=True) as txn:
                yield txn
        except lmdb.Error as exc:
            raise _storage_error(self._db_path, action, exc) from exc

    def _next(self, txn: lmdb.Transaction, counter: bytes) -> int:
        raw = txn.get(counter, db=self._db["meta"])
        value = (_U64.unpack(raw)[0] if raw else 0) + 1
        txn.put(counter, _U64.pack(value), db=self._db["meta"])
        return value

    # -- worker id ---------------------------------------------------------------------

    @property
    def worker_id(self) -> WorkerId | None:
        with self._read() as txn:
            raw = txn.get(b"worker_id", db=self._db["meta"])
        return WorkerId(raw.decode()) if raw is not None else None

    def bind_worker_id(self, worker_id: WorkerId) -> None:
        """Persist the id on first use; a different id later raises `WorkerIdMismatch`."""
        _check_id("worker id", worker_id)
        with self._write_lock, self._write("bind the worker id") as txn:
            raw = txn.get(b"worker_id", db=self._db["meta"])
            if raw is None:
                txn.put(b"worker_id", worker_id.encode(), db=self._db["meta"])
            elif raw.decode() != worker_id:
                raise WorkerIdMismatch(self.state_dir, raw.decode(), worker_id)

    # -- credential --------------------------------------------------------------------

    def save_credential(self, token: str) -> None:
        """Write the token atomically with mode 0600. The token is never logged."""
        if not isinstance(token, str) or not token:
            raise ValueError("a credential must be a non-empty string")
        path = self._credential_path
        try:
            # mkstemp creates the file with mode 0600 before any byte is written.
            fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".credential.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(token.encode())
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            _fsync_dir(self.state_dir)
        except OSError as exc:
            raise _storage_error(path, "save the credential", exc) from exc

    def load_credential(self) -> str | None:
        path = self._credential_path
        try:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode & 0o777
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _storage_error(path, "read the credential", exc) from exc
        if mode & 0o077:
            log.warning("credential file is readable by others; fix with chmod 600",
                        extra={"path": str(path), "mode": oct(mode)})
        return data.decode() or None

    # -- assignments -------------------------------------------------------------------

    def record_assignment(self, assignment_id: AssignmentId, payload: bytes) -> bool:
        """Durably record an assignment before it runs.

        Returns False for a duplicate push (the id is already active with the same payload,
        or already finished): nothing is written. A different payload for an active id
        raises `AssignmentConflict`.
        """
        with self._write_lock, self._write("record an assignment") as txn:
            return self._record_assignment(txn, assignment_id, payload)

    def _record_assignment(self, txn: lmdb.Transaction, assignment_id: AssignmentId, payload: bytes) -> bool:
        _check_id("assignment id", assignment_id)
        _check_record("assignment", payload)
        key = _id_key(assignment_id)
        if txn.get(key, db=self._db["finished_by_id"]) is not None:
            return False
        raw = txn.get(key, db=self._db["assign_by_id"])
        if raw is not None:
            held_id, held_payload = _unpack(txn.get(raw, db=self._db["assign"]))
            assert held_id.decode() == assignment_id, "assignment id hash collision"
            if held_payload != payload:
                raise AssignmentConflict(
                    f"assignment {assignment_id!r} is already recorded with a different "
                    "payload; an assignment id names one dispatch and never changes"
                )
            return False
        seq = _U64.pack(self._next(txn, b"assign_seq"))
        txn.put(seq, _pack(assignment_id.encode(), payload), db=self._db["assign"])
        txn.put(key, seq, db=self._db["assign_by_id"])
        return True

    def assignments(self) -> list[tuple[AssignmentId, bytes]]:
        """Active assignments in the order they were recorded."""
        with self._read() as txn:
            out = []
            for _, value in txn.cursor(db=self._db["assign"]):
                aid, payload = _unpack(value)
                out.append((AssignmentId(aid.decode()), payload))
        return out

    def finish_assignment(self, assignment_id: AssignmentId) -> None:
        """Mark an assignment finished (idempotent); its id is kept in a bounded ring."""
        with self._write_lock, self._write("finish an assignment") as txn:
            self._finish_assignment(txn, assignment_id)

    def _finish_assignment(self, txn: lmdb.Transaction, assignment_id: AssignmentId) -> None:
        _check_id("assignment id", assignment_id)
        key = _id_key(assignment_id)
        self._drop_active(txn, key)
        if txn.get(key, db=self._db["finished_by_id"]) is not None:
            return
        counter = _U64.pack(self._next(txn, b"finished_seq"))
        txn.put(counter, assignment_id.encode(), db=self._db["finished"])
        txn.put(key, counter, db=self._db["finished_by_id"])
        excess = txn.stat(self._db["finished"])["entries"] - FINISHED_ASSIGNMENTS_KEPT_MAX
        if excess > 0:
            cur = txn.cursor(db=self._db["finished"])
            cur.first()
            for _ in range(excess):
                old_id = cur.value()
                txn.delete(_id_key(old_id.decode()), db=self._db["finished_by_id"])
                cur.delete()

    def was_finished(self, assignment_id: AssignmentId) -> bool:
        with self._read() as txn:
            return txn.get(_id_key(assignment_id), db=self._db["finished_by_id"]) is not None

    def drop_assignment(self, assignment_id: AssignmentId) -> None:
        """Forget an active assignment without marking it finished (revoked, expired)."""
        with self._write_lock, self._write("drop an assignment") as txn:
            self._drop_active(txn, _id_key(assignment_id))

    def _drop_active(self, txn: lmdb.Transaction, key: bytes) -> None:
        seq = txn.get(key, db=self._db["assign_by_id"])
        if seq is not None:
            txn.delete(seq, db=self._db["assign"])
            txn.delete(key, db=self._db["assign_by_id"])

    # -- outbox: artifacts -------------------------------------------------------------

    def artifact_path(self, digest: Digest) -> Path:
        if not is_digest(digest):
            raise ValueError(f"not a sha256 digest: {digest!r}")
        hexpart = digest[len(DIGEST_PREFIX):]
        return self._cas_dir / hexpart[:2] / hexpart[2:]

    def _stage(self, name: str, src: Path) -> _Staged:
        """Copy `src` into artifacts/tmp while hashing it. Not yet durable, not yet placed.

        Errors reading `src` are the caller's and propagate as they are; errors writing
        the copy are storage errors.
        """
        with open(src, "rb") as source:
            try:
                fd, tmp = tempfile.mkstemp(dir=self._tmp_dir, suffix=".part")
            except OSError as exc:
                raise _storage_error(self._tmp_dir, "create an artifact copy", exc) from exc
            out = os.fdopen(fd, "wb")
            staged = _Staged(name, Digest(""), 0, Path(tmp), out)
            try:
                h = hashlib.sha256()
                size = 0
                while chunk := source.read(ARTIFACT_COPY_CHUNK_BYTES):
                    size += len(chunk)
                    if size > ARTIFACT_BYTES_MAX:
                        raise ArtifactTooLarge(
                            f"artifact {name!r} ({src}) exceeds ARTIFACT_BYTES_MAX "
                            f"({ARTIFACT_BYTES_MAX} bytes); compress it or report it unavailable"
                        )
                    h.update(chunk)
                    try:
                        out.write(chunk)
                    except OSError as exc:
                        raise _storage_error(Path(tmp), "copy an artifact", exc) from exc
                try:
                    out.flush()
                except OSError as exc:
                    raise _storage_error(Path(tmp), "copy an artifact", exc) from exc
            except BaseException:
                self._discard(staged)
                raise
        staged.digest = Digest(DIGEST_PREFIX + h.hexdigest())
        staged.size_bytes = size
        return staged

    @staticmethod
    def _discard(staged: _Staged) -> None:
        with contextlib.suppress(OSError):
            staged.tmp_file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged.tmp_path)

    def _place(self, staged: _Staged, placed: list[Digest]) -> None:
        """Make a staged copy durable under its digest, appending the digest to `placed`
        if this call created the file (an existing file with that digest is kept).

        The caller holds `_write_lock`, so no garbage collection runs between this and the
        commit that references the digest.
        """
        final = self.artifact_path(staged.digest)
        try:
            if final.is_file() and final.stat().st_size == staged.size_bytes:
                self._discard(staged)
                return
            os.fsync(staged.tmp_file.fileno())
            staged.tmp_file.close()
            _mkdir_durable(final.parent)
            os.replace(staged.tmp_path, final)
            placed.append(staged.digest)
            _fsync_dir(final.parent)
        except OSError as exc:
            self._discard(staged)
            raise _storage_error(final, "store an artifact", exc) from exc

    def _delete_unreferenced(self, txn: lmdb.Transaction | None, digests: Sequence[Digest]) -> None:
        """Delete artifact files whose digest has no reference (after the commit that said so)."""
        for digest in dict.fromkeys(digests):
            if txn is not None and txn.get(digest.encode(), db=self._db["refs"]) is not None:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.artifact_path(digest))

    def _add_refs(self, txn: lmdb.Transaction, artifacts: Sequence[ArtifactRef]) -> None:
        for a in artifacts:
            key = a.digest.encode()
            raw = txn.get(key, db=self._db["refs"])
            txn.put(key, _U64.pack((_U64.unpack(raw)[0] if raw else 0) + 1), db=self._db["refs"])

    def _drop_refs(self, txn: lmdb.Transaction, artifacts: Sequence[ArtifactRef]) -> list[Digest]:
        """Drop one reference per artifact; returns the digests left with none."""
        freed = []
        for a in artifacts:
            key = a.digest.encode()
            raw = txn.get(key, db=self._db["refs"])
            assert raw is not None, f"artifact {a.digest} referenced but not counted"
            count = _U64.unpack(raw)[0] - 1
            if count == 0:
                txn.delete(key, db=self._db["refs"])
                freed.append(a.digest)
            else:
                txn.put(key, _U64.pack(count), db=self._db["refs"])
        return freed

    # -- outbox: entries ---------------------------------------------------------------

    def put_report(
        self,
        attempt_id: AttemptId,
        assignment_id: AssignmentId,
        payload: bytes,
        files: Sequence[tuple[str, Path]],
    ) -> OutboxEntry:
        """Store a report and copies of its files; returns once all of it is durable.

        The same attempt put again with identical content (assignment, payload, files by
        name, digest and size) is a no-op returning the stored entry, pending or dead.
        Different content raises `OutboxConflict`; a full outbox raises `OutboxFull`.
        Either way, and on a storage error, nothing is written.
        """
        _check_id("attempt id", attempt_id)
        _check_id("assignment id", assignment_id)
        _check_record("report", payload)
        if len(files) > ARTIFACTS_PER_REPORT_MAX:
            raise ValueError(f"{len(files)} artifacts exceed ARTIFACTS_PER_REPORT_MAX "
                             f"({ARTIFACTS_PER_REPORT_MAX})")
        names = [name for name, _ in files]
        if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"artifact names must be distinct non-empty strings: {names!r}")
        key = _id_key(attempt_id)
        with self._read() as txn:
            if (txn.get(key, db=self._db["by_attempt"]) is None
                    and txn.stat(self._db["outbox"])["entries"] >= self._entries_max):
                raise self._full()

        staged: list[_Staged] = []
        try:
            for name, path in files:
                staged.append(self._stage(name, Path(path)))
        except BaseException:
            for s in staged:
                self._discard(s)
            raise
        artifacts = tuple(ArtifactRef(s.name, s.digest, s.size_bytes) for s in staged)

        with self._write_lock:
            placed: list[Digest] = []
            committed = False
            try:
                while staged:
                    self._place(staged.pop(0), placed)
                with self._write("record a report") as txn:
                    entry = self._put_entry(txn, key, attempt_id, assignment_id, payload, artifacts)
                committed = True
            finally:
                for s in staged:
                    self._discard(s)
                if not committed and placed:
                    # Files placed for an entry that was not written: drop them unless an
                    # older entry references the same digest.
                    with contextlib.suppress(OutboxStorageError), self._read() as rtxn:
                        self._delete_unreferenced(rtxn, placed)
        return entry

    def _put_entry(self, txn: lmdb.Transaction, key: bytes, attempt_id: AttemptId, assignment_id: AssignmentId,
                   payload: bytes, artifacts: tuple[ArtifactRef, ...]) -> OutboxEntry:
        """The write of `put_report`, inside the caller's transaction: checks first, then writes."""
        existing = self._lookup(txn, key)
        if existing is not None:
            candidate = OutboxEntry(existing.seq, attempt_id, assignment_id, payload, artifacts)
            if not existing.same_content(candidate):
                raise OutboxConflict(
                    f"attempt {attempt_id!r} is already in the outbox with different "
                    "content; one attempt has one report"
                )
            return existing
        if txn.stat(self._db["outbox"])["entries"] >= self._entries_max:
            raise self._full()
        seq = self._next(txn, b"outbox_seq")
        entry = OutboxEntry(seq, attempt_id, assignment_id, payload, artifacts, fresh=True)
        txn.put(_U64.pack(seq), _encode_entry(entry), db=self._db["outbox"])
        txn.put(key, _PENDING + _U64.pack(seq), db=self._db["by_attempt"])
        self._add_refs(txn, artifacts)
        return entry

    def _full(self) -> OutboxFull:
        return OutboxFull(
            f"the outbox at {self._db_path} holds {self._entries_max} unacknowledged reports "
            "(OUTBOX_ENTRIES_MAX); the coordinator has not acknowledged them: check the "
            "connection, and start no new work until it drains"
        )

    def _lookup(self, txn: lmdb.Transaction, key: bytes) -> OutboxEntry | None:
        """The pending or dead entry stored under an attempt key (a kept one is forgotten
        here: put again, an attempt is reported again)."""
        raw = txn.get(key, db=self._db["by_attempt"])
        if raw is None:
            return None
        state, seq = raw[:1], raw[1:]
        if state == _KEPT:
            self._drop_kept(txn, seq)
            return None
        if state == _PENDING:
            return _decode_entry(_U64.unpack(seq)[0], txn.get(seq, db=self._db["outbox"]))
        assert state == _DEAD, f"unknown attempt state {state!r}"
        return _decode_dead(_U64.unpack(seq)[0], txn.get(seq, db=self._db["dead"])).entry

    def pending(self, *, after_seq: int = 0, limit: int | None = None) -> list[OutboxEntry]:
        """Unacknowledged entries in the order they were put: the replay order.

        `after_seq` and `limit` page through a long outbox, so a replay can feed a bounded
        send queue without holding every payload in memory at once.
        """
        out: list[OutboxEntry] = []
        with self._read() as txn:
            cur = txn.cursor(db=self._db["outbox"])
            if not cur.set_range(_U64.pack(after_seq + 1)):
                return out
            for k, v in cur:
                if limit is not None and len(out) >= limit:
                    break
                out.append(_decode_entry(_U64.unpack(k)[0], v))
        return out

    def get(self, attempt_id: AttemptId) -> OutboxEntry | None:
        """The pending entry of an attempt, or None (never put, acknowledged or dead)."""
        with self._read() as txn:
            raw = txn.get(_id_key(attempt_id), db=self._db["by_attempt"])
            if raw is None or raw[:1] != _PENDING:
                return None
            return _decode_entry(_U64.unpack(raw[1:])[0], txn.get(raw[1:], db=self._db["outbox"]))

    @property
    def depth(self) -> int:
        """Number of pending entries."""
        with self._read() as txn:
            return txn.stat(self._db["outbox"])["entries"]

    def ack(self, attempt_id: AttemptId) -> bool:
        """Remove an acknowledged entry and the files nothing else references.

        False if the attempt is not pending (a repeated acknowledgement after a replay).
        """
        with self._write_lock:
            with self._write("acknowledge a report") as txn:
                found, freed = self._ack(txn, attempt_id)
            self._delete_unreferenced(None, freed)
        return found

    def _ack(self, txn: lmdb.Transaction, attempt_id: AttemptId) -> tuple[bool, list[Digest]]:
        """The write of `ack`: whether the attempt was pending, and the digests it freed
        (their files are deleted after the commit)."""
        key = _id_key(attempt_id)
        raw = txn.get(key, db=self._db["by_attempt"])
        if raw is None or raw[:1] != _PENDING:
            return False, []
        seq = raw[1:]
        record = txn.get(seq, db=self._db["outbox"])
        entry = _decode_entry(_U64.unpack(seq)[0], record)
        assert entry.attempt_id == attempt_id, "attempt id hash collision"
        txn.delete(seq, db=self._db["outbox"])
        if not self.keeping.anything:
            txn.delete(key, db=self._db["by_attempt"])
            return True, self._drop_refs(txn, entry.artifacts)
        now = time.time_ns() // 1_000_000
        txn.put(seq, _kept_record(record, now), db=self._db["kept"])
        txn.put(key, _KEPT + seq, db=self._db["by_attempt"])
        total = self._add_kept_bytes(txn, _kept_bytes(entry))
        return True, self._prune_kept(txn, now, total)

    # -- kept: what the coordinator acknowledged, for a restore --------------------------

    def _add_kept_bytes(self, txn: lmdb.Transaction, delta: int) -> int:
        raw = txn.get(b"kept_bytes", db=self._db["meta"])
        value = max(0, (_U64.unpack(raw)[0] if raw else 0) + delta)
        txn.put(b"kept_bytes", _U64.pack(value), db=self._db["meta"])
        return value

    def _drop_kept(self, txn: lmdb.Transaction, seq: bytes) -> list[Digest]:
        entry, _ = _decode_kept(_U64.unpack(seq)[0], txn.get(seq, db=self._db["kept"]))
        txn.delete(seq, db=self._db["kept"])
        txn.delete(_id_key(entry.attempt_id), db=self._db["by_attempt"])
        self._add_kept_bytes(txn, -_kept_bytes(entry))
        return self._drop_refs(txn, entry.artifacts)

    def _prune_kept(self, txn: lmdb.Transaction, now_ms: int, total: int) -> list[Digest]:
        """Drop the oldest kept entries past the age, byte and count bounds (`total`: the kept
        bytes). Within the byte and count bounds, the oldest entry's age is looked at once per
        KEPT_AGE_CHECK_MS (or the age bound, if shorter): reading and decoding it at every ack
        was a third of what keeping costs an ack, and the age bound is 72 h."""
        freed: list[Digest] = []
        k = self.keeping
        count = txn.stat(self._db["kept"])["entries"]
        if count <= k.entries and total <= k.bytes and now_ms - self._kept_aged_ms < min(KEPT_AGE_CHECK_MS, k.ms):
            return freed
        self._kept_aged_ms = now_ms
        cur = txn.cursor(db=self._db["kept"])
        while count and cur.first():
            entry, acked_ms = _decode_kept(_U64.unpack(cur.key())[0], cur.value())
            if count <= k.entries and total <= k.bytes and now_ms - acked_ms <= k.ms:
                break
            freed += self._drop_kept(txn, cur.key())
            total -= _kept_bytes(entry)
            count -= 1
        return freed

    def kept(self) -> list[tuple[OutboxEntry, int]]:
        """Acknowledged entries still kept, with when each was acknowledged, oldest first."""
        with self._read() as txn:
            return [_decode_kept(_U64.unpack(k)[0], v) for k, v in txn.cursor(db=self._db["kept"])]

    @property
    def offer_below_seq(self) -> int:
        """Pending entries below this seq are offers: they were put back by `begin_epoch`."""
        with self._read() as txn:
            raw = txn.get(b"offer_below", db=self._db["meta"])
        return _U64.unpack(raw)[0] if raw else 0

    def begin_epoch(self, epoch: str) -> int:
        """The coordinator's epoch as its Welcome says. When it differs from the last one seen
        (a restore from a backup), every kept entry goes back to the outbox, in its old place,
        to be offered again (entries below `offer_below_seq`); returns how many. The epoch is
        recorded in the same transaction."""
        with self._write_lock, self._write("record the coordinator's epoch") as txn:
            meta = self._db["meta"]
            raw = txn.get(b"epoch", db=meta)
            if raw is not None and raw.decode() == epoch:
                return 0
            txn.put(b"epoch", epoch.encode(), db=meta)
            if raw is None and not epoch:
                return 0  # the first coordinator this directory meets, never restored
            moved = 0
            cur = txn.cursor(db=self._db["kept"])
            for k, v in list(cur):
                entry, _ = _decode_kept(_U64.unpack(k)[0], v)
                txn.put(k, _encode_entry(entry), db=self._db["outbox"])
                txn.put(_id_key(entry.attempt_id), _PENDING + k, db=self._db["by_attempt"])
                txn.delete(k, db=self._db["kept"])
                moved += 1
            txn.put(b"kept_bytes", _U64.pack(0), db=meta)
            seq_raw = txn.get(b"outbox_seq", db=meta)
            txn.put(b"offer_below", _U64.pack((_U64.unpack(seq_raw)[0] if seq_raw else 0) + 1), db=meta)
            return moved

    def dead_letter(self, attempt_id: AttemptId, reason: str, *, now_ms: int | None = None) -> bool:
        """Set a pending entry aside with its reason, so it no longer blocks the queue.

        Its files are kept for an operator. Past DEAD_LETTERS_MAX the oldest dead letters
        are dropped with their files. False if the attempt is not pending.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError("a dead letter needs a reason")
        at = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        key = _id_key(attempt_id)
        freed: list[Digest] = []
        with self._write_lock:
            with self._write("dead-letter a report") as txn:
                raw = txn.get(key, db=self._db["by_attempt"])
                if raw is None or raw[:1] != _PENDING:
                    return False
                seq = raw[1:]
                entry = _decode_entry(_U64.unpack(seq)[0], txn.get(seq, db=self._db["outbox"]))
                txn.delete(seq, db=self._db["outbox"])
                txn.put(seq, _encode_dead(DeadLetter(entry, reason, at)), db=self._db["dead"])
                txn.put(key, _DEAD + seq, db=self._db["by_attempt"])
                excess = txn.stat(self._db["dead"])["entries"] - DEAD_LETTERS_MAX
                if excess > 0:
                    cur = txn.cursor(db=self._db["dead"])
                    cur.first()
                    for _ in range(excess):
                        old = _decode_dead(_U64.unpack(cur.key())[0], cur.value())
                        txn.delete(_id_key(old.entry.attempt_id), db=self._db["by_attempt"])
                        freed += self._drop_refs(txn, old.entry.artifacts)
                        cur.delete()
                        log.warning("oldest dead letter dropped",
                                    extra={"attempt_id": old.entry.attempt_id})
            self._delete_unreferenced(None, freed)
        log.warning("report dead-lettered", extra={"attempt_id": attempt_id, "reason": reason})
        return True

    def dead_letters(self) -> list[DeadLetter]:
        with self._read() as txn:
            return [_decode_dead(_U64.unpack(k)[0], v) for k, v in txn.cursor(db=self._db["dead"])]

    # -- group commit: the asynchronous entry points ------------------------------------
    #
    # One writer thread takes every operation queued (and whatever else arrives within
    # OUTBOX_GROUP_COMMIT_WAIT_MS of the first) and applies them in ONE write transaction,
    # each in a nested transaction of its own, then commits once: one fsync for the lot.
    # An operation's expected failure (a conflict, a full outbox, a bad id) aborts only its
    # nested transaction; a storage error aborts the whole batch and fails every operation
    # in it. Each waiting coroutine is resumed only after the commit, so "returns once
    # durable" holds for these exactly as for the synchronous methods; completions go back
    # to the event loop in one call per batch, not one thread hop per operation.

    async def put_report_async(self, attempt_id: AttemptId, assignment_id: AssignmentId, payload: bytes,
                               files: Sequence[tuple[str, Path]], *, urgent: bool = False) -> OutboxEntry:
        """`put_report`, group-committed. With files the copy and fsync of the files come
        first, so that path stays `put_report` in a thread of its own. `urgent`: the commit is
        not held for the group-commit window (the group's last report: its slot waits on it)."""
        if files:
            return await asyncio.to_thread(self.put_report, attempt_id, assignment_id, payload, files)
        _check_id("attempt id", attempt_id)
        _check_id("assignment id", assignment_id)
        _check_record("report", payload)
        key = _id_key(attempt_id)
        entry: OutboxEntry = await self._queue(
            "record a report", lambda txn: (self._put_entry(txn, key, attempt_id, assignment_id, payload, ()), ()),
            urgent=urgent)
        return entry

    async def ack_async(self, attempt_id: AttemptId) -> bool:
        """`ack`, group-committed (acks of one AckBatch share a transaction)."""
        found: bool = await self.ack_queued(attempt_id)
        return found

    def ack_queued(self, attempt_id: AttemptId) -> asyncio.Future[bool]:
        """`ack_async` queued at once, in call order with every other operation: the future of
        its commit, with no task to run it (the session settles an entry by this future)."""
        return self._queue("acknowledge a report", lambda txn: self._ack(txn, attempt_id))

    async def record_assignment_async(self, assignment_id: AssignmentId, payload: bytes) -> bool:
        """`record_assignment`, group-committed and urgent: its cells start after it."""
        fresh: bool = await self._queue("record an assignment",
                                        lambda txn: (self._record_assignment(txn, assignment_id, payload), ()),
                                        urgent=True)
        return fresh

    async def finish_assignment_async(self, assignment_id: AssignmentId) -> None:
        await self.finish_assignment_queued(assignment_id)

    def finish_assignment_queued(self, assignment_id: AssignmentId) -> asyncio.Future[None]:
        """`finish_assignment_async` queued at once, as `ack_queued`."""
        return self._queue("finish an assignment", lambda txn: (self._finish_assignment(txn, assignment_id), ()))

    def _queue(self, action: str, body: Callable[[lmdb.Transaction], tuple[Any, Sequence[Digest]]], *,
               urgent: bool = False) -> asyncio.Future[Any]:
        """Queue an operation for the writer thread; the future resolves after its commit."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if self._writer is None:
            self._start_writer()
        self._ops.put(_Op(action, body, loop, fut, urgent))
        if urgent:
            self._urgent.set()
        return fut

    def _start_writer(self) -> None:
        with self._writer_start:
            if self._writer is None:
                self._live_env()
                self._writer = threading.Thread(target=self._writer_main, name="outbox-writer", daemon=True)
                self._writer.start()

    def _stop_writer(self) -> None:
        if self._writer is not None:
            self._stopping.set()  # a commit waiting for room gives up: its callers get the error
            self._ops.put(None)
            self._writer.join()
            self._writer = None

    def _writer_main(self) -> None:
        stop = False
        while not stop:
            first = self._ops.get()
            if first is None:
                return
            ops = [first]
            # Sit out the window, then take what came: waiting on the queue instead would wake
            # this thread (and make it contend for the GIL) once per operation that arrives.
            # An urgent operation (a slot waits on it) is not held, and ends a window begun by
            # one that can wait: the worker's CPU per cell stays that of the window, and a
            # refill does not pay it twice (issue 26).
            if not first.urgent:
                self._urgent.wait(OUTBOX_GROUP_COMMIT_WAIT_MS / 1000)
            self._urgent.clear()  # set again by any urgent operation queued after this
            while len(ops) < OUTBOX_GROUP_COMMIT_OPS_MAX:
                try:
                    nxt = self._ops.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                ops.append(nxt)
            results = self._commit_group(ops)
            # A full disk fails the batch and changed nothing: the same operations are applied
            # again once there is room, their callers still waiting (the worker stays up).
            while (results and not self._stopping.is_set()
                   and all(not ok and isinstance(v, OutboxStorageError) and v.disk_full for ok, v in results)):
                if not self.disk_full:
                    log.error("the disk is full: the outbox waits for room", extra={"problem": str(results[0][1])})
                self.disk_full = str(results[0][1])
                self._stopping.wait(DISK_FULL_RETRY_S)
                results = self._commit_group(ops)
            if self.disk_full and results and results[0][0]:
                log.warning("room again: the outbox commits", extra={"after": self.disk_full})
                self.disk_full = ""
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
            for op, (ok, value) in zip(ops, results):
                by_loop.setdefault(op.loop, []).append((op.fut, ok, value))
            for loop, done in by_loop.items():
                with contextlib.suppress(RuntimeError):  # a loop closed meanwhile has no one waiting
                    loop.call_soon_threadsafe(_resolve, done)

    def _commit_group(self, ops: list[_Op]) -> list[tuple[bool, Any]]:
        """Apply `ops` in one transaction; (True, value) or (False, exception) per op."""
        results: list[tuple[bool, Any]] = []
        freed: list[Digest] = []
        try:
            with self._write_lock:
                env = self._live_env()
                try:
                    with env.begin(write=True) as txn:
                        for op in ops:
                            child = env.begin(write=True, parent=txn)
                            try:
                                value, op_freed = op.body(child)
                            except (StateError, ValueError, TypeError) as exc:
                                child.abort()
                                results.append((False, exc))
                                continue
                            except BaseException:
                                child.abort()
                                raise
                            child.commit()
                            results.append((True, value))
                            freed.extend(op_freed)
                except lmdb.Error as exc:
                    raise _storage_error(self._db_path, ops[0].action if len(ops) == 1
                                         else f"{ops[0].action} (and {len(ops) - 1} more)", exc) from exc
                self._delete_unreferenced(None, freed)
        except Exception as exc:  # noqa: BLE001 - a storage error fails every op of the batch
            return [(False, exc) for _ in ops]
        return results

    # -- recovery and checks -----------------------------------------------------------

    def _sweep(self) -> None:
        """Remove what a crash can leave: copies in progress, unreferenced artifact files,
        and credential temporaries. Runs at open, under the directory lock."""
        removed = 0
        with self._write_lock:
            try:
                for tmp in self._tmp_dir.iterdir():
                    tmp.unlink()
                    removed += 1
                for tmp in self.state_dir.glob(".credential.*.tmp"):
                    tmp.unlink()
                with self._read() as txn:
                    for fan in self._cas_dir.iterdir():
                        for path in fan.iterdir():
                            digest = DIGEST_PREFIX + fan.name + path.name
                            if (not is_digest(digest) or not path.is_file()
                                    or txn.get(digest.encode(), db=self._db["refs"]) is None):
                                path.unlink()
                                removed += 1
            except OSError as exc:
                raise _storage_error(self.state_dir / "artifacts", "sweep leftovers", exc) from exc
        if removed:
            log.info("swept leftovers of an interrupted run", extra={"files": removed})
        for problem in self.check(rehash=False):
            log.error("worker state inconsistent", extra={"problem": problem})

    def check(self, *, rehash: bool = False) -> list[str]:
        """Problems with the state directory, empty when sound: every referenced artifact
        exists with its size (and, with `rehash`, its digest), reference counts match the
        entries, and no file is left unreferenced."""
        problems: list[str] = []
        with self._read() as txn:
            entries = [_decode_entry(_U64.unpack(k)[0], v)
                       for k, v in txn.cursor(db=self._db["outbox"])]
            entries += [_decode_dead(_U64.unpack(k)[0], v).entry
                        for k, v in txn.cursor(db=self._db["dead"])]
            entries += [_decode_kept(_U64.unpack(k)[0], v)[0] for k, v in txn.cursor(db=self._db["kept"])]
            counted = {k.decode(): _U64.unpack(v)[0] for k, v in txn.cursor(db=self._db["refs"])}
        expected: dict[str, int] = {}
        for e in entries:
            for a in e.artifacts:
                expected[a.digest] = expected.get(a.digest, 0) + 1
                path = self.artifact_path(a.digest)
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    problems.append(f"{e.attempt_id}: artifact {a.name!r} file {path} is missing")
                    continue
                if size != a.size_bytes:
                    problems.append(f"{e.attempt_id}: artifact {a.name!r} has {size} bytes, "
                                    f"expected {a.size_bytes}")
                elif rehash and _hash_file(path) != a.digest:
                    problems.append(f"{e.attempt_id}: artifact {a.name!r} does not hash to "
                                    f"{a.digest}")
        for digest in sorted(counted.keys() | expected.keys()):
            if counted.get(digest, 0) != expected.get(digest, 0):
                problems.append(f"{digest} is counted {counted.get(digest, 0)} times but "
                                f"referenced {expected.get(digest, 0)} times")
        for fan in self._cas_dir.iterdir():
            for path in fan.iterdir():
                if DIGEST_PREFIX + fan.name + path.name not in expected:
                    problems.append(f"unreferenced artifact file {path}")
        return problems


def _hash_file(path: Path) -> Digest:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(ARTIFACT_COPY_CHUNK_BYTES):
            h.update(chunk)
    return Digest(DIGEST_PREFIX + h.hexdigest())
