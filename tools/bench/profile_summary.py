"""Where a py-spy profile's busy time goes: `python -m tools.bench.profile_summary FILE...` reads the
raw collapsed stacks that `tools/bench/coordinator --profile DIR` writes and prints, per file,
the share of samples per thread, per function of its own, and per function inclusive.

Samples whose innermost frame is a wait (`select`, `Condition.wait`, the thread pool's idle
`_worker`, `Queue.get`) are counted as idle and left out of the shares; a thread blocked in
`fsync` is not recognisable that way and counts as busy, so a commit's share is mostly disk
wait, not CPU."""
from __future__ import annotations

import collections
import sys

IDLE_LEAVES = ("select (selectors", "wait (threading", "_worker (concurrent/futures/thread", "get (queue")


def _name(frame: str) -> str:
    func = frame.split(" (")[0]
    file = frame.split("(")[-1].split(":")[0].rsplit("/", 1)[-1]
    return f"{func} {file}"


def summary(path: str, top: int = 25) -> list[str]:
    rows = []
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if n.isdigit():
                rows.append((stack.split(";"), int(n)))
    total = sum(n for _, n in rows)
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    idle = 0
    for parts, n in rows:
        frames = parts[1:]
        leaf = frames[-1] if frames else ""
        if any(k in leaf for k in IDLE_LEAVES):
            idle += n
            continue
        threads[parts[0]] += n
        own[_name(leaf)] += n
        for fr in set(frames):
            inclusive[_name(fr)] += n
    busy = total - idle
    if not busy:
        return [f"{path}: no busy samples"]
    out = [f"{path}: {total} samples, {idle} idle ({100 * idle / total:.0f}%), busy {busy}",
           " threads: " + ", ".join(f"{t} {100 * n / busy:.0f}%" for t, n in threads.most_common(5)),
           " own (share of busy):"]
    out += [f"   {100 * n / busy:5.1f}% {f}" for f, n in own.most_common(top)]
    out.append(" inclusive (share of busy):")
    out += [f"   {100 * n / busy:5.1f}% {f}" for f, n in inclusive.most_common(top + 15)]
    return out


def main(argv: list[str] | None = None) -> int:
    for path in (sys.argv[1:] if argv is None else argv):
        print("\n".join(summary(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
