"""Add a snapshot to a COPY of a data dir, N records after its newest one, so that a recovery
benchmark can measure a shorter tail without generating a new log (800 s at a million cells).

The copy's newest snapshot is folded with the next N records of its log, encoded as the daemon
encodes it, and stored in parts of SNAPSHOT_PART_BYTES followed by its manifest, as the actor
stores one; the log itself is left as it is. It writes to the store: never run it on a data dir
you want to keep (`cp -a` one first).

    python -m tools.bench.snapshot_at COPY_DIR/large 25000   # then bench_scale --reuse COPY_DIR
"""
from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

from common import limits
from coordinator.core import step
from coordinator.logcodec import decode_record
from coordinator.snapshot import decode_state, encode_state, no_gc
from coordinator.store import Store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.snapshot_at", description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path, help="a copy of a coordinator data dir")
    ap.add_argument("records", type=int, help="records after the newest snapshot to fold into the new one")
    args = ap.parse_args(argv)
    store = Store.open(args.data_dir, map_size_bytes=limits.STORE_MAP_BYTES_MAX // 4)
    try:
        with no_gc():
            rec = store.load()
            if rec.snapshot_index is None:
                print("snapshot_at: the store holds no snapshot", file=sys.stderr)
                return 2
            state, index = decode_state(rec.snapshot_parts), rec.snapshot_index
            for position, data in rec.records:
                if position > rec.snapshot_index + args.records:
                    break
                state, t = step(state, decode_record(data)[1])
                assert t.outcome.ok, (position, t.outcome)
                index = position
            if index == rec.snapshot_index:
                print("snapshot_at: no record after the newest snapshot", file=sys.stderr)
                return 2
            data = encode_state(state)
        size = limits.SNAPSHOT_PART_BYTES
        parts = -(-len(data) // size)
        for i in range(parts):
            store.write_snapshot_part(index, i, data[i * size:(i + 1) * size])
        store.finish_snapshot(index, parts, len(data), zlib.crc32(data))
        print(f"snapshot at {index:,}: {len(data):,} bytes in {parts} parts; the log ends at "
              f"{rec.last_index:,} ({rec.last_index - index:,} records after it)")
        return 0
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
