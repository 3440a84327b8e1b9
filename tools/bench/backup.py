"""Benchmark of the online backup's LMDB copy: how long `Store.copy_to` takes on a large log,
and what a writer thread committing meanwhile sees.

    python -m tools.bench.backup [--records N]

Builds a store of N records of 300 bytes in a temp dir, then runs a writer thread that appends
batches of 50 records (one durable transaction each, as the actor's group commit) for 2 s to
measure its latency alone, then again while `copy_to` runs (compact=True) on the main thread.
Prints the copy's wall and process CPU time, its size, and the writer's batch latency before
and during the copy (p50, p99, max). Deletes the temp dir.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from coordinator.store import Store

RECORD = b"x" * 300
BATCH_RECORDS = 50
FILL_BATCH_RECORDS = 5000
BASELINE_S = 2.0


def percentile_ms(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-backup-"))
    try:
        store = Store.open(root / "data", snapshot_every=10**9)
        for _ in range(0, args.records, FILL_BATCH_RECORDS):
            store.append([RECORD] * FILL_BATCH_RECORDS)

        def writer(stop: threading.Event, out: list[float]) -> None:
            while not stop.is_set():
                t = time.perf_counter()
                store.append([RECORD] * BATCH_RECORDS)
                out.append(time.perf_counter() - t)

        before: list[float] = []
        during: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=writer, args=(stop, before))
        thread.start()
        time.sleep(BASELINE_S)
        stop.set()
        thread.join()
        stop = threading.Event()
        thread = threading.Thread(target=writer, args=(stop, during))
        (root / "copy").mkdir()
        thread.start()
        cpu0, t0 = time.process_time(), time.perf_counter()
        store.copy_to(root / "copy")
        t1, cpu1 = time.perf_counter(), time.process_time()
        stop.set()
        thread.join()
        size = sum(p.stat().st_size for p in (root / "copy").iterdir())
        print(f"log of {store.last_index} records; compacted copy {size / 1e6:.1f} MB in {(t1 - t0) * 1000:.0f} ms "
              f"wall, {(cpu1 - cpu0) * 1000:.0f} ms CPU (whole process, writer included)")
        for name, xs in (("alone", before), ("during the copy", during)):
            print(f"writer batch of {BATCH_RECORDS} records, {name}: p50 {percentile_ms(xs, .5):.1f} ms, "
                  f"p99 {percentile_ms(xs, .99):.1f} ms, max {max(xs) * 1000:.1f} ms ({len(xs)} batches)")
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
