"""The gRPC edge: worker sessions and the admin API (grpc.aio, one event loop).

Servicers never touch the core state. They authenticate, decode a frame into a request for
the actor, and deliver what the actor hands back after its commit: acknowledgements,
pushes, revokes, notices. Every session has a bounded send queue; a session that cannot keep
up is cut (the worker reconnects and reconciles) rather than buffered without bound.
Expected errors of a peer become a typed acknowledgement or a gRPC status with the
Rejection's name in its details; the coordinator keeps serving.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import secrets
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import structlog

from common import limits
from common.fleetpb import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc
from common.ids import AssignmentId, AttemptId, CellId, Digest, RunId, WorkerId, run_id_for
from common.policy import parse_policy_text
from common.rejections import Rejection
from common.spec import SpecError, canonical_json, parse_spec_text
from coordinator import codec, paging, views
from coordinator.actor import Actor, Batch, Overloaded, Reports, Request
from coordinator.artifacts import ArtifactStore, UploadRejected
from coordinator.auth import AuthError, TokenBook, bearer, certificate_identity_problem
from coordinator.backup import BackupError, take_backup
from coordinator.codec import FrameError
from coordinator.core import commands as c
from coordinator.core.effects import EndSession, Emit, Outcome, OutcomeKind, PushAssignment, Transition, rejected
from coordinator.errors import ArtifactCorrupt, StorageError, StoreIOError, fail_stop
from coordinator.core.summary import Tally
from coordinator.metrics import Metrics
from coordinator.store import Store
from coordinator.paging import PageTokenError, PageTokens, Position
from coordinator.snapshot import no_gc

log = structlog.get_logger("fleet.servicer")
HELLO_TIMEOUT_S = 30
# Events a watcher may be behind by: a run submitted to 10,000 workers emits 10,000 at once
# (one measurement each); a watcher further behind loses events and is told how many.
WATCH_QUEUE_EVENTS_MAX = 20_000
# One message of a WatchEvents stream: far inside a message's limit, details included.
WATCH_BATCH_EVENTS_MAX = 2_000
WATCH_BATCH_BYTES_MAX = 1 << 20
# Heartbeats of all sessions are handed to the actor together at most this often: 1,000
# workers beating once a second cost a few actor wake-ups a second, not a thousand.
HEARTBEAT_COALESCE_MS = 50
LIVENESS_SLICES = 8  # passes of _refresh_liveness per heartbeat interval
PER_CELL_EVENTS = ("cell_selected", "cell_retryable")
DEAD_LETTERS_KEPT_MAX = 10_000
SUBMIT_RETRY_S = 0.002
# An unpaged GetResults or ListAttempts gathers pages while they stay under this: one more
# page (at most PAGE_BYTES_MAX and one item), the summary and the field tags still fit.
UNPAGED_BYTES_MAX = limits.MESSAGE_BYTES_MAX - limits.PAGE_BYTES_MAX - (1 << 20)
STREAM_ENDED = "stream ended"  # the cut reason when the worker's side ended the stream


class _SessionCut(Exception):
    pass


def forget_cut(cut: BaseExceptionGroup) -> None:
    """Clear the frames of a caught task group's exceptions. The group's traceback holds
    TaskGroup.__aexit__'s frame, which holds the group (Python 3.11): a cycle through every
    frame of the session. Cleared, the session's objects go with their last reference instead
    of waiting, frozen, for a full collection (coordinator/collector.py)."""
    for e in (cut, *cut.exceptions):
        traceback.clear_frames(e.__traceback__)


def _too_large(size: int) -> str:
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

    def __init__(self) -> None:
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
        for done, value in batch.completions:
            done(value)
        for o in batch.outgoing:
            s = self.sessions.get(o.worker_id)
            if s is not None:
                s.send(o.frame)  # absent: the worker is away; heartbeats re-push, hello reconciles
        if batch.events:
            self.publish_all(batch.events)
        for frame in batch.broadcast:
            for s in list(self.sessions.values()):
                s.send(frame)

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

    await _put(actor, Request(make=make, query=query, done=done))
    return await fut


async def _put(actor: Actor, request: Request) -> None:
    for _ in range(int(5 / SUBMIT_RETRY_S)):
        try:
            actor.submit(request)
            return
        except Overloaded:
            await asyncio.sleep(SUBMIT_RETRY_S)  # bounded backpressure: the actor drains fast
    raise Overloaded("the actor queue stayed full for 5 s")


def _status_for_auth(e: AuthError) -> grpc.StatusCode:
    return grpc.StatusCode.PERMISSION_DENIED if e.code == "permission_denied" else grpc.StatusCode.UNAUTHENTICATED


def upload_key(worker_id: str, digest: str) -> str:
    return "u" + hashlib.sha256(f"{worker_id}\0{digest}".encode()).hexdigest()[:40]


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, actor: Actor, hub: Hub, tokens: TokenBook, artifacts: ArtifactStore,
                 coordinator_incarnation: int, metrics: Metrics | None = None, *,
                 client_identity: bool = False) -> None:
        self.actor, self.hub, self.tokens, self.artifacts = actor, hub, tokens, artifacts
        self.incarnation = coordinator_incarnation
        self.metrics = metrics or Metrics()
        self.client_identity = client_identity  # mTLS: the certificate must name the claimed worker

    def _ack(self, session: Session, seq: int, outcome: Outcome, **kw: Any) -> None:
        self._count(outcome)
        session.send(codec.ack_frame(seq, outcome, **kw))

    def _count(self, outcome: Outcome) -> None:
        if outcome.kind == OutcomeKind.REJECTED:
            self.metrics.rejections.labels(outcome.rejection.name).inc()

    async def Session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        token, claimed = bearer(context.invocation_metadata())
        if self.client_identity:
            problem = certificate_identity_problem(context.auth_context(), claimed)
            if problem:
                log.warning("session_refused", worker_id=claimed, reason=problem)
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{Rejection.IDENTITY_MISMATCH.name}: {problem}")
                return
        try:
            grant = self.tokens.open_session(token, claimed)
        except AuthError as e:
            log.warning("session_refused", worker_id=claimed, reason=str(e))
            await context.abort(_status_for_auth(e), f"{Rejection.UNAUTHENTICATED.name if e.code == 'unauthenticated' else Rejection.PERMISSION_DENIED.name}: {e}")
            return
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT_S)
        except asyncio.TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "MALFORMED_FRAME: no hello within 30 s")
            return
        if first is grpc.aio.EOF:
            return
        if first.ByteSize() > limits.MESSAGE_BYTES_MAX:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, _too_large(first.ByteSize()))
            return
        if first.WhichOneof("body") != "hello" or first.seq != 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "MALFORMED_FRAME: the first frame of a session must be hello with seq 1")
            return
        hello = first.hello
        if hello.worker_id != grant.worker_id:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"IDENTITY_MISMATCH: authenticated as {grant.worker_id}, hello says {hello.worker_id!r}")
            return
        if hello.protocol_version < codec.RUN_OFFER_PROTOCOL_VERSION:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"{Rejection.PROTOCOL_UNSUPPORTED.name}: protocol {hello.protocol_version} cannot measure "
                                f"a run's environment; this coordinator needs {codec.RUN_OFFER_PROTOCOL_VERSION} "
                                "(upgrade the worker)")
            return
        try:
            environment = codec.decode_manifest(hello.environment, "the hello's environment")
        except FrameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            return
        wid = WorkerId(grant.worker_id)
        session = Session(wid, context, batch_acks=hello.protocol_version >= codec.ACK_BATCH_PROTOCOL_VERSION,
                          incarnation=hello.incarnation,
                          bundles=hello.protocol_version >= codec.BUNDLE_PROTOCOL_VERSION,
                          overloaded=codec.overload_rejection(hello.protocol_version))
        session.frame_at = asyncio.get_running_loop().time()
        try:
            await self._register(session, grant.new_credential, hello, environment, context)
            if session.cut_reason:
                return
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._writer(session, context))
                    tg.create_task(self._reader(session, context))
            except* _SessionCut as cut:
                forget_cut(cut)  # cut on purpose: replaced, too slow, or must register again
            if session.abort is not None:
                await context.abort(*session.abort)
        finally:
            if self.hub.detach(session):
                # The worker's side ended the stream (it closed it, or its kernel reset it when
                # the process died; grpc cancels this handler then) unless we cut it: that end
                # is news and starts the core's short grace. A cut of ours (too slow, refused)
                # is not: the worker is alive and will reconnect, so it is treated as silence.
                self._ended(session, peer_ended=session.cut_reason in ("", STREAM_ENDED))
            log.info("session_closed", worker_id=wid, reason=session.cut_reason or "stream ended")

    def _ended(self, session: Session, *, peer_ended: bool) -> None:
        wid = session.worker_id
        quiet_ms = int(1000 * (asyncio.get_running_loop().time() - session.frame_at))
        try:
            self.actor.submit(Request(make=lambda now: c.WorkerStreamEnded(now, wid, quiet_ms) if peer_ended
                                      else c.WorkerDisconnected(now, wid)))
        except Overloaded:
            pass  # expiry will notice the silence anyway

    async def _register(self, session: Session, credential: str, hello: Any, environment: tuple, context: Any) -> None:
        wid = session.worker_id
        cmd_owned = tuple(AssignmentId(a) for a in hello.owned_assignment_ids)
        cmd_buffered = tuple(AttemptId(a) for a in hello.buffered_attempt_ids)
        loop = asyncio.get_running_loop()
        registered: asyncio.Future = loop.create_future()

        def done(t: Transition) -> None:
            if registered.cancelled():
                # The stream ended while the hello waited for the actor (a storm of thousands
                # of hellos): nothing is left to attach, and the core learns of the end as of
                # any other. Setting a result here would raise and lose the rest of the batch.
                if t.outcome.ok:
                    self._ended(session, peer_ended=True)
                return
            # Attach before this batch's pushes are routed (completions run first), and only
            # when accepted: a refused hello must not cut the worker's live session.
            if t.outcome.ok:
                self.hub.attach(session)
            registered.set_result(t)

        await _put(self.actor, Request(make=lambda now: c.WorkerRegistered(
            now, wid, hello.incarnation, hello.slots, hello.environment_id, hello.cpu_millis, hello.memory_mb,
            owned=cmd_owned, buffered=cmd_buffered, cell_environment_id=hello.cell_environment_id,
            environment=environment), done=done))
        t: Transition = await registered
        if not t.outcome.ok:
            session.cut(f"registration refused: {t.outcome.rejection.name}")
            log.warning("worker_refused", worker_id=wid, rejection=t.outcome.rejection.name, detail=t.outcome.detail)
            # A full disk is transient (UNAVAILABLE: the worker reconnects later); every other
            # refusal of a registration is for the operator to mend.
            code = (grpc.StatusCode.UNAVAILABLE if t.outcome.rejection == Rejection.STORAGE_FULL
                    else grpc.StatusCode.FAILED_PRECONDITION)
            await context.abort(code, f"{t.outcome.rejection.name}: {t.outcome.detail}")
            return
        if credential:  # an fsync: off the event loop, shared by the enrollments that arrive together
            await asyncio.to_thread(self.tokens.commit_enrollment, wid, credential)
        interval, suspect, expire, epoch = await submit(self.actor, query=views.welcome)
        # Transport liveness (for a worker holding no group: core `_streams_alive`) only where
        # the transport notices a dead idle peer before the policy would expire a silent one;
        # otherwise the worker keeps beating every interval as before.
        idle_ms = interval
        if hello.protocol_version >= codec.TRANSPORT_LIVENESS_PROTOCOL_VERSION and expire > limits.TRANSPORT_DEAD_AFTER_MS:
            idle_ms = limits.IDLE_HEARTBEAT_INTERVAL_MS
            session.transport_liveness = True
            session.owned = cmd_owned
            session.beat_at = loop.time()
            # Often enough that a live worker is never silent for suspect_after_ms; no oftener.
            self.hub.heartbeat_interval_s = max(interval, suspect // 2) / 1000
            if self.hub.liveness_refresh is None:
                self.hub.liveness_refresh = loop.call_later(self.hub.heartbeat_interval_s, self._refresh_liveness)
        offsets = []
        for pending in hello.pending_uploads:
            committed = await asyncio.to_thread(self._committed_offset, wid, pending.digest)
            offsets.append(coordinator_pb2.UploadStatus(digest=pending.digest, committed_offset=committed,
                                                        complete=committed == pending.total_length))
        session.welcome(coordinator_pb2.CoordinatorFrame(welcome=coordinator_pb2.Welcome(
            coordinator_incarnation=self.incarnation, heartbeat_interval_ms=interval, suspect_after_ms=suspect,
            expire_after_ms=expire, worker_credential=credential, upload_offsets=offsets,
            protocol_version=codec.PROTOCOL_VERSION, idle_heartbeat_interval_ms=idle_ms,
            coordinator_epoch=epoch)))
        log.info("session_open", worker_id=wid, incarnation=hello.incarnation, slots=hello.slots,
                 environment_id=hello.environment_id, owned=len(cmd_owned), buffered=len(cmd_buffered),
                 enrolled=bool(credential))

    def _committed_offset(self, worker_id: str, digest: str) -> int:
        if self.artifacts.has(digest):
            return self.artifacts.size(digest)
        part = self.artifacts.root / "tmp" / f"{upload_key(worker_id, digest)}.part"
        return part.stat().st_size if part.exists() else 0

    async def _writer(self, session: Session, context: Any) -> None:
        while True:
            frame = session.held.pop() if session.held else await session.queue.get()
            if frame is None:
                raise _SessionCut(session.cut_reason)  # ends the reader too, through the task group
            if session.batch_acks and frame.WhichOneof("body") == "ack":
                frame = CoordinatorServicer._batch_acks(session, frame)
            if (session.bundles and frame.WhichOneof("body") != "welcome"  # the first frame goes alone
                    and ((session.held and session.held[-1] is not None) or not session.queue.empty())):
                frame = CoordinatorServicer._bundle(session, frame)
            await context.write(frame)

    @staticmethod
    def _bundle(session: Session, first: Any) -> Any:
        """`first` and every frame queued behind it (acks joined as usual) in one message: one
        write per wake-up of the writer instead of one per frame."""
        frames = [first]
        while len(frames) < codec.BUNDLE_FRAMES_MAX:
            if session.held:  # the frame that ended a run of acks comes next
                if session.held[-1] is None:
                    break
                nxt = session.held.pop()
            else:
                try:
                    nxt = session.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if nxt is None:
                    session.held.append(nxt)  # the cut goes after what is bundled
                    break
            if nxt.WhichOneof("body") == "ack":
                nxt = CoordinatorServicer._batch_acks(session, nxt)
            frames.append(nxt)
        if len(frames) == 1:
            return first
        return codec.bundle_bytes(frames)  # written as they are: add_coordinator_to_server

    @staticmethod
    def _batch_acks(session: Session, first: Any) -> Any:
        """Join the acks already queued behind `first` into one frame (order kept); one write
        per frame is most of the session's cost under load."""
        acks = [first.ack]
        while len(acks) < codec.ACK_BATCH_MAX:
            try:
                nxt = session.queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            if nxt is None or nxt.WhichOneof("body") != "ack":
                session.held.append(nxt)  # None too: a cut must not be lost
                break
            acks.append(nxt.ack)
        if len(acks) == 1:
            return first
        return coordinator_pb2.CoordinatorFrame(acks=coordinator_pb2.AckBatch(acks=acks))

    async def _reader(self, session: Session, context: Any) -> None:
        try:
            while not session.cut_reason:
                frame = await context.read()
                if frame is grpc.aio.EOF:
                    break
                session.frame_at = asyncio.get_running_loop().time()
                if frame.seq != session.expected_seq:
                    self._ack(session, frame.seq, rejected(
                        Rejection.OUT_OF_ORDER, f"seq {frame.seq} is not the expected {session.expected_seq}"))
                    continue
                # A ReportBatch of N reports takes N sequence numbers, one per report.
                span = len(frame.report_batch.reports) if frame.WhichOneof("body") == "report_batch" else 1
                session.expected_seq += max(1, span)
                size = frame.ByteSize()
                if size > limits.MESSAGE_BYTES_MAX:
                    # The server's receive limit is a spec submit's (limits.ADMIN_REQUEST_BYTES_MAX):
                    # a worker frame is held to the session's own limit here, and the stream is
                    # ended as gRPC itself would end it, RESOURCE_EXHAUSTED.
                    session.abort = (grpc.StatusCode.RESOURCE_EXHAUSTED, _too_large(size))
                    session.cut(f"frame of {size} bytes")
                    break
                try:
                    await self._handle(session, frame)
                except FrameError as e:
                    for seq in range(frame.seq, frame.seq + max(1, span)):
                        self._ack(session, seq, rejected(e.rejection, e.detail))
        finally:
            session.cut_reason = session.cut_reason or STREAM_ENDED
            try:
                session.queue.put_nowait(None)
            except asyncio.QueueFull:
                pass

    async def _handle(self, session: Session, frame: Any) -> None:
        kind = frame.WhichOneof("body")
        wid = WorkerId(session.worker_id)
        seq = frame.seq
        if kind == "heartbeat":
            # Coalesced: only the latest heartbeat of each worker matters, and all of them go
            # to the actor in one request.
            owned = tuple(AssignmentId(a) for a in frame.heartbeat.owned_assignment_ids)
            session.owned = owned
            session.degraded = frame.heartbeat.degraded[:limits.ID_CHARS_MAX]
            session.beat_at = asyncio.get_running_loop().time()
            self._heartbeat(session, owned)
        elif kind == "cell_report":
            r = frame.cell_report
            report = codec.decode_report(r.report)
            attempt_id = AttemptId(codec.require_id(r.attempt_id, "attempt_id"))
            assignment_id = AssignmentId(codec.require_id(r.assignment_id, "assignment_id"))
            generation = r.generation
            if r.offered:
                self._offered(session, seq, r, report)
            else:
                self._ack_after(session, seq, lambda now: c.CellReported(now, wid, attempt_id, assignment_id,
                                                                         generation, report), refill=True)
        elif kind == "report_batch":
            self._report_batch(session, seq, frame.report_batch.reports)
        elif kind == "upload_chunk":
            await self._upload(session, seq, frame.upload_chunk)
        elif kind == "group_finished":
            aid = AssignmentId(codec.require_id(frame.group_finished.assignment_id, "assignment_id"))
            self._ack_after(session, seq, lambda now: c.GroupFinished(now, wid, aid))
        elif kind == "run_environment":
            m = frame.run_environment
            run_id = RunId(codec.require_id(m.run_id, "run_id"))
            measured = codec.decode_manifest(m.components, "the run environment")
            incarnation = session.incarnation
            self._ack_after(session, seq, lambda now: c.RunEnvironmentMeasured(now, wid, incarnation, run_id, measured),
                            refill=True)
        elif kind == "drain_notice":
            self._ack_after(session, seq, lambda now: c.WorkerDrained(now, wid))
        elif kind == "goodbye":
            self._ack_after(session, seq, lambda now: c.WorkerGone(now, wid))
        elif kind == "dead_letter":
            d = frame.dead_letter
            self.hub.dead_letters.append((wid, d.attempt_id, d.reason[:500]))
            del self.hub.dead_letters[:-DEAD_LETTERS_KEPT_MAX]
            log.warning("dead_letter", worker_id=wid, attempt_id=d.attempt_id, reason=d.reason[:500])
            session.send(codec.ack_frame(seq, Outcome(OutcomeKind.ACCEPTED)))
        elif kind == "hello":
            raise FrameError(Rejection.MALFORMED_FRAME, "hello is sent once, as the first frame of a session")
        else:
            raise FrameError(Rejection.MALFORMED_FRAME, f"frame without a known body ({kind})")

    async def DescribeRunEnvironment(self, request: Any, context: Any) -> Any:
        token, _ = bearer(context.invocation_metadata())
        try:
            self.tokens.check_any(token)
        except AuthError as e:
            await context.abort(_status_for_auth(e), f"{Rejection.UNAUTHENTICATED.name}: {e}")
            return None
        run_id = RunId(request.run_id)
        out = await submit(self.actor, query=lambda s: views.run_environment(s, run_id))
        if out is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        return out

    def _offered(self, session: Session, seq: int, r: Any, report: Any) -> None:
        """A result the worker kept and offers again after the coordinator's epoch changed."""
        wid = WorkerId(session.worker_id)
        attempt_id = AttemptId(codec.require_id(r.attempt_id, "attempt_id"))
        assignment_id = AssignmentId(codec.require_id(r.assignment_id, "assignment_id"))
        generation = r.generation
        self._ack_after(session, seq, lambda now: c.ResultOffered(now, wid, attempt_id, assignment_id,
                                                                  generation, report), refill=True)

    def _report_batch(self, session: Session, first_seq: int, reports: Any) -> None:
        """Every report of the batch in one actor request, so one group commit; each is acked
        on its own seq after that commit. A report that does not decode is refused alone."""
        if not reports:
            raise FrameError(Rejection.MALFORMED_FRAME, "a report batch without reports")
        if len(reports) > limits.REPORT_BATCH_REPORTS_MAX:
            raise FrameError(Rejection.MALFORMED_FRAME, f"a report batch of {len(reports)} reports exceeds "
                                                        f"{limits.REPORT_BATCH_REPORTS_MAX}")
        seqs: list[int] = []
        rows: list[tuple[AttemptId, AssignmentId, int, Any]] = []
        wire: list[Any] = []  # each report's message: its log record copies it (encode once)
        decode, require_id = codec.decode_report, codec.require_id
        for i, r in enumerate(reports):
            seq = first_seq + i
            message = r.report
            try:
                report = decode(message)
                attempt_id = require_id(r.attempt_id, "attempt_id")
                assignment_id = require_id(r.assignment_id, "assignment_id")
            except FrameError as e:
                self._ack(session, seq, rejected(e.rejection, e.detail))
                continue
            if r.offered:  # a result offered after a restore is a command of its own
                self._offered(session, seq, r, report)
                continue
            seqs.append(seq)
            rows.append((attempt_id, assignment_id, r.generation, report))  # type: ignore[arg-type]
            wire.append(message)
        if not rows:
            return
        received = time.perf_counter()

        def done(transitions: list[Transition]) -> None:
            acks = [(seq, t.outcome) for seq, t in zip(seqs, transitions)]
            if session.batch_acks:  # every protocol that sends a ReportBatch does
                for _, outcome in acks:
                    self._count(outcome)
                for frame in codec.ack_batch_frames(acks):
                    session.send(frame)
            else:
                for seq, outcome in acks:
                    self._ack(session, seq, outcome)
            self._observe_refills(session, transitions, received)

        try:
            self.actor.submit(Request(reports=Reports(WorkerId(session.worker_id), rows, wire), done=done))
        except Overloaded:
            for seq in seqs:
                self._ack(session, seq, rejected(session.overloaded, "coordinator overloaded: resend"))

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

    def _observe_refills(self, session: Session, transitions: Iterable[Transition], received: float) -> None:
        """One `slot_refill` observation per group pushed to this worker by these transitions: a
        frame that ends two groups refills two slots (counted once before, so the count could
        fall short of the refills)."""
        worker_id = session.worker_id
        pushes = sum(1 for t in transitions for e in t.effects
                     if type(e) is PushAssignment and e.worker_id == worker_id)
        if pushes:
            took = time.perf_counter() - received
            for _ in range(pushes):
                self.metrics.slot_refill.observe(took)

    def _ack_after(self, session: Session, seq: int, make: Callable[[int], object], *, refill: bool = False) -> None:
        received = time.perf_counter()

        def done(t: Transition) -> None:
            self._ack(session, seq, t.outcome)
            if refill:
                self._observe_refills(session, (t,), received)

        try:
            self.actor.submit(Request(make=make, done=done))
        except Overloaded:
            self._ack(session, seq, rejected(session.overloaded, "coordinator overloaded: resend"))

    async def _upload(self, session: Session, seq: int, u: Any) -> None:
        digest = Digest(codec.require_digest(u.digest))
        attempt_id = codec.require_id(u.attempt_id, "attempt_id")
        if u.total_length > limits.ARTIFACT_BYTES_MAX:
            raise FrameError(Rejection.ARTIFACT_TOO_LARGE,
                             f"{u.total_length} bytes exceed the limit of {limits.ARTIFACT_BYTES_MAX}")
        if len(u.data) > limits.CHUNK_BYTES_MAX:
            raise FrameError(Rejection.MESSAGE_TOO_LARGE, f"chunk of {len(u.data)} bytes exceeds {limits.CHUNK_BYTES_MAX}")
        if attempt_id not in session.attempts_owned:
            owner = await submit(self.actor, query=lambda s: views.attempt_owner(s, attempt_id, session.worker_id))
            if owner is None:
                raise FrameError(Rejection.UNKNOWN_ATTEMPT, f"attempt {attempt_id} was never dispatched")
            if owner != session.worker_id:
                raise FrameError(Rejection.NOT_OWNER, f"attempt {attempt_id} belongs to worker {owner}")
            session.attempts_owned[attempt_id] = None
        key = upload_key(session.worker_id, digest)
        try:
            kind, committed = await asyncio.to_thread(self._chunk_io, key, digest, u)
            if kind != "partial":
                self._stored(session, seq, digest, committed, duplicate=kind == "stored")
                return
        except UploadRejected as e:
            committed = await asyncio.to_thread(self._committed_offset, session.worker_id, digest)
            self._ack(session, seq, rejected(e.reason, e.detail), committed_offset=committed, digest=digest)
            return
        except StoreIOError as e:
            if not e.disk_full:
                fail_stop(e)
            # A full disk: the worker keeps the file and sends it again (STORAGE_FULL is transient).
            committed = await asyncio.to_thread(self._committed_offset, session.worker_id, digest)
            self._ack(session, seq, rejected(Rejection.STORAGE_FULL, f"the coordinator's disk is full: {e.what}"),
                      committed_offset=committed, digest=digest)
            return
        except StorageError as e:
            fail_stop(e)
        session.send(codec.ack_frame(seq, Outcome(OutcomeKind.ACCEPTED), committed_offset=committed, digest=digest))

    def _chunk_io(self, key: str, digest: Digest, u: Any) -> tuple[str, int]:
        """All file work of one chunk in one thread hop: ("stored" | "finished" | "partial",
        the committed offset or size)."""
        if self.artifacts.has(digest):
            return "stored", self.artifacts.size(digest)
        if u.data and u.offset > 0:
            committed = self.artifacts.write(key, u.offset, bytes(u.data))  # begun by an earlier chunk
        else:
            committed = self.artifacts.begin(key, digest, u.total_length)
            if u.data:
                committed = self.artifacts.write(key, u.offset, bytes(u.data))
        if u.last:
            _, size = self.artifacts.finish(key)
            return "finished", size
        return "partial", committed  # a probe (no data) answers with the committed offset

    def _stored(self, session: Session, seq: int, digest: Digest, size: int, *, duplicate: bool) -> None:
        """The bytes are durable; only now may the core learn of the digest."""
        if not duplicate:
            self.metrics.artifact_bytes.inc(size)

        def done(t: Transition) -> None:
            outcome = t.outcome if not duplicate or t.outcome.kind != OutcomeKind.ACCEPTED else Outcome(OutcomeKind.DUPLICATE)
            self._ack(session, seq, outcome, committed_offset=size, digest=digest)

        try:
            self.actor.submit(Request(make=lambda now: c.ArtifactStored(now, digest, size), done=done))
        except Overloaded:
            session.send(codec.ack_frame(seq, rejected(session.overloaded, "coordinator overloaded: resend"),
                                         committed_offset=0, digest=digest))


COORDINATOR_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name


def add_coordinator_to_server(servicer: CoordinatorServicer, server: Any) -> None:
    """The generated registration, except that a Session's responses may be bytes already
    serialized (the writer's bundles, codec.bundle_bytes); every other handler is the
    generated one. Registering with `add_CoordinatorServicer_to_server` would fail the
    first bundle written."""
    handlers: dict[str, Any] = {}

    class Capture:
        def add_generic_rpc_handlers(self, _: object) -> None:
            pass

        def add_registered_method_handlers(self, service: str, found: dict[str, Any]) -> None:
            assert service == COORDINATOR_SERVICE, service
            handlers.update(found)

    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, Capture())
    assert "Session" in handlers, "the generated registration did not name its handlers (grpcio-tools < 1.63?)"
    handlers["Session"] = handlers["Session"]._replace(response_serializer=codec.serialize_frame)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(COORDINATOR_SERVICE, handlers),))
    server.add_registered_method_handlers(COORDINATOR_SERVICE, handlers)


class AdminServicer(admin_pb2_grpc.AdminServicer):
    def __init__(self, actor: Actor, hub: Hub, tokens: TokenBook, artifacts: ArtifactStore, *,
                 store: Store | None = None, data_dir: Path | None = None,
                 incarnation: int = 0, page_key: bytes | None = None) -> None:
        self.actor, self.hub, self.tokens, self.artifacts = actor, hub, tokens, artifacts
        self.store, self.data_dir = store, data_dir  # for Backup (coordinator/backup.py)
        # The key lives and dies with the process: a token from an earlier one is stale.
        self.page_tokens = PageTokens(page_key or secrets.token_bytes(32), incarnation)

    async def _auth(self, context: Any) -> None:
        token, _ = bearer(context.invocation_metadata())
        try:
            self.tokens.check_admin(token)
        except AuthError as e:
            await context.abort(_status_for_auth(e), f"{Rejection.UNAUTHENTICATED.name if e.code == 'unauthenticated' else Rejection.PERMISSION_DENIED.name}: {e}")

    async def SubmitRun(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        if len(request.spec_json) > limits.SPEC_BYTES_MAX:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "SPEC_INVALID: spec too large")
        try:
            with no_gc():  # a large spec is many small records and no cycles
                spec = parse_spec_text(request.spec_json)
            policy = parse_policy_text(request.policy_json or "{}")
        except SpecError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"SPEC_INVALID: {e}")
            return None
        try:
            manifest = codec.decode_manifest(request.manifest, "the environment manifest")
        except FrameError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"SPEC_INVALID: {e.detail}")
            return None
        worker_keys = tuple(dict.fromkeys(request.worker_keys))
        if any(not k or len(k) > limits.MANIFEST_KEY_CHARS_MAX for k in worker_keys) or \
                len(worker_keys) > limits.MANIFEST_ENTRIES_MAX or set(worker_keys) & set(dict(manifest)):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "SPEC_INVALID: worker keys must be non-empty, bounded and not in the manifest")
            return None
        frozen_env = canonical_json({"manifest": dict(manifest), "workerKeys": list(worker_keys)}) \
            if manifest or worker_keys else ""
        run_id = run_id_for(spec.canonical, policy.canonical(), frozen_env)
        if request.HasField("run_id") and request.run_id and request.run_id != run_id:
            # A run is named by what it freezes: another id would be another spec or policy.
            given = request.run_id
            exists = await submit(self.actor, query=lambda s: given in s.runs)
            code = grpc.StatusCode.ALREADY_EXISTS if exists else grpc.StatusCode.INVALID_ARGUMENT
            what = "is frozen with another spec or policy" if exists else "is not this spec and policy's id"
            await context.abort(code, f"SPEC_CONFLICT: run id {given} {what} ({run_id})")
        t: Transition = await submit(self.actor, make=lambda now: c.RunSubmitted(now, run_id, spec, policy,
                                                                                 manifest, worker_keys))
        if t.outcome.kind == OutcomeKind.ACCEPTED:
            log.info("run_frozen", run_id=run_id, reference_keys=len(manifest), worker_keys=len(worker_keys),
                     bench_root=request.bench_root or None)
        if t.outcome.rejection == Rejection.SPEC_CONFLICT:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"SPEC_CONFLICT: {t.outcome.detail}")
        if t.outcome.rejection == Rejection.UNKNOWN_RUN:  # orderFrom names no run
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: {t.outcome.detail}")
        if not t.outcome.ok:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{t.outcome.rejection.name}: {t.outcome.detail}")
        return admin_pb2.SubmitRunResponse(run_id=run_id, created=t.outcome.kind == OutcomeKind.ACCEPTED)

    async def GetStatus(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        run_id = request.run_id if request.HasField("run_id") else None
        actor = self.actor
        view, shown, listed = request.workers_view, request.workers_shown, request.workers_listed_max
        out = await submit(actor, query=lambda s: views.status(s, run_id, actor.last_now_ms, view, shown, listed))
        if run_id and not out.runs:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        for wid, attempt_id, reason in self.hub.dead_letters:
            out.dead_letters.append(admin_pb2.DeadLetterStatus(worker_id=wid, attempt_id=attempt_id, reason=reason))
        return out

    async def _page_request(self, context: Any, kind: int, request: Any) -> tuple[int, Position, Tally]:
        """The page size and where to continue, or abort with INVALID_ARGUMENT."""
        if request.page_size < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{Rejection.MALFORMED_FRAME.name}: page_size {request.page_size} is negative")
        size = min(request.page_size or limits.PAGE_ITEMS_DEFAULT, limits.PAGE_ITEMS_MAX)
        if not request.page_token:
            return size, Position(), Tally()
        try:
            at, tally = self.page_tokens.decode(request.page_token, kind, request.run_id, self.actor.last_now_ms)
        except PageTokenError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{Rejection.PAGE_TOKEN_INVALID.name}: {e}")
            raise AssertionError("abort returns only by raising") from None
        return size, at, tally

    async def _page(self, context: Any, run_id: RunId, at: Position,
                    make: Callable[[Any], views.Page | None]) -> views.Page:
        """One page, built by one actor query: between pages the actor commits, so a large run
        never holds it for a whole walk. A verified token pointing past its run (it cannot: the
        order is fixed by the frozen spec) is refused like any other bad token."""
        def query(s: Any) -> views.Page | str | None:
            if run_id not in s.runs:
                return None
            return views.position_problem(s, run_id, at) or make(s)

        out = await submit(self.actor, query=query)
        if out is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        if isinstance(out, str):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{Rejection.PAGE_TOKEN_INVALID.name}: {out}")
        return out

    async def _too_large(self, context: Any, what: str) -> None:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, (
            f"{Rejection.MESSAGE_TOO_LARGE.name}: {what} do not fit one message of {limits.MESSAGE_BYTES_MAX} "
            "bytes: read them in pages (page_size, page_token; fleetctl does)"))

    async def GetResults(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        run_id = RunId(request.run_id)
        whole = not request.page_size and not request.page_token  # unpaged: one message or a refusal
        size, at, tally = await self._page_request(context, paging.KIND_RESULTS, request)
        out = admin_pb2.GetResultsResponse()
        total_bytes = 0
        while True:
            page = await self._page(context, run_id, at, lambda s, at=at, tally=tally: views.results_page(
                s, run_id, at, size, limits.PAGE_BYTES_MAX, tally))
            out.cells.extend(page.items)
            out.total_size = page.total
            total_bytes += page.size_bytes
            if page.next_at is None:
                assert page.summary is not None
                out.summary.CopyFrom(page.summary)
                return out
            at, tally = page.next_at, page.tally
            if not whole:
                out.next_page_token = self.page_tokens.encode(paging.KIND_RESULTS, run_id, at,
                                                              self.actor.last_now_ms, tally)
                return out
            if total_bytes > UNPAGED_BYTES_MAX:
                await self._too_large(context, f"the {page.total} cells of run {run_id}")

    async def ListAttempts(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        run_id = RunId(request.run_id)
        whole = not request.page_size and not request.page_token
        size, at, _ = await self._page_request(context, paging.KIND_ATTEMPTS, request)
        records: list = []
        total_bytes = 0
        while True:
            page = await self._page(context, run_id, at, lambda s, at=at: views.attempts_page(
                s, run_id, at, size, limits.PAGE_BYTES_MAX))
            records.extend(page.items)
            total_bytes += page.size_bytes
            if page.next_at is None:
                if whole:  # as before paging existed: the whole run in dispatch order
                    records.sort(key=lambda rec: rec.dispatch_order)
                return admin_pb2.ListAttemptsResponse(attempts=records)
            at = page.next_at
            if not whole:
                return admin_pb2.ListAttemptsResponse(attempts=records, next_page_token=self.page_tokens.encode(
                    paging.KIND_ATTEMPTS, run_id, at, self.actor.last_now_ms, Tally()))
            if total_bytes > UNPAGED_BYTES_MAX:
                await self._too_large(context, f"the attempts of run {run_id}")

    async def _action(self, context: Any, make: Callable[[int], object]) -> Any:
        await self._auth(context)
        t: Transition = await submit(self.actor, make=make)
        return codec.action_response(t.outcome)

    async def PauseRun(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.RunPaused(now, RunId(request.run_id)))

    async def RecoverRun(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        # A new spend cap, when given; the core judges it against the run's spend (SPEND_CAP_REACHED).
        cap = request.max_observed_cost_usd if request.HasField("max_observed_cost_usd") else None
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{Rejection.MALFORMED_FRAME.name}: "
                                f"max_observed_cost_usd must be a positive number of dollars, not {cap!r}")
        t: Transition = await submit(self.actor, make=lambda now: c.RunRecovered(now, RunId(request.run_id), cap))
        return codec.action_response(t.outcome)

    async def RepairRun(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.RunRepaired(now, RunId(request.run_id), request.reason))

    async def RetryCell(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.CellRetryGranted(now, RunId(request.run_id),
                                                                           CellId(request.cell_id)))

    async def DrainWorker(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.WorkerDrained(now, WorkerId(request.worker_id)))

    async def ReleaseWorker(self, request: Any, context: Any) -> Any:
        return await self._action(context, lambda now: c.WorkerReleased(now, WorkerId(request.worker_id)))

    async def Watch(self, request: Any, context: Any) -> Any:
        async with contextlib.aclosing(self._watch(request, context)) as batches:  # unregisters at once
            async for batch in batches:
                for ev in batch:
                    yield ev

    async def WatchEvents(self, request: Any, context: Any) -> Any:
        async with contextlib.aclosing(self._watch(request, context)) as batches:
            async for batch in batches:
                yield admin_pb2.EventBatch(events=batch)

    async def _watch(self, request: Any, context: Any) -> AsyncIterator[list[Any]]:
        """Every event published from the registration on, as many as are queued at each turn:
        a watcher one message behind per event would fall behind a burst for good."""
        await self._auth(context)
        q: asyncio.Queue = asyncio.Queue(WATCH_QUEUE_EVENTS_MAX)
        entry = (request.run_id if request.HasField("run_id") else None, q)
        self.hub.watchers.append(entry)
        try:
            # First, that the watch is live: every event from here on reaches this watcher.
            yield [admin_pb2.Event(at_ms=time.time_ns() // 1_000_000, event="watch_started", run_id=entry[0] or "",
                                   detail=f"watching run {entry[0]}" if entry[0] else "watching every run")]
            while True:
                batch = [await q.get()]
                size = batch[0].ByteSize()
                while not q.empty() and len(batch) < WATCH_BATCH_EVENTS_MAX and size < WATCH_BATCH_BYTES_MAX:
                    batch.append(q.get_nowait())
                    size += batch[-1].ByteSize()
                dropped = self.hub.watch_dropped.pop(id(q), 0)
                if dropped:
                    batch.insert(0, admin_pb2.Event(at_ms=batch[0].at_ms, event="watch_events_dropped", detail=(
                        f"{dropped} events were dropped: this watcher fell more than "
                        f"{WATCH_QUEUE_EVENTS_MAX} events behind")))
                yield batch
        finally:
            self.hub.watchers.remove(entry)
            self.hub.watch_dropped.pop(id(q), None)

    async def Backup(self, request: Any, context: Any) -> Any:
        """On a thread of its own: LMDB's copy is one read transaction beside the actor's commits."""
        await self._auth(context)
        if self.store is None or self.data_dir is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this coordinator was started without backup support")
        store, data_dir = self.store, self.data_dir
        try:
            r = await asyncio.to_thread(take_backup, store, self.artifacts, data_dir, Path(request.dest_dir))
        except BackupError as e:
            await context.abort(grpc.StatusCode.ABORTED if e.busy else grpc.StatusCode.FAILED_PRECONDITION,
                                f"BACKUP_FAILED: {e}")
            return None
        log.info("backup_written", dest=r.dest_dir, last_index=r.last_index, artifacts=r.artifacts,
                 copy_ms=r.copy_ms, total_ms=r.total_ms)
        return admin_pb2.BackupResponse(dest_dir=r.dest_dir, last_index=r.last_index, runs=r.runs,
                                        artifacts=r.artifacts, artifact_bytes=r.artifact_bytes, wal_bytes=r.wal_bytes,
                                        copy_ms=r.copy_ms, total_ms=r.total_ms)

    async def GetArtifact(self, request: Any, context: Any) -> Any:
        await self._auth(context)
        digest = request.digest
        if not await asyncio.to_thread(self.artifacts.has, digest):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"ARTIFACT_MISSING: {digest} is not stored")
        try:
            chunks = await asyncio.to_thread(lambda: list(self.artifacts.open_verified(digest, limits.CHUNK_BYTES_MAX)))
        except ArtifactCorrupt as e:
            await context.abort(grpc.StatusCode.DATA_LOSS, f"DIGEST_MISMATCH: {e}")
            return
        total = sum(len(b) for b in chunks)
        offset = 0
        for data in chunks:
            yield admin_pb2.ArtifactChunk(offset=offset, data=data, total_length=total)
            offset += len(data)
        if not chunks:
            yield admin_pb2.ArtifactChunk(offset=0, data=b"", total_length=0)
