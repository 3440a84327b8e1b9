"""The worker service's liveness feed (a mixin of CoordinatorServicer): heartbeats coalesced,
and the sessions whose transport is up told to the actor; liveness is soft state."""
from __future__ import annotations

import asyncio

from common.ids import WorkerId
from common.rejections import Rejection
from coordinator.actor import Overloaded, Request
from coordinator.core import commands as c
from coordinator.core.effects import EndSession, Transition
from coordinator.edge import Session

# Heartbeats of all sessions are handed to the actor together at most this often: 1,000
# workers beating once a second cost a few actor wake-ups a second, not a thousand.
HEARTBEAT_COALESCE_MS = 50
LIVENESS_SLICES = 8  # passes of _refresh_liveness per heartbeat interval


class LivenessFeed:
    """CoordinatorServicer's liveness feed: heartbeats coalesced into one request, and the
    sessions whose transport says they are up told to the actor (StreamsAlive)."""

    def _heartbeat(self, session: Session, owned: tuple) -> None:
        """Coalesced: only the latest heartbeat of each worker matters, and all of them go to
        the actor in one request."""
        self.hub.heartbeats[session.worker_id] = (session, owned)
        if self.hub.heartbeat_flush is None:
            loop = asyncio.get_running_loop()
            self.hub.heartbeat_flush = loop.call_later(HEARTBEAT_COALESCE_MS / 1000, self._flush_heartbeats)

    def _refresh_liveness(self) -> None:
        """Every half suspicion window (at least every heartbeat interval): the protocol-4
        sessions whose stream is still up and that sent no heartbeat of their own meanwhile go
        to the actor in one StreamsAlive, and the core counts those of them that hold no group
        as heard from (a worker with a group beats every interval itself). A dead peer's
        transport fails its keepalive within TRANSPORT_DEAD_AFTER_MS, which ends the stream
        (WorkerDisconnected), and then silence does what it always did."""
        hub = self.hub
        loop = asyncio.get_running_loop()
        now = loop.time()
        interval = hub.heartbeat_interval_s
        # In LIVENESS_SLICES passes per interval, each refreshing at most its share (and a
        # half) of the due sessions: 10,000 sessions that registered together would otherwise
        # all come due at once, one command of 10,000 workers holding the actor for several ms
        # every interval (refills wait behind it); sliced, a pass holds it about a millisecond.
        # A session left over waits a pass (interval / LIVENESS_SLICES), well inside the
        # suspicion window.
        due = [s for s in hub.sessions.values() if s.transport_liveness and not s.cut_reason]
        cap = max(1, -(-len(due) * 3 // (2 * LIVENESS_SLICES)))
        stale = now - interval * 0.9
        alive: list[tuple[WorkerId, tuple]] = []
        for session in due:
            if session.beat_at <= stale:
                session.beat_at = now
                alive.append((WorkerId(session.worker_id), session.owned))
                if len(alive) >= cap:
                    break
        hub.liveness_refresh = loop.call_later(interval / LIVENESS_SLICES, self._refresh_liveness) if due else None
        if not alive:
            return
        sessions = tuple(alive)

        def done(t: Transition) -> None:
            for e in t.effects:
                if isinstance(e, EndSession):
                    session = hub.sessions.get(e.worker_id)
                    if session is not None and session.transport_liveness:
                        session.cut(e.reason)

        try:
            self.actor.submit(Request(make=lambda now_ms: c.StreamsAlive(now_ms, sessions), done=done))
        except Overloaded:
            pass  # liveness is soft: the next pass carries the same news

    def _flush_heartbeats(self) -> None:
        self.hub.heartbeat_flush = None
        beats, self.hub.heartbeats = self.hub.heartbeats, {}
        sessions = [s for s, _ in beats.values()]
        makes = [(lambda now, w=wid, o=owned, d=s.degraded: c.HeartbeatReceived(now, w, o, d))
                 for wid, (s, owned) in beats.items()]

        def done(transitions: list[Transition]) -> None:
            for session, t in zip(sessions, transitions):
                if t.outcome.rejection == Rejection.WORKER_NOT_ACTIVE:
                    session.cut(t.outcome.detail)

        try:
            self.actor.submit(Request(many=makes, done=done))
        except Overloaded:
            pass  # liveness is soft: the next heartbeats carry the same news
