"""The sizes of the coordinator benches (tools/bench/coordinator.py): the full run and `--quick`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    w1_groups: int
    w1_repeats: int
    commit_clients: int
    commit_window_s: float
    commit_groups: int
    commit_rounds: int
    reports_cells: int  # the reports bench's run: enough for its warm-up and window above 20,000/s
    bare_window_s: float
    actor_window_s: float
    refill_workers: int
    refill_window_s: float
    refill_hold_ms: tuple[int, int]
    refill_groups: int
    idle_workers: int
    idle_clients: int
    idle_window_s: float
    upload_bytes: int
    upload_repeats: int


FULL = Sizes(w1_groups=2_000, w1_repeats=3, commit_clients=64, commit_window_s=8, commit_groups=30_000, commit_rounds=3,
             reports_cells=360_000,
             bare_window_s=3, actor_window_s=5,
             refill_workers=50, refill_window_s=20, refill_hold_ms=(100, 300), refill_groups=10_000,
             idle_workers=1_000, idle_clients=4,
             idle_window_s=30, upload_bytes=64 << 20, upload_repeats=5)


QUICK = Sizes(w1_groups=150, w1_repeats=1, commit_clients=64, commit_window_s=3, commit_groups=15_000, commit_rounds=1,
              reports_cells=120_000,
              bare_window_s=1.5, actor_window_s=2,
              refill_workers=50, refill_window_s=4, refill_hold_ms=(100, 300), refill_groups=2_000,
              idle_workers=200, idle_clients=2,
              idle_window_s=6, upload_bytes=16 << 20, upload_repeats=1)
