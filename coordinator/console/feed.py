"""The console's live feed: the events of `fleetctl watch`, numbered, kept, and fanned out to
every open page as server-sent events.

Rules.
1. One feed for every browser, on the same publication as `fleetctl watch`'s stream: the edge's
   `Hub.publish_all` hands each commit's events, in order, to its hooks and to every WatchEvents
   watcher; the feed is one of the hooks (in the coordinator's event loop), so it sees the same
   events in the same order without a protobuf message and a queue slot per event (which, with
   a JSON encoding per event, was the console's main cost on a busy run: issue 24).
2. Each SSE message carries the events of one commit for one run (or the fleet's, run-less
   ones), at most SSE_EVENTS_PER_MESSAGE_MAX, as a JSON list, with one id `INCARNATION-SEQ`;
   the last EVENTS_KEPT_MAX messages are kept. A browser that reconnects sends the last id it
   saw (EventSource's Last-Event-ID) and gets every kept message after it, in order, before the
   live ones: nothing is lost across a reconnect. When the id is older than what is kept or
   names another coordinator process, the page is told to `resync` (it reads its page again),
   never shown a gap as if it were none.
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

from coordinator.console import limits


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


def encode(seq_id: str, event: str, payload: Any) -> bytes:
    return f"id: {seq_id}\nevent: {event}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


class Feed:
    def __init__(self, hub: Any, incarnation: int) -> None:
        self.hub = hub  # coordinator/edge.py Hub: its on_events hooks (rule 1)
        self.incarnation = incarnation
        self.kept: collections.deque[Item] = collections.deque()
        self.kept_bytes = 0
        self.clients: set[Client] = set()
        self.seq = 0
        self.events_total = 0
        self.started = asyncio.Event()

    def _id(self, seq: int) -> str:
        return f"{self.incarnation}-{seq}"

    def _keep(self, item: Item) -> None:
        self.kept.append(item)
        self.kept_bytes += len(item.data)
        while len(self.kept) > limits.EVENTS_KEPT_MAX or self.kept_bytes > limits.EVENTS_KEPT_BYTES_MAX:
            self.kept_bytes -= len(self.kept.popleft().data)

    async def run(self) -> None:
        """Rule 1: hooked on the Hub's publication until cancelled (the coordinator stops)."""
        self.hub.on_events.append(self.on_events)
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.hub.on_events.remove(self.on_events)

    def on_events(self, events: list[tuple[Any, int]]) -> None:
        """A commit's events, each (core Emit, at_ms), as Hub.publish_all hands them over: one
        message per run (rule 2), in the order each run first appears."""
        by_run: dict[str, list[dict]] = {}
        for e, at_ms in events:
            run_id = e.run_id or ""
            by_run.setdefault(run_id, []).append(
                {"at_ms": at_ms, "event": e.event, "run_id": run_id, "subject": e.subject, "detail": e.detail})
        batch: list[Item] = []
        cap = limits.SSE_EVENTS_PER_MESSAGE_MAX
        for run_id, evs in by_run.items():
            for i in range(0, len(evs), cap):
                self.seq += 1
                item = Item(self.seq, run_id, encode(self._id(self.seq), "fleet", evs[i:i + cap]))
                self._keep(item)
                batch.append(item)
        self.events_total += len(events)
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
