"""A stand-in for coordinator.snapshotter (tests/integration/test_snapshot_child_dies.py): the
real one, after a minute's sleep, so that it is still running when its coordinator is killed."""
from __future__ import annotations

import os
import sys
import time

from coordinator import snapshotter

if __name__ == "__main__":
    snapshotter.prepare(int(sys.argv[3]))
    time.sleep(60)  # long enough to be killed mid-encode
    os._exit(snapshotter.main())
