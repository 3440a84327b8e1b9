"""The online backup: a consistent copy of the data dir while the coordinator keeps serving.

Rules, in order:
1. The destination is an absolute path that does not exist yet, outside the data dir; its
   parent must exist. Everything is written into `.<name>.partial-<pid>` beside it and renamed
   into place only when complete and fsynced, so a directory at `dest` is always a whole backup
   (a crash leaves only the `.partial` directory, which the next backup ignores).
2. The log, snapshots and meta: `Store.copy_to`, LMDB's own compacting copy in one read
   transaction, so it is the state as of one commit. Every result acknowledged before the
   backup began was committed before that transaction began (the actor commits, then sends).
   The actor keeps committing meanwhile; LMDB keeps the pages the copy still reads.
3. The copy is verified by recovering it (`recover_with_time` on the copy: every checksum and
   every record replayed through the core), and the state it yields names the artifacts it
   references. Each is copied from the artifact store re-hashed on the way
   (`open_verified`): an artifact the copied state names is on disk, since artifacts are
   renamed into place before the core learns of them and are never deleted.
4. Then the admin and enrollment tokens and the worker credentials (mode 0600): a coordinator
   started on the backup accepts the same workers and operators. Credentials are copied after
   the log, so they may hold enrollments newer than it; never fewer.
5. `BACKUP.json` records what the backup holds and names it (`backup_id`). Restore = start
   `fleet-coordinator --data-dir` on the backup directory (or a copy of it): the first start
   there finds a backup id its log has not taken up and logs a CoordinatorRestored, a new
   epoch (`backup_to_take_up`); the workers then offer back what the backup lacks.

One backup at a time per process. Destination problems are the operator's (`BackupError`);
they never stop the coordinator, whose own store is only read.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import lmdb

from common.durable import fsync_dir
from coordinator.artifacts import ArtifactStore
from coordinator.auth import CREDENTIALS_FILE, CREDENTIALS_LOG
from coordinator.errors import ArtifactCorrupt, StorageError
from coordinator.recovery import recover_with_time
from coordinator.store import LOCK_FILE_NAME, WAL_DIR_NAME, Store

MANIFEST_FILE = "BACKUP.json"
TOKEN_FILES = ("admin.token", "enroll.token", CREDENTIALS_FILE, CREDENTIALS_LOG)
SECRET_FILE_MODE = 0o600
ARTIFACT_FILE_MODE = 0o444

_one_at_a_time = threading.Lock()


class BackupError(Exception):
    """The backup could not be written; `busy` when another backup is running."""

    def __init__(self, message: str, *, busy: bool = False) -> None:
        super().__init__(message)
        self.busy = busy


@dataclass(frozen=True, slots=True)
class BackupReport:
    dest_dir: str
    last_index: int
    runs: int
    artifacts: int
    artifact_bytes: int
    wal_bytes: int
    copy_ms: int
    total_ms: int


def check_dest(dest: Path, data_dir: Path) -> Path:
    if not dest.is_absolute():
        raise BackupError(f"{dest}: the backup directory must be an absolute path on the coordinator's host")
    dest = Path(os.path.normpath(dest))
    data = data_dir.resolve()
    if dest == data or data in dest.parents:
        raise BackupError(f"{dest}: the backup directory may not be inside the data dir {data}")
    if dest.exists():
        raise BackupError(f"{dest} exists: a backup goes to a new directory")
    if not dest.parent.is_dir():
        raise BackupError(f"{dest.parent} is not a directory")
    return dest


def take_backup(store: Store, artifacts: ArtifactStore, data_dir: Path, dest: Path) -> BackupReport:
    """Write a backup of the serving coordinator's data dir to `dest` (module rules)."""
    if not _one_at_a_time.acquire(blocking=False):
        raise BackupError("a backup is already running", busy=True)
    try:
        return _take(store, artifacts, data_dir, check_dest(dest, data_dir))
    except (OSError, StorageError) as e:  # the destination's disk; the serving store is only read
        raise BackupError(f"writing the backup to {dest}: {e}") from e
    finally:
        _one_at_a_time.release()


def _take(store: Store, artifacts: ArtifactStore, data_dir: Path, dest: Path) -> BackupReport:
    started = time.monotonic()
    partial = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    if partial.exists():
        shutil.rmtree(partial)  # our own leftover: this process is the only writer of that name
    try:
        (partial / WAL_DIR_NAME).mkdir(parents=True)
        copy_started = time.monotonic()
        try:
            store.copy_to(partial / WAL_DIR_NAME)
        except (lmdb.Error, OSError) as e:
            raise BackupError(f"copying the log to {partial}: {e}") from e
        copy_ms = int((time.monotonic() - copy_started) * 1000)
        state, last_index = _verify_copy(partial)
        target = ArtifactStore(partial / "artifacts")
        artifact_bytes = 0
        for digest in sorted(state.artifacts):
            artifact_bytes += _copy_artifact(artifacts, target, digest)
        fsync_dir(target.root / "sha256")  # the new <2 hex> directories
        for name in TOKEN_FILES:
            source = data_dir / name
            if source.exists():
                _copy_file(source, partial / name, SECRET_FILE_MODE)
        wal_bytes = sum(p.stat().st_size for p in (partial / WAL_DIR_NAME).iterdir())
        report = BackupReport(str(dest), last_index, len(state.runs), len(state.artifacts), artifact_bytes,
                              wal_bytes, copy_ms, 0)
        report = BackupReport(**{**asdict(report), "total_ms": int((time.monotonic() - started) * 1000)})
        # The id a coordinator started on this backup takes up once (CoordinatorRestored).
        manifest = {**asdict(report), "format": "fleet-backup-1", "backup_id": secrets.token_hex(8),
                    "restore": "fleet-coordinator --data-dir THIS_DIRECTORY"}
        _write_durably(partial / MANIFEST_FILE, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode(),
                       0o644)
        for d in (partial / WAL_DIR_NAME, partial):
            fsync_dir(d)
        os.rename(partial, dest)
        fsync_dir(dest.parent)
        return report
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _verify_copy(partial: Path):  # -> tuple[State, int]
    """Recover the copy as a coordinator would: checksums, replay through the core."""
    try:
        with Store.open(partial) as copy:
            state, index, _ = recover_with_time(copy)
    except StorageError as e:
        raise BackupError(f"the copy at {partial} does not verify: {e}") from e
    (partial / LOCK_FILE_NAME).unlink(missing_ok=True)
    return state, index


def _copy_artifact(source: ArtifactStore, target: ArtifactStore, digest: str) -> int:
    path = target.path_for(digest)
    path.parent.mkdir(exist_ok=True)
    size = 0
    try:
        with open(path, "wb") as f:
            for chunk in source.open_verified(digest):
                f.write(chunk)
                size += len(chunk)
            f.flush()
            os.fsync(f.fileno())
    except KeyError:
        raise BackupError(f"artifact {digest}, referenced by the copied state, is not in the artifact store") from None
    except ArtifactCorrupt as e:
        raise BackupError(f"artifact {digest} no longer matches its digest: {e}") from e
    os.chmod(path, ARTIFACT_FILE_MODE)
    fsync_dir(path.parent)
    return size


def _copy_file(source: Path, target: Path, mode: int) -> None:
    _write_durably(target, source.read_bytes(), mode)


def _write_durably(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def backup_to_take_up(data_dir: Path, taken: list[str]) -> str | None:
    """The id of the backup `data_dir` was restored from, when no start on it has taken that
    backup up yet (`taken`: the state's `restored_backups`); None for a data dir that is no
    backup, or one already taken up. A backup written before ids were (no `backup_id`) is
    named by its log position."""
    path = data_dir / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise BackupError(f"{path} is not a backup manifest: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != "fleet-backup-1":
        raise BackupError(f"{path} is not a fleet backup manifest (format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
    backup_id = str(manifest.get("backup_id") or f"index-{manifest.get('last_index', 0)}")
    return None if backup_id in taken else backup_id
