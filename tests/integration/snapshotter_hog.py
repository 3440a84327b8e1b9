"""A stand-in for coordinator.snapshotter (tests/integration/test_snapshot_child_oom.py): the
real one's `prepare`, then memory taken 8 MiB at a time, every page written, until the kernel
kills it (bounded: it gives up and fails after 4 GiB, so that it cannot run away unlimited)."""
from __future__ import annotations

import os
import sys

from coordinator import snapshotter

CHUNK = 8 << 20
LIMIT = 4 << 30

if __name__ == "__main__":
    snapshotter.prepare(int(sys.argv[3]))
    held = []
    while len(held) * CHUNK < LIMIT:
        held.append(b"\x01" * CHUNK)  # written, so resident
    os._exit(3)
