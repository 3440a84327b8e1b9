"""The console's live feed (coordinator/console/feed.py) in memory, hooked on a real Hub: each
commit's events are one message per run, numbered and fanned out once each; a page that
reconnects with its last event id gets exactly the kept messages after it; an id too old, from
another process or malformed gets a resync, never a silent gap; a run's page gets its run's
events and the fleet's; a client that falls too far behind is cut (and can resume) without
holding the others back; the kept messages are bounded in count and bytes."""
from __future__ import annotations

import asyncio
import json

from coordinator.console import limits
from coordinator.console.feed import Feed
from coordinator.core.effects import Emit
from coordinator.edge import Hub


def ev(i: int, run: str = "r1", name: str = "cell_selected") -> tuple[Emit, int]:
    return Emit(name, run or None, f"c{i}", ""), i


def decode(data: bytes) -> tuple[str, str, list | dict]:
    lines = data.decode().strip().split("\n")
    fields = dict(line.split(": ", 1) for line in lines)
    return fields["id"], fields["event"], json.loads(fields["data"])


def subjects(messages: list[bytes]) -> list[str]:
    return [e["subject"] for m in messages for e in decode(m)[2]]


def test_the_feed_hears_what_the_hub_publishes_and_a_reconnect_gets_exactly_what_followed():
    async def go():
        hub = Hub()
        feed = Feed(hub, incarnation=77)
        task = asyncio.ensure_future(feed.run())
        await feed.started.wait()
        for i in range(1, 6):
            hub.publish_all([ev(i)])  # five commits: five messages
        assert feed.seq == 5 and feed.events_total == 5
        client, backlog = feed.subscribe(None, "77-2")
        assert [decode(b)[0] for b in backlog] == ["77-3", "77-4", "77-5"]
        assert subjects(backlog) == ["c3", "c4", "c5"]
        assert feed.subscribe(None, "77-5")[1] == []  # up to date: nothing to replay
        assert feed.subscribe(None, None)[1] == []  # a first connection: live events only
        hub.publish_all([ev(6), ev(7), ev(8, "r2"), ev(9)])  # one commit of two runs: two messages
        batch = client.queue.get_nowait()
        assert [decode(i.data)[0] for i in batch] == ["77-6", "77-7"]
        assert [subjects([i.data]) for i in batch] == [["c6", "c7", "c9"], ["c8"]]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert feed.on_events not in hub.on_events  # unhooked when the coordinator stops
        hub.publish_all([ev(10)])
        assert feed.seq == 7

    asyncio.run(go())


def test_a_commit_of_many_events_is_split_into_bounded_messages():
    feed = Feed(Hub(), incarnation=1)
    n = 2 * limits.SSE_EVENTS_PER_MESSAGE_MAX + 1
    feed.on_events([ev(i) for i in range(n)])
    assert feed.seq == 3 and [len(decode(i.data)[2]) for i in feed.kept] == [
        limits.SSE_EVENTS_PER_MESSAGE_MAX, limits.SSE_EVENTS_PER_MESSAGE_MAX, 1]
    assert subjects([i.data for i in feed.kept]) == [f"c{i}" for i in range(n)]


def test_resync_when_the_last_id_cannot_be_resumed_from():
    feed = Feed(Hub(), incarnation=5)
    for i in range(limits.EVENTS_KEPT_MAX + 10):
        feed.on_events([ev(i)])
    assert len(feed.kept) == limits.EVENTS_KEPT_MAX
    for last, why in (("4-3", "restarted"), ("5-2", "no longer kept"), ("garbage", "restarted"),
                      ("5-x", "restarted")):
        backlog = feed.backlog(None, last)
        assert len(backlog) == 1 and decode(backlog[0])[1] == "resync", last
        assert why in decode(backlog[0])[2]["detail"], last
    # The oldest kept is still replayed from its predecessor.
    first = feed.kept[0].seq
    assert len(feed.backlog(None, f"5-{first - 1}")) == limits.EVENTS_KEPT_MAX


def test_the_kept_messages_are_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr(limits, "EVENTS_KEPT_BYTES_MAX", 10_000)
    feed = Feed(Hub(), incarnation=1)
    for i in range(500):
        feed.on_events([ev(i)])
    assert 0 < feed.kept_bytes <= 10_000 and feed.kept_bytes == sum(len(i.data) for i in feed.kept)
    assert feed.kept[-1].seq == 500 and len(feed.kept) < 500
    assert decode(feed.backlog(None, "1-3")[0])[1] == "resync"


def test_a_run_page_gets_its_run_and_the_fleet():
    async def go():
        feed = Feed(Hub(), incarnation=1)
        client, _ = feed.subscribe("r1", None)
        feed.on_events([ev(1, "r1"), ev(2, "r2"), ev(3, "", "worker_expired")])
        got = [subjects([i.data]) for i in client.queue.get_nowait()]
        assert got == [["c1"], ["c3"]]
        assert subjects(feed.backlog("r1", "1-0")) == ["c1", "c3"]

    asyncio.run(go())


def test_a_slow_client_is_cut_and_the_others_are_not_held_back():
    async def go():
        feed = Feed(Hub(), incarnation=1)
        slow, _ = feed.subscribe(None, None)
        fast, _ = feed.subscribe(None, None)
        for i in range(limits.SSE_CLIENT_BATCHES_MAX + 1):
            feed.on_events([ev(i)])
            fast.queue.get_nowait()
        assert slow.cut and slow.queue.qsize() == 1 and slow.queue.get_nowait() is None  # its stream ends
        assert not fast.cut
        # Cut, it reconnects from the last event it had and resumes: nothing lost.
        assert len(feed.backlog(None, "1-1")) == limits.SSE_CLIENT_BATCHES_MAX
        feed.unsubscribe(slow)
        assert slow not in feed.clients

    asyncio.run(go())
