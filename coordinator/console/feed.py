"""The console's live feed: the events of `fleetctl watch`, numbered, kept, and fanned out to
every open page as server-sent events.

Rules.
1. One watcher for every browser: the feed reads the Admin API's WatchEvents stream (the one
   `fleetctl watch` reads) once, in the coordinator's event loop, and encodes each event once.
2. Each event gets an id `INCARNATION-SEQ`; the last EVENTS_KEPT_MAX are kept. A browser that
   reconnects sends the last id it saw (EventSource's Last-Event-ID) and gets every kept event
   after it, in order, before the live ones: nothing is lost across a reconnect. When the id is
   older than what is kept, names another coordinator process, or the watch itself dropped
   events, the page is told to `resync` (it reads its page again), never shown a gap as if it
   were none.
3. Every client's queue is bounded; a client that falls SSE_CLIENT_BATCHES_MAX batches behind
   is cut, and its browser reconnects and resumes by rule 2. A slow browser never holds the
   coordinator's memory or its loop.
"""
from __future__ import annotations

import asyncio
import collections
import json
from dataclasses import dataclass
from typing import Any

import structlog

from common.fleetpb import admin_pb2
from coordinator.console import limits

log = structlog.get_logger("fleet.console")


@dataclass(frozen=True, slots=True)
class Item:
    seq: int
    run_id: str
    data: bytes  # one SSE message, encoded, id line included


class Client:
    def __init__(self, run_filter: str | None) -> None:
        self.run_filter = run_filter
        self.queue: asyncio.Queue[list[Item] | None] = asyncio.Queue(limits.SSE_CLIENT_BATCHES_MAX)
        self.cut = False

    def offer(self, batch: list[Item]) -> None:
        if self.cut:
            return
        mine = batch if self.run_filter is None else [i for i in batch if not i.run_id or i.run_id == self.run_filter]
        if not mine:
            return
        try:
            self.queue.put_nowait(mine)
        except asyncio.QueueFull:
            self.cut = True  # rule 3: it reconnects and resumes from the kept events
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


def encode(seq_id: str, event: str, payload: dict) -> bytes:
    return f"id: {seq_id}\nevent: {event}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


class Feed:
    def __init__(self, admin: Any, incarnation: int) -> None:
        self.admin = admin
        self.incarnation = incarnation
        self.kept: collections.deque[Item] = collections.deque(maxlen=limits.EVENTS_KEPT_MAX)
        self.clients: set[Client] = set()
        self.seq = 0
        self.events_total = 0
        self.started = asyncio.Event()

    def _id(self, seq: int) -> str:
        return f"{self.incarnation}-{seq}"

    async def run(self) -> None:
        """Rule 1; a watch that ends (it should not) is opened again after a pause."""
        for _ in range(1_000_000):  # bounded; each turn is a whole watch
            try:
                async for batch in self.admin.stream("WatchEvents", admin_pb2.WatchRequest()):
                    self._publish(batch.events)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # our watch failed: every page resyncs, and we watch again
                log.warning("console_watch_failed", error=str(e))
                self._publish([admin_pb2.Event(event="watch_events_dropped", detail=str(e))])
            await asyncio.sleep(1.0)

    def _publish(self, events: Any) -> None:
        batch: list[Item] = []
        for ev in events:
            if ev.event == "watch_started":
                self.started.set()
                continue
            self.seq += 1
            name = "resync" if ev.event == "watch_events_dropped" else "fleet"
            item = Item(self.seq, "" if name == "resync" else ev.run_id, encode(self._id(self.seq), name, {
                "at_ms": ev.at_ms, "event": ev.event, "run_id": ev.run_id, "subject": ev.subject,
                "detail": ev.detail}))
            self.kept.append(item)
            batch.append(item)
        self.events_total += len(batch)
        if batch:
            for c in list(self.clients):
                c.offer(batch)

    def subscribe(self, run_filter: str | None, last_event_id: str | None) -> tuple[Client, list[bytes]]:
        """A new client and what it must be sent first: the kept events after its last one, or a
        resync when they cannot be (rule 2)."""
        client = Client(run_filter)
        self.clients.add(client)
        return client, self.backlog(run_filter, last_event_id)

    def backlog(self, run_filter: str | None, last_event_id: str | None) -> list[bytes]:
        if not last_event_id:
            return []
        inc, _, seq_text = last_event_id.partition("-")
        if inc != str(self.incarnation) or not seq_text.isdigit():
            return [self._resync("the coordinator restarted since this page's last event")]
        seq = int(seq_text)
        if seq >= self.seq:
            return []
        first = self.kept[0].seq if self.kept else self.seq + 1
        if seq + 1 < first:
            return [self._resync(f"events after {last_event_id} are no longer kept")]
        return [i.data for i in self.kept if i.seq > seq and (run_filter is None or not i.run_id
                                                               or i.run_id == run_filter)]

    def _resync(self, why: str) -> bytes:
        return encode(self._id(self.seq), "resync", {"detail": why})

    def unsubscribe(self, client: Client) -> None:
        self.clients.discard(client)
