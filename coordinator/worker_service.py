"""The worker service (`Coordinator.Session`): authenticate, register with hello and welcome,
read frames and turn each into a request for the actor (coordinator/codec.py decodes), and
acknowledge what the actor committed. Uploads and the liveness feed are mixins of their own
(coordinator/uploads.py, coordinator/liveness.py)."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import structlog

from common import limits
from common.fleetpb import coordinator_pb2, coordinator_pb2_grpc
from common.ids import AssignmentId, RunId, WorkerId
from common.rejections import Rejection
from coordinator import codec, views
from coordinator.actor import Actor, Overloaded, Reply, Reports, Request
from coordinator.artifacts import ArtifactStore
from coordinator.auth import AuthError, TokenBook, bearer, certificate_identity_problem
from coordinator.codec import FrameError
from coordinator.core import commands as c
from coordinator.core.effects import Outcome, OutcomeKind, Transition, rejected
from coordinator.edge import Hub, Session, SessionCut, forget_cut, put_request, status_for_auth, submit, too_large_detail
from coordinator.liveness import LivenessFeed
from coordinator.metrics import Metrics
from coordinator.uploads import Uploads

log = structlog.get_logger("fleet.servicer")
HELLO_TIMEOUT_S = 30
DEAD_LETTERS_KEPT_MAX = 10_000
STREAM_ENDED = "stream ended"  # the cut reason when the worker's side ended the stream


class CoordinatorServicer(Uploads, LivenessFeed, coordinator_pb2_grpc.CoordinatorServicer):
    """The worker service: one Session stream per worker, frames in, acks and pushes out;
    its uploads (coordinator/uploads.py) and its liveness feed (coordinator/liveness.py) are
    the two mixins."""

    def __init__(self, actor: Actor, hub: Hub, tokens: TokenBook, artifacts: ArtifactStore,
                 coordinator_incarnation: int, metrics: Metrics | None = None, *,
                 client_identity: bool = False) -> None:
        self.actor, self.hub, self.tokens, self.artifacts = actor, hub, tokens, artifacts
        self.incarnation = coordinator_incarnation
        if metrics is not None:
            hub.metrics = metrics
        self.metrics = hub.metrics
        self.client_identity = client_identity  # mTLS: the certificate must name the claimed worker

    def _ack(self, session: Session, seq: int, outcome: Outcome, **kw: Any) -> None:
        """An Ack sent at once (a frame refused before it reached the actor, an upload's chunk);
        the Acks of applied frames are sent by the edge after the commit (Hub.answer)."""
        self.hub.ack(session, seq, outcome, **kw)

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
            await context.abort(status_for_auth(e), f"{Rejection.UNAUTHENTICATED.name if e.code == 'unauthenticated' else Rejection.PERMISSION_DENIED.name}: {e}")
            return
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT_S)
        except asyncio.TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "MALFORMED_FRAME: no hello within 30 s")
            return
        if first is grpc.aio.EOF:
            return
        if first.ByteSize() > limits.MESSAGE_BYTES_MAX:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large_detail(first.ByteSize()))
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
        newer = self.hub.hello_streams.stale(wid, hello.incarnation, hello.stream)
        if newer:
            # Refused before the core hears of it: reconciled against, its owned list (older
            # than the live session's pushes) would hand on groups the worker is running.
            log.warning("hello_stale", worker_id=wid, incarnation=hello.incarnation, stream=hello.stream,
                        newer_stream=newer)
            await context.abort(grpc.StatusCode.ABORTED,
                                f"{Rejection.SESSION_STALE.name}: stream {hello.stream} of incarnation "
                                f"{hello.incarnation}, but this worker process already opened stream {newer}: "
                                "a Hello delayed in a dead connection")
            return
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
            except* SessionCut as cut:
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

        await put_request(self.actor, Request(make=codec.hello_command(wid, hello, environment), done=done))
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
                 environment_id=hello.environment_id, owned=len(cmd_owned), buffered=len(hello.buffered_attempt_ids),
                 enrolled=bool(credential))

    async def _writer(self, session: Session, context: Any) -> None:
        while True:
            frame = session.held.pop() if session.held else await session.queue.get()
            if frame is None:
                raise SessionCut(session.cut_reason)  # ends the reader too, through the task group
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
                    session.abort = (grpc.StatusCode.RESOURCE_EXHAUSTED, too_large_detail(size))
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
        elif kind in codec.COMMAND_FRAMES:
            self._apply(session, Request(make=codec.frame_command(kind, getattr(frame, kind), wid, session.incarnation),
                                         reply=Reply(session, (seq,), time.perf_counter(), kind in codec.REFILL_FRAMES)))
        elif kind == "report_batch":
            self._report_batch(session, seq, frame.report_batch.reports)
        elif kind == "upload_chunk":
            await self._upload(session, seq, frame.upload_chunk)
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
            await context.abort(status_for_auth(e), f"{Rejection.UNAUTHENTICATED.name}: {e}")
            return None
        run_id = RunId(request.run_id)
        out = await submit(self.actor, query=lambda s: views.run_environment(s, run_id))
        if out is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"UNKNOWN_RUN: run {run_id} does not exist")
        return out

    def _report_batch(self, session: Session, first_seq: int, reports: Any) -> None:
        """Every report of the batch in one actor request, so one group commit; each is acked
        on its own seq after that commit. A report that does not decode is refused alone."""
        if not reports:
            raise FrameError(Rejection.MALFORMED_FRAME, "a report batch without reports")
        if len(reports) > limits.REPORT_BATCH_REPORTS_MAX:
            raise FrameError(Rejection.MALFORMED_FRAME, f"a report batch of {len(reports)} reports exceeds "
                                                        f"{limits.REPORT_BATCH_REPORTS_MAX}")
        seqs: list[int] = []
        rows: list[codec.ReportRow] = []
        wire: list[Any] = []  # each report's message: its log record copies it (encode once)
        wid = WorkerId(session.worker_id)
        report_row = codec.report_row
        for i, r in enumerate(reports):
            seq = first_seq + i
            try:
                row = report_row(r)
            except FrameError as e:
                self._ack(session, seq, rejected(e.rejection, e.detail))
                continue
            if r.offered:  # a result offered after a restore is a command of its own
                self._apply(session, Request(make=codec.offered_command(wid, row),
                                             reply=Reply(session, (seq,), time.perf_counter(), True)))
                continue
            seqs.append(seq)
            rows.append(row)
            wire.append(r.report)
        if rows:
            self._apply(session, Request(reports=Reports(wid, rows, wire),
                                         reply=Reply(session, tuple(seqs), time.perf_counter(), True, batch=True)))

    def _apply(self, session: Session, request: Request) -> None:
        """A worker frame's command to the actor; its Ack follows the commit (`request.reply`,
        Hub.answer), or at once a rejection the worker resends when the actor is overloaded."""
        try:
            self.actor.submit(request)
        except Overloaded:
            assert request.reply is not None
            for seq in request.reply.seqs:
                self._ack(session, seq, rejected(session.overloaded, "coordinator overloaded: resend"))


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
