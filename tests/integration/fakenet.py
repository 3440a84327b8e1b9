"""A fake network between real workers and a real coordinator: a gRPC proxy that interposes on
every `Coordinator.Session` stream and, with seeded probabilities, delays frames, drops a frame
and cuts the stream (loss before the commit when the frame goes up, after the commit when an
acknowledgement comes down), duplicates coordinator frames, and cuts streams at random.

gRPC streams never lose a frame without breaking, so every drop here also cuts the stream,
as a TCP connection loss would; the worker must reconnect, reconcile and replay.
"""
from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Any

import grpc

from common.fleetpb import coordinator_pb2_grpc
from common.limits import MESSAGE_BYTES_MAX


@dataclass
class FaultRates:
    drop_up: float = 0.02  # a worker frame is lost, the stream breaks
    drop_down: float = 0.02  # a coordinator frame (an ack after its commit) is lost, the stream breaks
    duplicate_down: float = 0.03  # a coordinator frame arrives twice
    delay_max_ms: int = 30
    cut_per_frame: float = 0.005  # the stream breaks for no reason


@dataclass
class FakeNet:
    upstream: str
    seed: int
    rates: FaultRates = field(default_factory=FaultRates)
    enabled: bool = True
    stats: dict = field(default_factory=lambda: {"streams": 0, "drops_up": 0, "drops_down": 0,
                                                 "duplicates": 0, "cuts": 0})
    address: str = ""
    # Deterministic faults for one kind of frame: a worker frame for which `cut_before_up`
    # says yes is lost and the stream breaks (nothing reaches the coordinator); one for which
    # `cut_after_up` says yes is delivered, then the stream breaks (its acks are lost).
    cut_before_up: Any = None
    cut_after_up: Any = None

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    # The proxy runs its own event loop in a thread so the test body stays synchronous.
    def start(self) -> str:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "fake network did not start"
        return self.address

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        options = [("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
                   ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX)]
        self._channel = grpc.aio.insecure_channel(self.upstream, options=options)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)
        server = grpc.aio.server(options=options)
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(_Proxy(self), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self.address = f"127.0.0.1:{port}"
        self._ready.set()
        await self._stop.wait()
        await server.stop(0.5)
        await self._channel.close()

    def roll(self, p: float) -> bool:
        return self.enabled and self._rng.random() < p

    def delay_s(self) -> float:
        return self._rng.uniform(0, self.rates.delay_max_ms / 1000) if self.enabled else 0.0


class _Cut(Exception):
    pass


class _Proxy(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, net: FakeNet) -> None:
        self.net = net

    async def Session(self, request_iterator, context):  # noqa: ANN001, N802
        net = self.net
        net.stats["streams"] += 1
        metadata = tuple((k, v) for k, v in context.invocation_metadata() if not k.startswith(":")
                         and k not in ("user-agent",))
        call = net._stub.Session(metadata=metadata)

        async def up() -> None:
            while True:
                frame = await context.read()
                if frame is grpc.aio.EOF:
                    await call.done_writing()
                    return
                if net.roll(net.rates.drop_up):
                    net.stats["drops_up"] += 1
                    raise _Cut
                if net.roll(net.rates.cut_per_frame):
                    net.stats["cuts"] += 1
                    raise _Cut
                if net.cut_before_up is not None and net.cut_before_up(frame):
                    net.stats["drops_up"] += 1
                    raise _Cut
                await asyncio.sleep(net.delay_s())
                await call.write(frame)
                if net.cut_after_up is not None and net.cut_after_up(frame):
                    await asyncio.sleep(0.2)  # the coordinator commits; its acks die with the stream
                    net.stats["cuts"] += 1
                    raise _Cut

        async def down() -> None:
            async for frame in call:
                if net.roll(net.rates.drop_down):
                    net.stats["drops_down"] += 1
                    raise _Cut
                await asyncio.sleep(net.delay_s())
                await context.write(frame)
                if net.roll(net.rates.duplicate_down):
                    net.stats["duplicates"] += 1
                    await context.write(frame)

        tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in pending:
                t.cancel()
            for t in done:
                exc = t.exception()
                if isinstance(exc, _Cut):
                    call.cancel()
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "fake network: connection lost")
                if isinstance(exc, grpc.aio.AioRpcError):
                    await context.abort(exc.code(), exc.details() or "")
        finally:
            call.cancel()
            for t in tasks:
                t.cancel()
