"""CPU per thread hop of the python executor: the event loop hands a no-op call to a thread
and awaits its result, through asyncio's default executor (`loop.run_in_executor(None, ...)`,
what the executor used before) and through the executor's own cell threads
(`worker.executor.pyfunc._CellThreads`). HOPS calls, CONCURRENT at a time (a worker with 2 slots
of 3 cells runs 6), in alternating rounds; prints process CPU and wall per hop, the medians and
the median of the per-round ratios. Asserts no timing; no test runs it.

    python -m tools.bench.hops [--hops 20000] [--concurrent 6] [--rounds 3]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from worker.executor.pyfunc import _CellThreads


def noop() -> int:
    return 1


async def hops(kind: str, n: int, concurrent: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per hop."""
    loop = asyncio.get_running_loop()
    threads = _CellThreads(concurrent)
    call: Callable[[], Awaitable[Any]] = ((lambda: loop.run_in_executor(None, noop)) if kind == "default executor"
                                          else (lambda: threads.run(noop)))
    sem = asyncio.Semaphore(concurrent)

    async def one() -> None:
        async with sem:
            await call()

    await asyncio.gather(*(one() for _ in range(concurrent)))  # threads started before the clock
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hops", type=int, default=20_000)
    ap.add_argument("--concurrent", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    got: dict[str, list[float]] = {"default executor": [], "cell threads": []}
    ratios = []
    for r in range(a.rounds):
        for kind in got:
            cpu, wall = asyncio.run(hops(kind, a.hops, a.concurrent))
            got[kind].append(cpu)
            print(f"round {r + 1}, {kind}: {cpu:.1f} µs CPU, {wall:.1f} µs wall per hop")
        ratios.append(got["cell threads"][-1] / got["default executor"][-1])
    for kind, cpus in got.items():
        print(f"{kind}: median {statistics.median(cpus):.1f} µs CPU per hop")
    print(f"cell threads / default executor, median of the rounds: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
