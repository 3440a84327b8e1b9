"""Which Hello of a worker process is its newest: `Hello.stream` numbers the streams a worker
process opens, and a Hello that is not above the highest seen from the same incarnation was
delayed in a dead connection (written before the connection died, retransmitted after the worker
had moved on to a newer stream). Reconciled against, its owned list, older than the newer
session's pushes, would hand on groups the worker is running; the edge refuses it instead
(SESSION_STALE). Pure and in memory: a coordinator process that starts again has no stream
from before it, so it starts empty. The simulation runs the same check (tools/sim)."""
from __future__ import annotations


class HelloStreams:
    """worker -> (incarnation, the highest Hello.stream it said): one small entry per worker."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int]] = {}

    def stale(self, worker_id: str, incarnation: int, stream: int) -> int:
        """0 when this Hello may go on (and it is recorded); else the number of the newer
        stream the same worker process already opened. Unnumbered Hellos (stream 0, a worker
        that does not say) always go on; an older incarnation is the core's to refuse
        (INCARNATION_STALE), so it is not recorded."""
        if not stream:
            return 0
        seen_incarnation, seen = self.seen.get(worker_id, (0, 0))
        if incarnation == seen_incarnation and stream <= seen:
            return seen
        if incarnation >= seen_incarnation:
            self.seen[worker_id] = (incarnation, stream)
        return 0
