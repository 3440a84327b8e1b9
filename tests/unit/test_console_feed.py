"""The console's live feed (coordinator/console/feed.py) in memory, with a fake watch: events
are numbered and fanned out once each; a page that reconnects with its last event id gets
exactly the kept events after it; an id too old, from another process or malformed gets a
resync, never a silent gap; a run's page gets its run's events and the fleet's; a client that
falls too far behind is cut (and can resume) without holding the others back."""
from __future__ import annotations

import asyncio
import json

from common.fleetpb import admin_pb2
from coordinator.console import limits
from coordinator.console.feed import Feed


def ev(i: int, run: str = "r1", name: str = "cell_selected") -> admin_pb2.Event:
    return admin_pb2.Event(at_ms=i, event=name, run_id=run, subject=f"c{i}", detail="")


def decode(data: bytes) -> tuple[str, str, dict]:
    lines = data.decode().strip().split("\n")
    fields = dict(line.split(": ", 1) for line in lines)
    return fields["id"], fields["event"], json.loads(fields["data"])


def test_a_reconnect_gets_exactly_the_events_after_its_last_one():
    async def go():
        feed = Feed(admin=None, incarnation=77)
        feed._publish([admin_pb2.Event(event="watch_started")] + [ev(i) for i in range(1, 6)])
        assert feed.seq == 5 and feed.started.is_set()
        client, backlog = feed.subscribe(None, "77-2")
        assert [decode(b)[0] for b in backlog] == ["77-3", "77-4", "77-5"]
        assert [decode(b)[2]["subject"] for b in backlog] == ["c3", "c4", "c5"]
        assert feed.subscribe(None, "77-5")[1] == []  # up to date: nothing to replay
        assert feed.subscribe(None, None)[1] == []  # a first connection: live events only
        feed._publish([ev(6)])
        batch = client.queue.get_nowait()
        assert [decode(i.data)[0] for i in batch] == ["77-6"]

    asyncio.run(go())


def test_resync_when_the_last_id_cannot_be_resumed_from():
    async def go():
        feed = Feed(admin=None, incarnation=5)
        feed._publish([ev(i) for i in range(limits.EVENTS_KEPT_MAX + 10)])
        for last, why in (("4-3", "restarted"), ("5-2", "no longer kept"), ("garbage", "restarted"),
                          ("5-x", "restarted")):
            backlog = feed.backlog(None, last)
            assert len(backlog) == 1 and decode(backlog[0])[1] == "resync", last
            assert why in decode(backlog[0])[2]["detail"], last
        # The oldest kept is still replayed from its predecessor.
        first = feed.kept[0].seq
        assert len(feed.backlog(None, f"5-{first - 1}")) == limits.EVENTS_KEPT_MAX

    asyncio.run(go())


def test_a_run_page_gets_its_run_and_the_fleet_and_a_dropped_watch_is_a_resync():
    async def go():
        feed = Feed(admin=None, incarnation=1)
        client, _ = feed.subscribe("r1", None)
        feed._publish([ev(1, "r1"), ev(2, "r2"), ev(3, "", "worker_expired")])
        got = [decode(i.data)[2]["subject"] for i in client.queue.get_nowait()]
        assert got == ["c1", "c3"]
        assert [decode(b)[2]["subject"] for b in feed.backlog("r1", "1-0")] == ["c1", "c3"]
        feed._publish([admin_pb2.Event(event="watch_events_dropped", detail="fell behind")])
        assert decode(client.queue.get_nowait()[0].data)[1] == "resync"

    asyncio.run(go())


def test_a_slow_client_is_cut_and_the_others_are_not_held_back():
    async def go():
        feed = Feed(admin=None, incarnation=1)
        slow, _ = feed.subscribe(None, None)
        fast, _ = feed.subscribe(None, None)
        for i in range(limits.SSE_CLIENT_BATCHES_MAX + 1):
            feed._publish([ev(i)])
            fast.queue.get_nowait()
        assert slow.cut and slow.queue.qsize() == 1 and slow.queue.get_nowait() is None  # its stream ends
        assert not fast.cut
        # Cut, it reconnects from the last event it had and resumes: nothing lost.
        assert len(feed.backlog(None, "1-1")) == limits.SSE_CLIENT_BATCHES_MAX
        feed.unsubscribe(slow)
        assert slow not in feed.clients

    asyncio.run(go())
