"""A watcher that falls more than WATCH_QUEUE_EVENTS_MAX events behind loses events, never
the coordinator's time, and is told how many it lost before the next event it reads; method:
the Hub's publish_all and the Admin servicer's Watch generator on one event loop, no network."""
from __future__ import annotations

import asyncio

from common.fleetpb import admin_pb2
from coordinator import admin_service as sv
from coordinator.edge import Hub
from coordinator.core.effects import Emit


class Tokens:
    def check_admin(self, token: object) -> None:
        pass


class Context:
    def invocation_metadata(self) -> tuple:
        return (("authorization", "Bearer admin"),)


def test_a_watcher_too_far_behind_is_told_how_many_events_it_lost(monkeypatch):
    monkeypatch.setattr(sv, "WATCH_QUEUE_EVENTS_MAX", 10)

    async def scenario() -> list:
        hub = Hub()
        admin = sv.AdminServicer(None, hub, Tokens(), None)  # type: ignore[arg-type]
        gen = admin.Watch(admin_pb2.WatchRequest(), Context())
        started = await gen.__anext__()  # the watcher is registered: it says so first
        assert started.event == "watch_started" and started.detail == "watching every run"
        first = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0)
        for i in range(25):
            hub.publish_all([(Emit("worker_refused", None, f"w{i}"), i)])
        got = [await first]
        for _ in range(10):  # the notice was first; w0..w9 follow
            got.append(await gen.__anext__())
        await gen.aclose()
        assert not hub.watchers and not hub.watch_dropped
        return got

    got = asyncio.run(scenario())
    events = [(e.event, e.subject) for e in got]
    # 10 events were queued, 15 dropped: the notice comes first, then what was kept, in order.
    assert events[0][0] == "watch_events_dropped" and got[0].detail.startswith("15 events were dropped")
    assert [s for e, s in events[1:]] == [f"w{i}" for i in range(10)]


def test_watch_events_sends_a_burst_in_few_messages_in_order_and_bounded(monkeypatch):
    monkeypatch.setattr(sv, "WATCH_BATCH_EVENTS_MAX", 40)

    async def scenario() -> list:
        hub = Hub()
        admin = sv.AdminServicer(None, hub, Tokens(), None)  # type: ignore[arg-type]
        gen = admin.WatchEvents(admin_pb2.WatchRequest(run_id="r1"), Context())
        started = await gen.__anext__()
        assert [e.event for e in started.events] == ["watch_started"] and started.events[0].run_id == "r1"
        hub.publish_all([(Emit("cell_selected", "r1", f"c{i}"), i) for i in range(100)]
                        + [(Emit("cell_selected", "r2", "other"), 100)])  # another run: not this watcher's
        batches = [await gen.__anext__() for _ in range(3)]
        await gen.aclose()
        assert not hub.watchers
        return batches

    batches = asyncio.run(scenario())
    assert [len(b.events) for b in batches] == [40, 40, 20]
    assert [e.subject for b in batches for e in b.events] == [f"c{i}" for i in range(100)]
