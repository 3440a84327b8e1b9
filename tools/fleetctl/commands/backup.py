"""`fleetctl backup DEST`: a consistent copy of the coordinator's data dir, taken while it serves
(coordinator/backup.py). DEST is a new directory on the coordinator's host; a relative DEST is
made absolute here, which names the intended place when fleetctl runs on that host."""
from __future__ import annotations

import argparse
import os

from common.fleetpb import admin_pb2
from tools.fleetctl.client import Admin

BACKUP_TIMEOUT_S = 3600  # a copy of a large log and its artifacts; the RPC itself is one call


def run(admin: Admin, args: argparse.Namespace) -> int:
    dest = os.path.abspath(args.dest)
    r = admin.call("Backup", admin_pb2.BackupRequest(dest_dir=dest), timeout=BACKUP_TIMEOUT_S)
    print(f"backup in {r.dest_dir}: log through index {r.last_index} ({r.wal_bytes} bytes, compacted), "
          f"{r.runs} run{'' if r.runs == 1 else 's'}, {r.artifacts} artifacts ({r.artifact_bytes} bytes); LMDB copy {r.copy_ms} ms, "
          f"whole backup {r.total_ms} ms")
    print(f"restore: fleet-coordinator --data-dir {r.dest_dir} (or a copy of it)")
    return 0
