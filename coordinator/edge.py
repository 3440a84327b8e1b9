"""The session edge, shared by the worker and admin services: a worker's `Session` (its bounded
send queue, cut rather than buffered without bound), the `Hub` that owns the loop's state (the
sessions by worker id, watchers, dead letters) and routes everything the actor hands back after
each commit in one place (`on_batch`: the awaited results, then every worker frame's Ack, then
the pushes and other frames, the events and the broadcasts, in that order), and `submit`, which
hands a request to the actor and awaits its result."""
from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import structlog

from common import limits
from common.fleetpb import admin_pb2
from common.rejections import Rejection
from coordinator import codec
from coordinator.actor import Actor, Batch, Overloaded, Reply, Request
from coordinator.auth import AuthError
from coordinator.core.effects import Emit, Outcome, OutcomeKind, PushAssignment, Transition
from coordinator.hellos import HelloStreams
from coordinator.metrics import Metrics

log = structlog.get_logger("fleet.servicer")
PER_CELL_EVENTS = ("cell_selected", "cell_retryable")
SUBMIT_RETRY_S = 0.002


class SessionCut(Exception):
    pass


def forget_cut(cut: BaseExceptionGroup) -> None:
    """Clear the frames of a caught task group's exceptions. The group's traceback holds
    TaskGroup.__aexit__'s frame, which holds the group (Python 3.11): a cycle through every
    frame of the session. Cleared, the session's objects go with their last reference instead
    of waiting, frozen, for a full collection (coordinator/collector.py)."""
    for e in (cut, *cut.exceptions):
        traceback.clear_frames(e.__traceback__)


def too_large_detail(size: int) -> str:
    return f"{Rejection.MESSAGE_TOO_LARGE.name}: a frame of {size} bytes exceeds {limits.MESSAGE_BYTES_MAX}"


@dataclass(eq=False)
class Session:
    worker_id: str
    context: Any
    frame_at: float = 0.0  # loop time of the last frame read (the hello's, at first)
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(limits.SESSION_SEND_QUEUE_FRAMES_MAX))
    welcomed: bool = False
    early: list = field(default_factory=list)  # frames routed before the Welcome went out
    expected_seq: int = 2  # the hello was 1
    attempts_owned: dict = field(default_factory=dict)  # attempt id -> None, checked for uploads
    cut_reason: str = ""
    incarnation: int = 0  # the hello's: a measurement belongs to the process that made it
    batch_acks: bool = False  # the worker speaks protocol 2: consecutive acks travel as one frame
    # Protocol 4 with transport liveness: while the stream is up, the servicer tells the actor
    # so every heartbeat interval, with what the worker's last heartbeat (or hello) said it owns.
    transport_liveness: bool = False
    bundles: bool = False  # protocol 4: frames queued together travel as one FrameBundle
    # What a frame met by a full actor queue is refused with (codec.overload_rejection).
    overloaded: Rejection = Rejection.STORAGE_FULL
    owned: tuple = ()
    degraded: str = ""  # the last heartbeat's: why the worker starts no new cell
    beat_at: float = 0.0  # loop time of the last heartbeat received or refreshed
    held: list = field(default_factory=list)  # a frame (or the cut sentinel None) taken while batching acks
    abort: tuple | None = None  # (status code, details) to end the stream with, once it is cut

    def send(self, frame: Any) -> bool:
        if self.cut_reason:
            return False
        if not self.welcomed:
            self.early.append(frame)
            return True
        try:
            self.queue.put_nowait(frame)
            return True
        except asyncio.QueueFull:
            self.cut(f"send queue full ({limits.SESSION_SEND_QUEUE_FRAMES_MAX} frames): worker too slow")
            return False

    def welcome(self, frame: Any) -> None:
        self.welcomed = True
        self.send(frame)
        early, self.early = self.early, []
        for f in early:
            self.send(f)

    def cut(self, reason: str) -> None:
        if not self.cut_reason:
            self.cut_reason = reason
            log.warning("session_cut", worker_id=self.worker_id, reason=reason)
            try:
                self.queue.put_nowait(None)
            except asyncio.QueueFull:
                pass


class Hub:
    """Sessions by worker id, watchers, dead letters: state of the edge, owned by the loop."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics or Metrics()  # rejections answered, slot refills
        self.sessions: dict[str, Session] = {}
        self.watchers: list[tuple[str | None, asyncio.Queue]] = []
        self.watch_dropped: dict[int, int] = {}  # id(queue) -> events it lost since it was last told
        self.dead_letters: list[tuple[str, str, str]] = []
        self.heartbeats: dict[str, tuple[Session, tuple]] = {}  # worker -> latest, not yet applied
        self.heartbeat_flush: asyncio.TimerHandle | None = None
        self.liveness_refresh: asyncio.TimerHandle | None = None
        self.heartbeat_interval_s = 1.0  # of the sessions whose liveness is the transport's
        # Each hook gets a batch's events at once, in order, each with its time (metrics count
        # them with one increment per kind, not one per cell).
        self.on_events: list[Callable[[list[tuple[Emit, int]]], None]] = []
        self.hello_streams = HelloStreams()  # a Hello delayed past a newer stream is refused
        self._log: Any = None

    def attach(self, session: Session) -> None:
        old = self.sessions.get(session.worker_id)
        if old is not None:
            old.cut("replaced by a newer session of the same worker")
        self.sessions[session.worker_id] = session

    def detach(self, session: Session) -> bool:
        if self.sessions.get(session.worker_id) is session:
            del self.sessions[session.worker_id]
            return True
        return False

    def on_batch(self, batch: Batch) -> None:
        """One commit's results, routed in this order: awaited results first (a Hello's attaches
        its session, so the pushes of the same commit reach it); then each worker frame's Ack,
        before the pushes, so a worker hears its report acknowledged before the group that
        refills the slot; then the frames for workers, the events and the broadcasts."""
        for done, value in batch.completions:
            done(value)
        for reply, value in batch.replies:
            self.answer(reply, value)
        for o in batch.outgoing:
            s = self.sessions.get(o.worker_id)
            if s is not None:
                s.send(o.frame)  # absent: the worker is away; heartbeats re-push, hello reconciles
        if batch.events:
            self.publish_all(batch.events)
        for frame in batch.broadcast:
            for s in list(self.sessions.values()):
                s.send(frame)

    def count(self, outcome: Outcome) -> None:
        if outcome.kind == OutcomeKind.REJECTED:
            self.metrics.rejections.labels(outcome.rejection.name).inc()

    def ack(self, session: Session, seq: int, outcome: Outcome, **kw: Any) -> None:
        self.count(outcome)
        session.send(codec.ack_frame(seq, outcome, **kw))

    def answer(self, reply: Reply, value: Transition | list[Transition]) -> None:
        """A worker frame's Ack (a ReportBatch's: an AckBatch where the worker reads one), and
        one `slot_refill` observation per group the commit pushed to that worker (a frame that
        ends two groups refills two slots)."""
        session = reply.session
        transitions = value if type(value) is list else [value]
        if reply.batch and session.batch_acks:  # every protocol that sends a ReportBatch does
            acks = [(seq, t.outcome) for seq, t in zip(reply.seqs, transitions, strict=True)]
            for _, outcome in acks:
                self.count(outcome)
            for frame in codec.ack_batch_frames(acks):
                session.send(frame)
        else:
            for seq, t in zip(reply.seqs, transitions, strict=True):
                self.ack(session, seq, t.outcome)
        if reply.refill:
            worker_id = session.worker_id
            pushes = sum(1 for t in transitions for e in t.effects
                         if type(e) is PushAssignment and e.worker_id == worker_id)
            if pushes:
                took = time.perf_counter() - reply.received
                for _ in range(pushes):
                    self.metrics.slot_refill.observe(took)

    def publish_all(self, events: list[tuple[Emit, int]]) -> None:
        # One line per cell would cost more than the cell on a large run: per-cell events are
        # debug; everything about runs, workers and assignments is info. The logger is bound on
        # first use, as structlog's cache would (its lazy proxy costs 1 us a call, a bound one 0.25).
        logger = self._log
        if logger is None:
            logger = self._log = log.bind()
        debug, info = logger.debug, logger.info
        for e, _ in events:
            (debug if e.event in PER_CELL_EVENTS else info)(e.event, run_id=e.run_id, subject=e.subject,
                                                             detail=e.detail)
        for hook in self.on_events:
            hook(events)
        if not self.watchers:
            return
        for e, at_ms in events:
            msg = admin_pb2.Event(at_ms=at_ms, event=e.event, run_id=e.run_id or "", subject=e.subject,
                                  detail=e.detail)
            for run_filter, q in self.watchers:
                if run_filter and e.run_id and e.run_id != run_filter:
                    continue
                try:
                    q.put_nowait(msg)
                except asyncio.QueueFull:
                    # A watcher that does not read loses events, never the coordinator's time;
                    # it is told how many when it catches up (Watch below).
                    self.watch_dropped[id(q)] = self.watch_dropped.get(id(q), 0) + 1


async def submit(actor: Actor, make: Callable[[int], object] | None = None,
                 query: Callable | None = None) -> Any:
    """Hand a request to the actor and wait for its result (after the commit)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def done(value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    await put_request(actor, Request(make=make, query=query, done=done))
    return await fut


async def put_request(actor: Actor, request: Request) -> None:
    for _ in range(int(5 / SUBMIT_RETRY_S)):
        try:
            actor.submit(request)
            return
        except Overloaded:
            await asyncio.sleep(SUBMIT_RETRY_S)  # bounded backpressure: the actor drains fast
    raise Overloaded("the actor queue stayed full for 5 s")


def status_for_auth(e: AuthError) -> grpc.StatusCode:
    return grpc.StatusCode.PERMISSION_DENIED if e.code == "permission_denied" else grpc.StatusCode.UNAUTHENTICATED
