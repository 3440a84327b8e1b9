"""`fleetctl backup DEST`: a consistent copy of the coordinator's data dir, taken while it serves
(coordinator/backup.py). DEST is a new directory on the coordinator's host; a relative DEST is
made absolute here, which names the intended place when fleetctl runs on that host.

`fleetctl backup --into ROOT --keep N`: the same backup into a new `ROOT/<UTC time>` (for
example `ROOT/20261203T113700Z`; `-2`, `-3` appended when that second is taken), then the
oldest backups under ROOT beyond the N newest are deleted. Only ROOT's entries that are
backups this command names are candidates: a directory (not a symlink) whose name is such a
time and whose BACKUP.json says format "fleet-backup-1" (the coordinator renames a backup into
place only once complete, so its `.partial` directories never qualify). Anything else under
ROOT is never touched, nor is the backup just written; a backup that fails deletes nothing.
Pruning is done here, so --into runs on the coordinator's host (ROOT must exist here)."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin, CtlError, UsageError

BACKUP_TIMEOUT_S = 3600  # a copy of a large log and its artifacts; the RPC itself is one call
BACKUP_FORMAT = "fleet-backup-1"  # coordinator/backup.py's BACKUP.json "format"
MANIFEST_FILE = "BACKUP.json"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
STAMP_NAME = re.compile(r"(\d{8}T\d{6}Z)(?:-(\d+))?")


def keep_count(text: str) -> int:
    """`--keep N`: how many backups stay under ROOT, the new one included (at least 1);
    argparse turns the ArgumentTypeError into a usage error (exit 2)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: keep at least 1 backup (the one just written)")
    return n


def check_args(args: argparse.Namespace) -> None:
    """DEST, or --into with --keep; raised before fleetctl connects."""
    if args.dest is not None and args.into is not None:
        raise UsageError("backup: give DEST or --into ROOT, not both")
    if args.dest is None and args.into is None:
        raise UsageError("backup: give DEST (a new directory) or --into ROOT --keep N")
    if args.into is None and args.keep is not None:
        raise UsageError("backup: --keep goes with --into ROOT")
    if args.into is not None and args.keep is None:
        raise UsageError("backup: --into ROOT needs --keep N (how many backups stay under ROOT)")
    if args.into is not None and not os.path.isdir(args.into):
        raise UsageError(f"backup: --into {args.into} is not a directory here (it must exist, on the "
                         "coordinator's host, where fleetctl prunes it)")


def run(admin: Admin, args: argparse.Namespace) -> int:
    check_args(args)
    if args.into is None:
        backup(admin, os.path.abspath(args.dest))
        return 0
    root = Path(os.path.abspath(args.into))
    dest = backup(admin, str(new_name(root)))
    pruned, kept, failed = prune(root, args.keep, Path(dest))
    for path in pruned:
        print(f"pruned {path}")
    print(f"{len(kept)} backup{'' if len(kept) == 1 else 's'} kept under {root} (--keep {args.keep}), "
          f"{len(pruned)} pruned")
    if failed:
        raise CtlError("the backup was written, but pruning failed: " + "; ".join(failed))
    return 0


def backup(admin: Admin, dest: str) -> str:
    r = admin.call("Backup", admin_pb2.BackupRequest(dest_dir=dest), timeout=BACKUP_TIMEOUT_S)
    print(f"backup in {r.dest_dir}: log through index {r.last_index} ({r.wal_bytes} bytes, compacted), "
          f"{r.runs} run{'' if r.runs == 1 else 's'}, {r.artifacts} artifacts ({r.artifact_bytes} bytes); LMDB copy {r.copy_ms} ms, "
          f"whole backup {r.total_ms} ms")
    print(f"restore: fleet-coordinator --data-dir {r.dest_dir} (or a copy of it)")
    return r.dest_dir


def new_name(root: Path, now: datetime | None = None) -> Path:
    """ROOT/<UTC time>, with -2, -3... when an entry of that name is already there."""
    stamp = (now or datetime.now(timezone.utc)).strftime(STAMP_FORMAT)
    path, n = root / stamp, 1
    while os.path.lexists(path):
        n += 1
        path = root / f"{stamp}-{n}"
    return path


def sort_key(name: str) -> tuple[str, int] | None:
    m = STAMP_NAME.fullmatch(name)
    return None if m is None else (m.group(1), int(m.group(2) or 1))


def is_backup(path: Path) -> bool:
    """A whole backup of this command's naming: a real directory with a fleet-backup-1 manifest."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        manifest = path / MANIFEST_FILE
        if not stat.S_ISREG(os.lstat(manifest).st_mode):
            return False
        return json.loads(manifest.read_text()).get("format") == BACKUP_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def backups(root: Path) -> list[Path]:
    """ROOT's whole backups named by --into, oldest first."""
    found = [(key, root / name) for name in os.listdir(root) if (key := sort_key(name)) is not None]
    return [path for key, path in sorted(found) if is_backup(path)]


def prune(root: Path, keep: int, written: Path) -> tuple[list[Path], list[Path], list[str]]:
    """Delete the oldest backups beyond the `keep` newest, never `written`. Each goes out of the
    backups' namespace first (renamed to a dot name), so a half-deleted one never looks whole."""
    found = backups(root)
    doomed = [p for p in found[:-keep] if p != written]
    pruned, failed = [], []
    for path in doomed:
        gone = root / f".{path.name}.pruning-{os.getpid()}"
        try:
            os.rename(path, gone)
        except OSError as e:
            failed.append(f"{path}: {e}")
            continue
        try:
            shutil.rmtree(gone)
        except OSError as e:
            failed.append(f"{path} (renamed to {gone}, partly deleted): {e}")
            continue
        pruned.append(path)
    kept = [p for p in found if os.path.lexists(p)]
    return pruned, kept, failed
