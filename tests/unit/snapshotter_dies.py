"""A stand-in for coordinator.snapshotter (tests/unit/test_snapshot_child.py): it folds and
encodes as the real one does, writes the first DIES_AFTER_BYTES of the encoding (a few parts,
which reach the store), and dies with exit status 3."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from coordinator import snapshotter
from coordinator.recovery import fold_to
from coordinator.snapshot import encode_state
from coordinator.store import Store

DIES_AFTER_BYTES = 3 * 4_096 + 100  # the test's PART_BYTES: three parts and a bit


def main() -> None:
    data_dir, index, parent = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    snapshotter.prepare(parent)
    with Store.open_reader(data_dir) as store:
        state, _ = fold_to(store, index)
    snapshotter.write_all(snapshotter.OUT_FD, encode_state(state)[:DIES_AFTER_BYTES])
    os._exit(3)


if __name__ == "__main__":
    main()
