"""The simulation's tests spread seeds over a process pool. Its processes start from a fork
server, not by forking the test process: under `pytest -n` (./dev test) that process runs
execnet's threads, and a fork taken while one of them holds a lock can leave the child blocked
on it for good (seen: a pool that never answered, the run stuck for twenty minutes)."""
from __future__ import annotations

import multiprocessing

multiprocessing.set_start_method("forkserver", force=True)
