"""The worker's session with the coordinator: one bidi stream at a time, groups that outlive
streams, and the durable outbox between the two.

Rules, in the order things become durable:
1. A push is recorded (`record_assignment`) before any of its cells starts; a repeat, or a
   push of a finished assignment, is ignored. All cells of a group start together.
2. An outcome is put into the outbox (files copied and fsynced, the entry committed) before
   its scratch dir is deleted and before anything about it is sent.
3. A report is sent only after every artifact it references was acknowledged as durable on
   the same stream (the last chunk's ack, or a probe answered DUPLICATE).
4. An entry leaves the outbox only on the coordinator's ack (ACCEPTED, DUPLICATE, LATE), or
   by dead letter when it is refused for good.
5. An assignment is finished locally only after its GroupFinished was acknowledged, after
   every one of its reports settled; a revoked one once its outcomes are in the outbox. To a
   coordinator of protocol 5, whose last report commit releases the assignment, one whose
   every cell was acknowledged ACCEPTED or DUPLICATE is finished without a GroupFinished, in
   the outbox commit of those acks (or, queued behind them, the next one).

Ownership. The session's TaskGroup owns the groups (they keep running while disconnected)
and the drain and abort controls; each stream's TaskGroup owns its writer, reader,
heartbeat ticker, outbox pump and finisher, which all die with the stream. Every queue has
a named bound; the heartbeat is one coalesced slot that goes before queued frames. The reader
never waits for room in the send queue, so acks always get through.

Protocol 4, when the Welcome offers it: reports queued behind each other leave as one
ReportBatch (one seq per report, each acked on its own); a FrameBundle from the coordinator
is read frame by frame; heartbeats go out only when what they say changed, or at the idle
interval, since the transport's keepalive carries liveness.

Failures. A stream closed with UNAUTHENTICATED, PERMISSION_DENIED or FAILED_PRECONDITION
ends the session (`Refused`); any other end of a stream reconnects with exponential backoff
and full jitter; storage errors of the state directory propagate (fail-stop).
"""
from __future__ import annotations

import asyncio
import dataclasses
import enum
import importlib.metadata
import os
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import structlog

from common.identity import cell_environment_id
from common.evidence import ArtifactRef, ArtifactUnavailable, Cleanup, Execution, Report, Status, Usage, Verification
from common.fleetpb import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from common.ids import AssignmentId, AttemptId
from common.limits import (
    ARTIFACT_BYTES_MAX,
    CHUNK_BYTES_MAX,
    HEARTBEAT_INTERVAL_MS_DEFAULT,
    HEARTBEAT_INTERVAL_MS_MAX,
    HEARTBEAT_INTERVAL_MS_MIN,
    ID_CHARS_MAX,
    KEEPALIVE_TIME_MS,
    KEEPALIVE_TIMEOUT_MS,
    MESSAGE_BYTES_MAX,
    RECONNECT_BACKOFF_MS_MAX,
    RECONNECT_BACKOFF_MS_MIN,
    REJOIN_ATTEMPT_MS,
    REJOIN_WINDOW_MS,
    REPORT_BATCH_BYTES_MAX,
    REPORT_BATCH_REPORTS_MAX,
    SESSION_SEND_QUEUE_FRAMES_MAX,
    UPLOADS_IN_FLIGHT_MAX,
)
from worker import codec
from worker import protocol as wp
from worker.config import (
    ABORT_GRACE_MS,
    ROOM_RECHECK_MS,
    COMPLETION_BY_REPORTS_PROTOCOL_VERSION,
    GOODBYE_ACK_TIMEOUT_MS,
    HELLO_BUFFERED_IDS_CHARS_MAX,
    OUTBOX_FULL_RETRY_MS,
    PROTOCOL_VERSION,
    REPORT_BATCH_PROTOCOL_VERSION,
    REPORT_SENDS_MAX,
    REPORTS_IN_FLIGHT_MAX,
    RUN_OFFERS_QUEUED_MAX,
    UPLOAD_CHUNKS_IN_FLIGHT_MAX,
    UPLOAD_RESTARTS_MAX,
    WELCOME_TIMEOUT_MS,
    ConfigError,
    WorkerConfig,
)
from worker.executor.base import (AttemptDirs, CancelEvent, CellJob, CellOutcome, Executor, now_ms, one_line,
                                  remove_tree, seal)
from worker.executor.registry import executor_for as default_executor_for
from worker.identity import measure_keys
from worker.outbox import AssignmentConflict, OutboxEntry, OutboxFull, OutboxStorageError, WorkerState, free_bytes

REFUSAL_DIFFERENCES_LOGGED_MAX = 20

__all__ = ["Ended", "Refused", "WorkerSession", "channel_options", "software_version"]

# Closing codes that no retry can fix: a wrong token, a credential used where it does not
# apply, a worker the coordinator will not admit (environment mismatch, stale incarnation).
PERMANENT_STATUS_CODES = frozenset({
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
})

_ACCEPTED = common_pb2.ACK_OUTCOME_ACCEPTED
_DUPLICATE = common_pb2.ACK_OUTCOME_DUPLICATE
_LATE = common_pb2.ACK_OUTCOME_LATE
_REJECTED = common_pb2.ACK_OUTCOME_REJECTED
# An upload the coordinator refuses for these is restarted from the offset its ack names.
_UPLOAD_RESTARTABLE = frozenset({
    common_pb2.REJECTION_REASON_DIGEST_MISMATCH,
    common_pb2.REJECTION_REASON_LENGTH_MISMATCH,
    common_pb2.REJECTION_REASON_CHUNK_OUT_OF_RANGE,
})
# Refusals that say "nothing was changed, send it again later", resent after a backoff and never
# dead-lettered: the coordinator's disk is full, its actor is overloaded (OVERLOADED; STORAGE_FULL
# to a worker below protocol 6), or a result offered after a restore came before this worker
# measured the run on the stream.
_TRANSIENT = frozenset({common_pb2.REJECTION_REASON_STORAGE_FULL, common_pb2.REJECTION_REASON_OVERLOADED,
                        common_pb2.REJECTION_REASON_NOT_YET_MEASURED})

log = structlog.get_logger("worker.session")


class Refused(Exception):
    """The coordinator refused this worker for good; the operator must act."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__(f"{code.name}: {details}")


class Ended(enum.Enum):
    DRAINED = "drained"  # drain finished (or timed out) and Goodbye was said
    ABORTED = "aborted"  # stopped on a second signal; the outbox keeps what finished


class _Closed(Exception):
    """This stream ended on purpose, after Goodbye."""


class _StreamEnded(Exception):
    """The coordinator ended the stream without a status error."""


class _ProtocolError(Exception):
    """The coordinator sent something the contract does not allow; reconnect."""


class _Aborted(Exception):
    """A second signal: stop now."""


class _GiveUp(Exception):
    """An outbox entry that can never be delivered; the text is its dead-letter reason."""


_RECONNECTABLE = (grpc.RpcError, _StreamEnded, _ProtocolError, TimeoutError, asyncio.InvalidStateError)


def software_version() -> str:
    try:
        return importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def channel_options() -> list[tuple[str, int]]:
    """Spelled out from the named limits, never left to library defaults."""
    return [
        ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
        ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS_MIN),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS_MIN),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS_MAX),
        # A fresh channel (a rejoin attempt, `_rejoin`) gets a fresh connection and backoff, not
        # the global pool's subchannel that is still backing off.
        ("grpc.use_local_subchannel_pool", 1),
    ]


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from _leaves(e)
    else:
        yield exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(eq=False)
class _Group:
    """What the shell keeps of a running group beside the protocol's `Held` (worker/protocol.py,
    where its state and next step live): the cancel event its executors watch, and its task."""

    cancel: CancelEvent = field(default_factory=CancelEvent)
    task: asyncio.Task[None] | None = None
    unbuffered: int = 0  # its cells whose outcome is not yet in the outbox


_ACK_KINDS = {_ACCEPTED: wp.AckKind.ACCEPTED, _DUPLICATE: wp.AckKind.DUPLICATE, _LATE: wp.AckKind.LATE}


class _Stream:
    """One bidi call: seq numbering, the bounded send queue with its coalesced heartbeat
    slot, and the futures waiting for acks. Dies with the call."""

    def __init__(self, call: Any, number: int) -> None:
        self.call = call
        self.number = number
        self._seq = 0
        self._acks: dict[int, asyncio.Future[coordinator_pb2.Ack]] = {}
        self._items: deque[tuple[str, Any, asyncio.Future[coordinator_pb2.Ack] | None]] = deque()
        self._cond = asyncio.Condition()
        self._heartbeat_due = False
        self.said_goodbye = False
        self.durable: set[str] = set()  # digests acknowledged as durable on this stream
        self.uploading: dict[str, asyncio.Event] = {}  # digest -> set when that upload ends
        self.upload_slots = asyncio.Semaphore(UPLOADS_IN_FLIGHT_MAX)
        # Runs offered on this stream, measured once each by the measurer task, in order.
        self.offers: asyncio.Queue[tuple[str, tuple[str, ...]]] = asyncio.Queue(RUN_OFFERS_QUEUED_MAX)
        self.offered: dict[str, None] = {}
        self.report_slots = asyncio.Semaphore(REPORTS_IN_FLIGHT_MAX)
        # Entries the outbox wrote while this stream was open, in the order their puts
        # returned: the pump takes them from here instead of reading them back (`_fresh_page`).
        self.fresh: deque[OutboxEntry] = deque()
        self._upload_count = 0
        self.frames_written = 0  # frames and the reports in them: the "stream totals" line at its end
        self.reports_written = 0
        self.report_batches = False  # the coordinator speaks protocol 4: queued reports go as one frame
        self.completion_by_reports = False  # protocol 5: an assignment acked in full needs no GroupFinished

    def upload_id(self, digest: str) -> str:
        self._upload_count += 1
        return f"u{self._upload_count}-{digest.removeprefix('sha256:')[:16]}"

    def _frame(self, name: str, msg: Any) -> coordinator_pb2.WorkerFrame:
        self._seq += 1
        frame = coordinator_pb2.WorkerFrame(seq=self._seq)
        getattr(frame, name).CopyFrom(msg)
        return frame

    async def write_first(self, name: str, msg: Any) -> None:
        """The Hello, written before the writer task runs."""
        assert self._seq == 0, "the first frame of a stream is written once"
        await self.call.write(self._frame(name, msg))

    async def send(self, name: str, msg: Any, *, ack: bool) -> asyncio.Future[coordinator_pb2.Ack] | None:
        """Queue a frame, waiting while the queue is full; the future resolves with its Ack."""
        fut = asyncio.get_running_loop().create_future() if ack else None
        async with self._cond:
            await self._cond.wait_for(lambda: len(self._items) < SESSION_SEND_QUEUE_FRAMES_MAX)
            self._items.append((name, msg, fut))
            self._cond.notify_all()
        return fut

    async def request(self, name: str, msg: Any) -> coordinator_pb2.Ack:
        fut = await self.send(name, msg, ack=True)
        assert fut is not None
        return await fut

    async def heartbeat_due(self) -> None:
        """Ask for one heartbeat; asking again before it is sent changes nothing."""
        async with self._cond:
            self._heartbeat_due = True
            self._cond.notify_all()

    async def writer(self, heartbeat: Callable[[], coordinator_pb2.Heartbeat]) -> None:
        while True:
            async with self._cond:
                # Nothing follows a goodbye, not even a heartbeat.
                await self._cond.wait_for(lambda: (self._heartbeat_due and not self.said_goodbye)
                                          or bool(self._items))
                if self._heartbeat_due and not self.said_goodbye:
                    self._heartbeat_due = False
                    name, msg, fut = "heartbeat", heartbeat(), None
                else:
                    name, msg, fut = self._items.popleft()
                    if name == "cell_report" and self.report_batches and self._items:
                        frame = self._report_batch(msg, fut)
                        self._cond.notify_all()
                        self.frames_written += 1
                        self.reports_written += len(frame.report_batch.reports)
                        await self.call.write(frame)
                        continue
                    self._cond.notify_all()
            frame = self._frame(name, msg)
            if fut is not None:
                self._acks[frame.seq] = fut
            if name == "goodbye":
                self.said_goodbye = True
            self.frames_written += 1
            self.reports_written += name == "cell_report"
            await self.call.write(frame)

    def _report_batch(self, first: coordinator_pb2.CellReport,
                      fut: asyncio.Future[coordinator_pb2.Ack] | None) -> coordinator_pb2.WorkerFrame:
        """`first` and the reports queued right behind it, in order, as one ReportBatch that
        takes one seq per report (each report keeps its own ack)."""
        reports = [(first, fut)]
        size = first.ByteSize()
        while (self._items and self._items[0][0] == "cell_report" and len(reports) < REPORT_BATCH_REPORTS_MAX
               and size + self._items[0][1].ByteSize() <= REPORT_BATCH_BYTES_MAX):
            _, msg, f = self._items.popleft()
            reports.append((msg, f))
            size += msg.ByteSize()
        frame = coordinator_pb2.WorkerFrame(seq=self._seq + 1)
        frame.report_batch.reports.extend(msg for msg, _ in reports)
        for msg, f in reports:
            self._seq += 1
            if f is not None:
                self._acks[self._seq] = f
        return frame

    def on_ack(self, ack: coordinator_pb2.Ack) -> bool:
        fut = self._acks.pop(ack.seq, None)
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(ack)
        return True

    def close(self) -> None:
        for fut in self._acks.values():
            fut.cancel()
        self._acks.clear()
        for _, _, fut in self._items:
            if fut is not None:
                fut.cancel()
        self._items.clear()
        self.call.cancel()


ExecutorFor = Callable[..., Executor]


class WorkerSession:
    """The worker process's life with the coordinator, over an open state directory.

    `await run()` returns `Ended.DRAINED` after `drain()` (or SIGTERM in `fleet-worker`) has
    let the groups settle, flushed the outbox and said Goodbye; `Ended.ABORTED` after
    `abort()`; raises `Refused` when the coordinator refuses the worker for good. The caller
    owns `state` and closes it after `run` returns.
    """

    def __init__(self, config: WorkerConfig, state: WorkerState, *, manifest: dict[str, str],
                 environment_id: str, executor_for: ExecutorFor = default_executor_for,
                 rng: random.Random | None = None, version: str | None = None) -> None:
        self._config = config
        self._state = state
        self._manifest = dict(sorted(manifest.items()))
        self._environment_id = environment_id
        self._executor_for = executor_for
        self._rng = rng or random.Random()
        self._version = version or software_version()
        self._work_root = config.work_dir / "attempts"
        # The held groups and what each may do next: the sans-I/O protocol, which this shell
        # feeds facts (`_handle`) and whose actions it carries out (`_act`).
        self._proto = wp.WorkerProtocol()
        self._running: dict[AssignmentId, _Group] = {}  # groups whose task runs
        self._chan: grpc.aio.Channel  # the channel to the coordinator, made in run (a rejoin makes another)
        self._stream: _Stream | None = None  # the open stream, welcomed, and its task group
        self._stream_tasks: asyncio.TaskGroup | None = None
        self._running_cells = 0
        self._changed = asyncio.Event()
        # Set when a report is put into the outbox: the only change that gives the pump work, so
        # it neither wakes nor reads the outbox at every ack, settle or group end (_changed).
        self._put = asyncio.Event()
        self._drain_requested = asyncio.Event()
        self._abort_requested = asyncio.Event()
        self._goodbye = asyncio.Event()
        self._draining = asyncio.Event()  # set once the drain's deadline is known
        self._drain_deadline = 0.0
        self._token = ""
        self._has_credential = False  # until then the token file is re-read before each connect
        self._heartbeat_interval_s = HEARTBEAT_INTERVAL_MS_DEFAULT / 1000
        self._idle_heartbeat_s = 0.0  # 0: a heartbeat every interval
        self._groups: asyncio.TaskGroup | None = None
        self._log = log.bind(worker=config.worker_id)
        self.streams_opened = 0
        self.refusals: dict[str, str] = {}  # run id -> why it refused this worker
        # What the per-cell lines (at debug) would say, counted (the hot path logs no line at info).
        self.reports_acked = 0
        self.groups_finished = 0
        self.connected = False  # a stream is open and welcomed
        self._offer_below = 0  # outbox entries below this seq are offered after a restore
        # Why no new cell starts now (the state dir's disk is full), for the heartbeat and the
        # status line; "" while there is room (`_wait_for_room`).
        self.degraded = ""
        self._room_seen_at = -1e9  # loop time of the last look that found room (_wait_for_room)
        self._outcomes_waiting = 0  # outcomes held in memory until the disk has room
        self.welcomed = asyncio.Event()  # set at the first Welcome (sd_notify READY=1)

    # ---- control --------------------------------------------------------------------------

    def drain(self) -> None:
        """Stop taking work, let running groups settle, flush, say Goodbye, end `run`."""
        self._drain_requested.set()

    def abort(self) -> None:
        """Cancel running groups and end `run` promptly; the outbox keeps what finished."""
        self._abort_requested.set()

    @property
    def held_assignment_ids(self) -> list[AssignmentId]:
        return list(self._proto.held)

    @property
    def draining(self) -> bool:
        return self._drain_requested.is_set()

    def status_line(self) -> str:
        """One line for systemd's STATUS=: connection, busy slots, outbox depth."""
        state = "connected" if self.connected else "connecting"
        if self.draining:
            state = "draining, " + state
        busy = len(self._proto.running())
        line = f"{state}, {busy}/{self._config.slots} slots busy, outbox {self._state.depth}"
        return line + (f"; no new cell: {self.degraded}" if self.degraded else "")

    def _notify(self) -> None:
        """Wake everyone waiting for a change of the held set or the outbox."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _handle(self, event: wp.Event) -> tuple[list[wp.Action], list[asyncio.Future[Any]]]:
        """Feed the protocol one fact and carry out its actions, in order. Returns the actions
        and the futures of the outbox commits they queued: a caller that must wait for those
        awaits them; one that must not (a commit's callback) hands them to `_watch`."""
        actions = self._proto.handle(event)
        futures = [f for f in map(self._act, actions) if f is not None]
        self._notify()
        return actions, futures

    def _act(self, action: wp.Action) -> asyncio.Future[Any] | None:
        """One action. RecordAssignment, StartGroup, StoreReport and SendHeartbeat are carried out
        by the caller that fed the event (it holds the push or the outcome they need)."""
        if isinstance(action, wp.CommitAck):
            # Settled by the commit itself, not by the task that asked: a stream cut while the
            # ack commits cancels that task, and the entry, no longer pending, is never replayed.
            acked = self._state.ack_queued(action.attempt_id)
            event = wp.AckCommitted(action.assignment_id, action.attempt_id)
            acked.add_done_callback(lambda f: f.cancelled() or f.exception() or self._watch(self._handle(event)[1]))
            return acked
        if isinstance(action, wp.FinishAssignment):
            done = self._state.finish_assignment_queued(action.assignment_id)

            def finished(f: asyncio.Future[None], a: wp.FinishAssignment = action) -> None:
                ok = not f.cancelled() and f.exception() is None
                if ok and a.by is not wp.FinishBy.REVOKE:
                    self.groups_finished += 1
                self._handle(wp.AssignmentFinished(a.assignment_id, ok))

            done.add_done_callback(finished)
            return done
        if isinstance(action, wp.SendGroupFinished):
            s, tg = self._stream, self._stream_tasks
            assert s is not None and tg is not None, "a GroupFinished is asked for on an open stream only"
            try:
                tg.create_task(self._finish_group(s, action.assignment_id, action.reason))
            except RuntimeError:
                pass  # the stream is ending: the protocol hears StreamClosed next and asks again later
        elif isinstance(action, wp.CancelGroup):
            group = self._running.get(action.assignment_id)
            if group is not None:
                group.cancel.set()
        elif isinstance(action, wp.DeliverReport):
            self._notify_put()
        return None

    def _watch(self, futures: list[asyncio.Future[Any]]) -> None:
        """Outbox commits nobody awaits: a storage error still ends the stream (fail-stop)."""
        for fut in futures:
            for tg in (self._stream_tasks, self._groups):
                if tg is None:
                    continue
                try:
                    tg.create_task(self._await(fut))
                    break
                except RuntimeError:
                    continue

    def _notify_put(self) -> None:
        """Wake the pump: a report was put into the outbox."""
        self._put.set()
        self._put = asyncio.Event()

    async def _wait_until(self, predicate: Callable[[], bool], timeout_s: float | None) -> bool:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            changed = self._changed
            if predicate():
                return True
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return predicate()

    # ---- the session ----------------------------------------------------------------------

    async def run(self) -> Ended:
        self._token = self._initial_token()
        await asyncio.to_thread(self._prepare_work_root)
        self._adopt_orphans()
        self._chan = self._channel()
        refused: Refused | None = None
        aborted = False
        try:
            async with asyncio.TaskGroup() as tg:
                self._groups = tg
                control = [tg.create_task(self._drain_control()), tg.create_task(self._abort_control())]
                await self._connect_loop()
                for t in control:
                    t.cancel()
                for group in self._running.values():
                    if group.task is not None:
                        group.task.cancel()
        except BaseExceptionGroup as eg:
            leaves = list(_leaves(eg))
            rest = [e for e in leaves if not isinstance(e, (Refused, _Aborted))]
            if rest:
                raise
            refused = next((e for e in leaves if isinstance(e, Refused)), None)
            aborted = refused is None
        finally:
            self._groups = None
            await self._chan.close()
        if refused is not None:
            raise refused
        if aborted:
            self._log.warning("worker stopped without draining", outbox_depth=self._state.depth)
            return Ended.ABORTED
        self._log.info("worker drained", outbox_depth=self._state.depth,
                       held=len(self._proto.held))
        return Ended.DRAINED

    def _initial_token(self) -> str:
        credential = self._state.load_credential()
        if credential:
            self._has_credential = True
            return credential
        return self._read_token_file()

    def _read_token_file(self) -> str:
        try:
            token = self._config.token_file.read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read --token-file {self._config.token_file}: {e.strerror or e}") from None
        if not token:
            raise ConfigError(f"--token-file {self._config.token_file} is empty")
        return token

    def _prepare_work_root(self) -> None:
        """Scratch left by an earlier process belongs to attempts no one runs any more."""
        if self._work_root.is_dir():
            for child in self._work_root.iterdir():
                remove_tree(child)
        self._work_root.mkdir(parents=True, exist_ok=True)

    def _adopt_orphans(self) -> None:
        """Assignments recorded by an earlier process and never finished: nothing runs them
        now. Their buffered reports are replayed; then they are handed back."""
        buffered: dict[str, dict[AttemptId, None]] = {}
        for entry in self._pending_entries():
            buffered.setdefault(entry.assignment_id, {})[entry.attempt_id] = None
        for aid, payload in self._state.assignments():
            push = codec.push_from_record(payload)
            ids = tuple(buffered.get(aid, ()))
            self._handle(wp.OrphanAdopted(aid, push.run_id, ids))  # no stream yet: no action
            self._log.info("orphaned assignment will be handed back", run=push.run_id, assignment=aid,
                           buffered=len(ids))

    def _pending_entries(self) -> Iterator[OutboxEntry]:
        after = 0
        while page := self._state.pending(after_seq=after, limit=REPORTS_IN_FLIGHT_MAX):
            yield from page
            after = page[-1].seq

    def _channel(self) -> grpc.aio.Channel:
        target = self._config.coordinator
        if self._config.tls_ca is not None:
            cert, key = self._config.tls_cert, self._config.tls_key
            creds = grpc.ssl_channel_credentials(
                root_certificates=self._config.tls_ca.read_bytes(),
                private_key=key.read_bytes() if key is not None else None,
                certificate_chain=cert.read_bytes() if cert is not None else None)
            return grpc.aio.secure_channel(target, creds, options=channel_options())
        return grpc.aio.insecure_channel(target, options=channel_options())

    async def _drain_control(self) -> None:
        await self._drain_requested.wait()
        loop = asyncio.get_running_loop()
        self._drain_deadline = loop.time() + self._config.drain_timeout_s
        self._draining.set()
        self._handle(wp.DrainStarted())
        running = self._proto.running()
        self._log.info("draining: no new work", running_groups=len(running),
                       drain_timeout_s=self._config.drain_timeout_s)
        self._notify()
        if not await self._wait_until(self._nothing_running, self._config.drain_timeout_s):
            self._log.warning("drain timeout: cancelling running groups",
                              groups=self._proto.running())
            await self._cancel_running()
        settled = await self._wait_until(lambda: self._state.depth == 0 and not self._proto.held,
                                         self._config.flush_timeout_s)
        if not settled:
            self._log.warning("drain: outbox not flushed in time; it is kept for the next start",
                              outbox_depth=self._state.depth, held=len(self._proto.held))
        self._goodbye.set()
        self._notify()

    async def _abort_control(self) -> None:
        await self._abort_requested.wait()
        self._log.warning("stopping now: cancelling running groups")
        await self._cancel_running()
        raise _Aborted()

    def _nothing_running(self) -> bool:
        return not self._proto.running()

    async def _cancel_running(self) -> None:
        """Cancel events first (executors kill their processes and report UNKNOWN, which is
        buffered); tasks that do not return within the grace are cancelled outright."""
        for aid in self._proto.running():
            self._running[aid].cancel.set()
        if await self._wait_until(self._nothing_running, ABORT_GRACE_MS / 1000):
            return
        tasks = [t for aid in self._proto.running() if (t := self._running[aid].task) is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- streams --------------------------------------------------------------------------

    async def _connect_loop(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        rejoin_until = 0.0
        rejoin_tries = 0
        while not self._goodbye.is_set():
            if not self._has_credential and self.streams_opened:
                await self._reread_token_file()
            started = loop.time()
            rejoining = started < rejoin_until
            if rejoining:
                # A fresh channel a try (common/limits.py REJOIN_ATTEMPT_MS says why), each try
                # given one attempt period to be welcomed: a Hello lost in the blip is not
                # waited for at TCP's retransmission pace.
                await self._chan.close()
                self._chan = self._channel()
                rejoin_tries += 1
            outcome = await self._stream_once(self._chan, REJOIN_ATTEMPT_MS if rejoining else WELCOME_TIMEOUT_MS)
            if outcome == "closed":
                return
            if outcome == "welcomed":
                failures = 0
                if self._proto.held or self._state.depth:
                    rejoin_until, rejoin_tries = loop.time() + REJOIN_WINDOW_MS / 1000, 0
                    self._log.info("rejoining: work at stake", within_ms=REJOIN_WINDOW_MS,
                                   held=len(self._proto.held), outbox_depth=self._state.depth)
            if loop.time() < rejoin_until:
                # Tries start at most one attempt period apart: at once after a stream that
                # lived, never in a loop against a coordinator that ends streams at once.
                delay_ms = max(0.0, REJOIN_ATTEMPT_MS - (loop.time() - started) * 1000)
            else:
                if rejoining:
                    self._log.warning("not rejoined within the window: backing off", tries=rejoin_tries)
                cap_ms = min(RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN * (1 << min(failures, 20)))
                failures += 1
                delay_ms = self._rng.uniform(RECONNECT_BACKOFF_MS_MIN, cap_ms)
                self._log.info("reconnecting", in_ms=round(delay_ms), failures=failures)
            try:
                await asyncio.wait_for(self._goodbye.wait(), delay_ms / 1000)
            except TimeoutError:
                pass

    async def _reread_token_file(self) -> None:
        """Token rotation: a worker not yet enrolled reads the enrollment token again before
        each connection; a file being replaced (unreadable for a moment) keeps the last one."""
        try:
            token = await asyncio.to_thread(self._read_token_file)
        except ConfigError as e:
            self._log.warning("token file unreadable; using the last token read", problem=str(e))
            return
        if token != self._token:
            self._log.info("token file changed; using the new token")
            self._token = token

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self._token}"), ("x-fleet-worker-id", self._config.worker_id))

    async def _stream_once(self, channel: grpc.aio.Channel, welcome_ms: int) -> str:
        """One stream, from Hello to its end: "closed" (after Goodbye), "welcomed" (it ran and
        broke) or "failed" (it broke before Welcome, or was not welcomed within `welcome_ms`
        of its start). Raises `Refused`."""
        self.streams_opened += 1
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        call = stub.Session(metadata=self._metadata())
        s = _Stream(call, self.streams_opened)
        welcomed = False
        try:
            first = await asyncio.wait_for(self._hello_welcome(s), welcome_ms / 1000)
            if first is grpc.aio.EOF:
                raise _StreamEnded("the coordinator closed the stream before its welcome")
            kind = first.WhichOneof("body")
            if kind != "welcome":
                raise _ProtocolError(f"the first coordinator frame is {kind}, not welcome")
            welcomed = True
            await self._on_welcome(s, first.welcome)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(s.writer(self._heartbeat))
                tg.create_task(self._reader(s))
                tg.create_task(self._ticker(s))
                tg.create_task(self._pump(s))
                tg.create_task(self._drain_notice(s))
                tg.create_task(self._measurer(s))
                tg.create_task(self._goodbye_when_done(s))
                # Groups ready to finish (their GroupFinished died with the last stream, or it
                # came while none was open) are finished now; the rest as events make them ready.
                self._stream, self._stream_tasks = s, tg
                self._watch(self._handle(wp.StreamOpened(
                    round(asyncio.get_running_loop().time() * 1000), s.completion_by_reports,
                    round(self._heartbeat_interval_s * 1000), round(self._idle_heartbeat_s * 1000)))[1])
        except Exception as exc:
            leaves = list(_leaves(exc))
            if any(not isinstance(e, (_Closed, *_RECONNECTABLE)) for e in leaves):
                raise
            if any(isinstance(e, _Closed) for e in leaves):
                return "closed"
            for e in leaves:
                if isinstance(e, grpc.aio.AioRpcError) and e.code() in PERMANENT_STATUS_CODES:
                    if not self._config.retry_refused:
                        raise Refused(e.code(), e.details() or "") from None
                    self._log.warning("refused by the coordinator; retrying (retry_refused)",
                                      status=e.code().name, details=e.details() or "")
                    return "failed"
            self._log.warning("stream ended", stream=s.number, welcomed=welcomed,
                              cause="; ".join(dict.fromkeys(_describe(e) for e in leaves)))
        finally:
            self._log.info("stream totals", stream=s.number, frames_written=s.frames_written,
                           reports_written=s.reports_written)
            self.connected = False
            self._stream = self._stream_tasks = None
            self._handle(wp.StreamClosed())
            s.close()
        return "welcomed" if welcomed else "failed"

    async def _hello_welcome(self, s: _Stream) -> Any:
        await self._look_at_room()  # the hello says a full disk: a coordinator restored from an
        await s.write_first("hello", self._hello(s.number))  # older backup would dispatch to it
        return await s.call.read()

    def _hello(self, stream: int) -> coordinator_pb2.Hello:
        """`stream`: this stream's number in this process (Hello.stream: a Hello delayed in a
        dead connection, arriving after a newer one, is refused instead of reconciled)."""
        buffered: list[str] = []
        chars = 0
        for entry in self._pending_entries():
            chars += len(entry.attempt_id)
            if chars > HELLO_BUFFERED_IDS_CHARS_MAX:
                break
            buffered.append(entry.attempt_id)
        owned = list(self._proto.hello_owned())
        return coordinator_pb2.Hello(
            worker_id=self._config.worker_id,
            incarnation=self._state.incarnation,
            slots=self._config.slots,
            cpu_millis=self._config.cpu_millis,
            memory_mb=self._config.memory_mb,
            environment=[common_pb2.EnvironmentComponent(key=k, value=v) for k, v in self._manifest.items()],
            environment_id=self._environment_id,
            cell_environment_id=cell_environment_id(self._manifest),
            owned_assignment_ids=owned,
            buffered_attempt_ids=buffered,
            protocol_version=PROTOCOL_VERSION,
            software_version=self._version,
            stream=stream,
            degraded=self.degraded,
        )

    async def _on_welcome(self, s: _Stream, welcome: coordinator_pb2.Welcome) -> None:
        if welcome.worker_credential:
            # Saved before anything else happens on this stream: a crash right after must
            # not leave the worker with a spent enrollment token only.
            await asyncio.to_thread(self._state.save_credential, welcome.worker_credential)
            self._token = welcome.worker_credential
            self._has_credential = True
            self._log.info("worker credential issued and saved")
        interval_ms = welcome.heartbeat_interval_ms or HEARTBEAT_INTERVAL_MS_DEFAULT
        interval_ms = max(HEARTBEAT_INTERVAL_MS_MIN, min(HEARTBEAT_INTERVAL_MS_MAX, interval_ms))
        self._heartbeat_interval_s = interval_ms / 1000
        s.report_batches = welcome.protocol_version >= REPORT_BATCH_PROTOCOL_VERSION
        s.completion_by_reports = welcome.protocol_version >= COMPLETION_BY_REPORTS_PROTOCOL_VERSION
        self._idle_heartbeat_s = welcome.idle_heartbeat_interval_ms / 1000 if s.report_batches else 0.0
        # Before the pump reads the outbox: a coordinator restored from a backup (its epoch
        # changed) gets back every report this worker kept, as offers (outbox.begin_epoch).
        offered = await asyncio.to_thread(self._state.begin_epoch, welcome.coordinator_epoch)
        self._offer_below = self._state.offer_below_seq
        if offered:
            # Acks of the epoch that is gone no longer finish a held group (protocol rule 6).
            self._handle(wp.ReportsOffered(tuple(
                (e.assignment_id, e.attempt_id) for e in self._pending_entries()
                if e.seq < self._offer_below and e.assignment_id in self._proto.held)))
            self._log.warning("coordinator restored from a backup: offering again the reports it acknowledged",
                              epoch=welcome.coordinator_epoch, offered=offered)
        self._log.info("session open", stream=s.number, coordinator_incarnation=welcome.coordinator_incarnation,
                       heartbeat_interval_ms=interval_ms, outbox_depth=self._state.depth,
                       held=len(self._proto.held), epoch=welcome.coordinator_epoch)
        self.connected = True
        self.welcomed.set()

    def _heartbeat(self) -> coordinator_pb2.Heartbeat:
        return coordinator_pb2.Heartbeat(
            owned_assignment_ids=list(self._proto.owned()),
            running_cells=self._running_cells,
            outbox_depth=self._state.depth,
            degraded=self.degraded,
        )

    async def _ticker(self, s: _Stream) -> None:
        """A heartbeat every interval; to a coordinator whose liveness is the transport's
        (protocol 4, `idle_heartbeat_interval_ms` in its Welcome), while the worker holds no
        group, only when what it would say changed or the idle interval has passed."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._heartbeat_interval_s)
            await self._look_at_room()  # said before a group comes that could not start
            # Whether to beat is the protocol's (wp.HeartbeatDue): a worker that holds groups
            # every interval, an idle one only when what it would say changed.
            if self._proto.handle(wp.HeartbeatDue(round(loop.time() * 1000), self._running_cells, self.degraded)):
                await s.heartbeat_due()

    async def _drain_notice(self, s: _Stream) -> None:
        await self._draining.wait()
        remaining_s = max(0.0, self._drain_deadline - asyncio.get_running_loop().time())
        await s.send("drain_notice", coordinator_pb2.DrainNotice(deadline_ms=int(remaining_s * 1000)), ack=False)

    async def _goodbye_when_done(self, s: _Stream) -> None:
        await self._goodbye.wait()
        ack = await s.send("goodbye", coordinator_pb2.Goodbye(reason="drained"), ack=True)
        assert ack is not None
        try:
            await asyncio.wait_for(ack, GOODBYE_ACK_TIMEOUT_MS / 1000)
        except TimeoutError:
            self._log.warning("goodbye not acknowledged in time; closing anyway")
        await s.call.done_writing()
        raise _Closed()

    # ---- the reader -----------------------------------------------------------------------

    async def _reader(self, s: _Stream) -> None:
        while True:
            frame = await s.call.read()
            if frame is grpc.aio.EOF:
                raise _StreamEnded("the coordinator ended the stream")
            if frame.WhichOneof("body") == "bundle":  # protocol 4: several frames, in order
                for inner in frame.bundle.frames:
                    if inner.WhichOneof("body") == "bundle":
                        raise _ProtocolError("a frame bundle inside a frame bundle")
                    await self._on_frame(s, inner)
            else:
                await self._on_frame(s, frame)

    async def _on_frame(self, s: _Stream, frame: coordinator_pb2.CoordinatorFrame) -> None:
        kind = frame.WhichOneof("body")
        if kind == "ack":
            if not s.on_ack(frame.ack):
                self._log.debug("ack for a frame that waits for none", seq=frame.ack.seq)
        elif kind == "acks":
            for ack in frame.acks.acks:
                if not s.on_ack(ack):
                    self._log.debug("ack for a frame that waits for none", seq=ack.seq)
        elif kind == "assignment":
            await self._on_push(frame.assignment)
        elif kind == "revoke":
            await self._on_revoke(frame.revoke)
        elif kind == "run_state":
            rs = frame.run_state
            self._log.info("run state", run=rs.run_id, paused=rs.paused, blocked_reason=rs.blocked_reason)
        elif kind == "run_offer":
            offer = frame.run_offer
            if offer.run_id not in s.offered:  # a heartbeat may bring the same offer again
                try:
                    s.offers.put_nowait((offer.run_id, tuple(offer.keys)))
                    s.offered[offer.run_id] = None
                except asyncio.QueueFull:
                    self._log.warning("run offer dropped: too many queued; it comes again", run=offer.run_id)
        elif kind == "run_refused":
            self._on_run_refused(frame.run_refused)
        elif kind == "drain":
            self._log.info("drain requested by the coordinator", reason=frame.drain.reason)
            self.drain()
        elif kind == "upload_status":
            self._log.debug("upload status", digest=frame.upload_status.digest,
                            committed_offset=frame.upload_status.committed_offset)
        elif kind == "welcome":
            self._log.warning("a second welcome on one stream ignored", stream=s.number)
        else:
            raise _ProtocolError(f"a coordinator frame without a known body ({kind})")

    async def _measurer(self, s: _Stream) -> None:
        """Measure each offered run's keys from this worker's own bench root (in a thread:
        hashing task dirs takes a while) and answer; the coordinator compares."""
        while True:
            run_id, keys = await s.offers.get()
            measured = await asyncio.to_thread(measure_keys, keys, self._config.bench_root,
                                               path=self._config.command_path)
            self._log.debug("run measured", run=run_id, keys=len(keys))
            ack = await s.request("run_environment", coordinator_pb2.RunEnvironment(
                run_id=run_id, components=[common_pb2.EnvironmentComponent(key=k, value=v)
                                           for k, v in measured.items()]))
            if ack.outcome == _REJECTED:
                self._log.warning("run measurement refused", run=run_id,
                                  rejection=common_pb2.RejectionReason.Name(ack.rejection), detail=ack.detail)

    def _on_run_refused(self, r: coordinator_pb2.RunRefused) -> None:
        """A run this worker may not serve: say why, with the keys that differ, and stay
        connected for the runs it can serve."""
        shown = [f"{d.key}: run {d.run_value}, this worker {d.worker_value}"
                 for d in r.differences[:REFUSAL_DIFFERENCES_LOGGED_MAX]]
        self.refusals[r.run_id] = r.reason
        self._log.warning("this worker may not serve a run", run=r.run_id, reason=r.reason,
                          differences=shown, more=max(0, len(r.differences) - len(shown)),
                          hint=f"fleet-worker identity --against {r.run_id} shows the same from this side")

    async def _on_push(self, push: coordinator_pb2.AssignmentPush) -> None:
        aid = AssignmentId(push.assignment_id)
        plog = self._log.bind(run=push.run_id, assignment=aid)
        if not aid:
            plog.error("push without an assignment id ignored")
            return
        attempts = tuple(AttemptId(cell.attempt_id) for cell in push.cells)
        if not self._handle(wp.PushReceived(aid, push.run_id, attempts))[0]:
            plog.info("repeated push ignored")
            return
        try:
            fresh = await self._state.record_assignment_async(aid, codec.push_record(push))
        except (AssignmentConflict, ValueError) as e:
            self._handle(wp.AssignmentRecorded(aid, fresh=False))
            plog.error("push refused", problem=str(e))
            return
        actions, _ = self._handle(wp.AssignmentRecorded(aid, fresh))
        if not fresh:
            plog.info("push of a recorded or finished assignment ignored")
            return
        if not any(isinstance(a, wp.StartGroup) for a in actions):
            plog.info("push during drain: handing it back")
            return
        plog.debug("assignment received", generation=push.generation, group=push.group_id,
                  cells=len(push.cells), deadline_ms=push.deadline_ms)
        assert self._groups is not None, "pushes arrive only while the session runs"
        group = self._running[aid] = _Group(unbuffered=len(push.cells))
        group.task = self._groups.create_task(self._run_group(aid, group, push))

    async def _on_revoke(self, revoke: coordinator_pb2.Revoke) -> None:
        aid = AssignmentId(revoke.assignment_id)
        held = self._proto.held.get(aid)
        if held is None:
            self._log.info("revoke of an assignment not held", assignment=aid, reason=revoke.reason)
            return
        self._log.info("assignment revoked", run=held.run_id, assignment=aid, reason=revoke.reason,
                       running=held.running)
        # Cancelled; if nothing runs it, finished now (what it buffered is still delivered, as
        # late evidence), the reader waiting for that commit.
        for fut in self._handle(wp.RevokeReceived(aid))[1]:
            await asyncio.shield(fut)

    # ---- groups and cells -----------------------------------------------------------------

    async def _run_group(self, aid: AssignmentId, group: _Group, push: coordinator_pb2.AssignmentPush) -> None:
        glog = self._log.bind(run=push.run_id, assignment=aid)
        jobs: list[CellJob] | None = None
        executor: Executor | None = None
        failure = ""
        environment_failure = ""
        try:
            jobs = codec.jobs_from_push(push, bench_root=self._config.bench_root, work_root=self._work_root,
                                        environ=self._config.environ)
        except codec.CodecError as e:
            failure = f"the assignment could not be read: {e}"
        if jobs:
            kind = str(jobs[0].executor.get("kind", ""))
            try:
                executor = self._executor_for(kind, path=self._config.command_path)
            except ValueError as e:
                failure = environment_failure = one_line(str(e), ID_CHARS_MAX)
        if failure:
            glog.error("cells not started", reason=failure)
        try:
            async with asyncio.TaskGroup() as tg:
                for i, cell in enumerate(push.cells):
                    job = jobs[i] if jobs is not None and executor is not None else None
                    tg.create_task(self._run_cell(aid, group, push, cell, job, executor, failure,
                                                  environment_failure))
        finally:
            del self._running[aid]
            _, finishing = self._handle(wp.GroupRan(aid))  # revoked: finished locally now
        glog.debug("group ran", revoked=bool(finishing))
        for fut in finishing:
            await asyncio.shield(fut)

    async def _run_cell(self, aid: AssignmentId, group: _Group, push: coordinator_pb2.AssignmentPush,
                        cell: coordinator_pb2.CellAssignment, job: CellJob | None, executor: Executor | None,
                        failure: str, environment_failure: str) -> None:
        if job is None or executor is None:
            at = now_ms()
            report = seal(Report(Status.UNSPECIFIED, Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING,
                                 Cleanup.CONFIRMED, environment_failure=environment_failure,
                                 started_ms=at, finished_ms=at, detail=one_line(failure)))
            outcome = CellOutcome(report, ())
        else:
            await self._wait_for_room(group.cancel)
            self._running_cells += 1
            try:
                outcome = await executor.run(job, group.cancel)
            finally:
                self._running_cells -= 1
        await self._buffer(aid, push, cell, outcome)

    def _room(self) -> str:
        """Why a cell's result could not be kept now ("" when it could): too little free space
        on the state dir's file system."""
        if self._state.disk_full:
            return f"the disk is full: the outbox waits for room ({one_line(self._state.disk_full, 200)})"
        need = self._config.min_free_mb << 20
        if not need:
            return ""
        free = free_bytes(self._config.state_dir)
        if free is None or free >= need:
            return ""
        return (f"the state dir's file system ({self._config.state_dir}) has {free >> 20} MiB free, "
                f"under min_free_mb {self._config.min_free_mb}: no new cell starts until there is room")

    async def _look_at_room(self) -> None:
        """Say what the disk has room for now; room again is said only once every outcome held
        in memory for want of it is stored."""
        reason = await asyncio.to_thread(self._room)
        if reason or not self._outcomes_waiting:
            self._set_degraded(reason)

    def _set_degraded(self, reason: str) -> None:
        if reason != self.degraded:
            if reason:
                self._log.error("no new cell starts: the disk is full", reason=reason)
            else:
                self._log.warning("room again: cells start", was=self.degraded)
            self.degraded = reason
            self._notify()

    async def _wait_for_room(self, cancel: CancelEvent) -> None:
        """A cell starts only while its result can be kept; a full disk waits (saying so in the
        heartbeat: the coordinator gives this worker no new work) instead of failing every
        attempt at once, which exhausted a whole run in seconds. Room seen less than
        ROOM_RECHECK_MS ago is taken as still there (the writer's own full-disk errors still
        stop the next cell at once): a look costs a thread hop, which at a no-op cell's pace
        was one of its four (issue 26)."""
        now = asyncio.get_running_loop().time()
        if not self._state.disk_full and now - self._room_seen_at < ROOM_RECHECK_MS / 1000:
            return
        while (reason := await asyncio.to_thread(self._room)) and not cancel.is_set():
            self._set_degraded(reason)
            await asyncio.sleep(ROOM_RECHECK_MS / 1000)
        if not reason:
            self._room_seen_at = asyncio.get_running_loop().time()
            self._set_degraded("")

    async def _buffer(self, aid: AssignmentId, push: coordinator_pb2.AssignmentPush,
                      cell: coordinator_pb2.CellAssignment, outcome: CellOutcome) -> None:
        """Make the outcome durable in the outbox, then delete the attempt's scratch."""
        attempt = AttemptId(cell.attempt_id)
        files, missing = await asyncio.to_thread(_usable_files, outcome.files) if outcome.files else ([], [])
        report = outcome.report
        if missing:
            report = dataclasses.replace(report, unavailable=report.unavailable + tuple(missing))
        payload = codec.cell_report_payload(push, cell, report)
        # Unsettled before the entry exists, so its ack can never come first.
        self._handle(wp.CellFinished(aid, attempt))
        # The group's last outcome frees its slot once the coordinator has it: not held back
        # for the outbox's group commit; the others share their commit with it.
        group = self._running.get(aid)
        if group is not None:
            group.unbuffered -= 1
        urgent = group is None or group.unbuffered <= 0
        full_logged = False
        while True:
            try:
                s = self._stream
                entry = await self._state.put_report_async(attempt, aid, payload, files, urgent=urgent)
                # To the pump of a stream open for the whole put only: then no other stream's
                # pump can have read this entry from the outbox and delivered it.
                if entry.fresh and s is not None and s is self._stream and len(s.fresh) < REPORTS_IN_FLIGHT_MAX:
                    s.fresh.append(entry)
                break
            except OutboxFull as e:
                if not full_logged:
                    self._log.warning("outbox full: waiting to store an outcome", attempt=attempt, problem=str(e))
                    full_logged = True
                await asyncio.sleep(OUTBOX_FULL_RETRY_MS / 1000)
            except OutboxStorageError as e:
                if not e.disk_full:
                    raise
                # The outcome stays in memory until the disk has room: the worker stays up.
                self._outcomes_waiting += 1
                try:
                    self._set_degraded(f"the disk is full: an outcome waits to be stored ({one_line(str(e), 200)})")
                    await asyncio.sleep(ROOM_RECHECK_MS / 1000)
                finally:
                    self._outcomes_waiting -= 1
        self._handle(wp.ReportStored(aid, attempt))  # the pump delivers it
        scratch = AttemptDirs.of(self._work_root, attempt).root
        if os.path.lexists(scratch):  # an executor that needed no scratch made none: no thread hop
            await asyncio.to_thread(remove_tree, scratch)
        self._log.debug("outcome buffered", run=push.run_id, assignment=aid, attempt=attempt,
                       status=report.status.name, execution=report.execution.name, files=len(files))
        self._notify()

    # ---- delivery -------------------------------------------------------------------------

    async def _pump(self, s: _Stream) -> None:
        """Every pending entry, in outbox order, once per stream: at connect the whole outbox
        (the replay), afterwards each new one as it is put (a put is the only thing that adds
        an entry, so the pump waits for puts alone)."""
        cursor = 0  # the seq of the last entry handed to a delivery on this stream
        async with asyncio.TaskGroup() as tg:
            while True:
                put = self._put
                page = (_fresh_page(s.fresh, cursor, REPORTS_IN_FLIGHT_MAX)
                        or self._state.pending(after_seq=cursor, limit=REPORTS_IN_FLIGHT_MAX))
                if not page:
                    await put.wait()
                    continue
                for entry in page:
                    await s.report_slots.acquire()
                    tg.create_task(self._deliver_in_slot(s, entry))
                    cursor = entry.seq

    async def _deliver_in_slot(self, s: _Stream, entry: OutboxEntry) -> None:
        try:
            await self._deliver(s, entry)
        finally:
            s.report_slots.release()

    async def _deliver(self, s: _Stream, entry: OutboxEntry) -> None:
        dlog = self._log.bind(assignment=entry.assignment_id, attempt=entry.attempt_id)
        transient = 0
        sends = 0
        while True:
            try:
                for ref in entry.artifacts:
                    await self._ensure_uploaded(s, entry, ref)
            except _GiveUp as e:
                await self._dead_letter(s, entry, str(e))
                return
            sends += 1
            frame = codec.cell_report_frame(entry.payload, entry.artifacts)
            frame.offered = entry.seq < self._offer_below
            ack = await s.request("cell_report", frame)
            if ack.outcome in (_ACCEPTED, _DUPLICATE, _LATE):
                # Logged first: a stream cut while the outbox removes the entry must not leave
                # an acknowledged report without its line (operators and tests read it).
                dlog.debug("report acknowledged", outcome=common_pb2.AckOutcome.Name(ack.outcome))
                self.reports_acked += 1
                # The ack's commit, and (protocol 5, the group's last cell) its assignment's
                # finish queued right behind it, in the same group commit.
                _, commits = self._handle(wp.ReportAcked(entry.assignment_id, entry.attempt_id,
                                                         _ACK_KINDS[ack.outcome]))
                for fut in commits:
                    await asyncio.shield(fut)
                return
            if ack.outcome != _REJECTED:
                raise _ProtocolError(f"report ack with outcome {ack.outcome}")
            reason = common_pb2.RejectionReason.Name(ack.rejection)
            if ack.rejection == common_pb2.REJECTION_REASON_ARTIFACT_MISSING and sends < REPORT_SENDS_MAX:
                dlog.warning("report refused for a missing artifact: uploading again", detail=ack.detail)
                s.durable.difference_update(a.digest for a in entry.artifacts)
                continue
            if ack.rejection in _TRANSIENT:
                transient += 1
                await self._pause(transient, dlog, reason, ack.detail)
                continue
            await self._dead_letter(s, entry, f"{reason}: {ack.detail}" if ack.detail else reason)
            return

    async def _pause(self, n: int, plog: Any, reason: str, detail: str) -> None:
        cap_ms = min(RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN * (1 << min(n, 20)))
        delay_ms = self._rng.uniform(RECONNECT_BACKOFF_MS_MIN, cap_ms)
        plog.warning("coordinator asks to resend later", reason=reason, detail=detail, in_ms=round(delay_ms))
        await asyncio.sleep(delay_ms / 1000)

    async def _dead_letter(self, s: _Stream, entry: OutboxEntry, reason: str) -> None:
        reason = one_line(reason) or "refused"
        if await asyncio.to_thread(self._state.dead_letter, entry.attempt_id, reason):
            self._log.error("report dead-lettered", assignment=entry.assignment_id, attempt=entry.attempt_id,
                            reason=reason)
        self._watch(self._handle(wp.ReportDeadLettered(entry.assignment_id, entry.attempt_id))[1])
        await s.send("dead_letter", coordinator_pb2.DeadLetter(attempt_id=entry.attempt_id, reason=reason), ack=False)

    async def _ensure_uploaded(self, s: _Stream, entry: OutboxEntry, ref: ArtifactRef) -> None:
        """Return once the coordinator holds `ref.digest` durably, as acked on this stream."""
        while ref.digest not in s.durable:
            ongoing = s.uploading.get(ref.digest)
            if ongoing is not None:
                await ongoing.wait()  # another entry uploads the same bytes; then look again
                continue
            done = s.uploading[ref.digest] = asyncio.Event()
            try:
                async with s.upload_slots:
                    await self._upload(s, entry, ref)
                s.durable.add(ref.digest)
            finally:
                del s.uploading[ref.digest]
                done.set()

    async def _upload(self, s: _Stream, entry: OutboxEntry, ref: ArtifactRef) -> None:
        """Probe, then send what the coordinator lacks; restart on a refusal that a resend
        can fix, give up (dead letter) on one it cannot."""
        ulog = self._log.bind(attempt=entry.attempt_id, artifact=ref.name, digest=ref.digest)
        upload_id = s.upload_id(ref.digest)

        def chunk(offset: int, data: bytes, last: bool) -> coordinator_pb2.UploadChunk:
            return coordinator_pb2.UploadChunk(upload_id=upload_id, attempt_id=entry.attempt_id, digest=ref.digest,
                                               total_length=ref.size_bytes, offset=offset, data=data, last=last)

        restarts = 0
        transient = 0
        ack = await s.request("upload_chunk", chunk(0, b"", False))  # the probe
        offset = ack.committed_offset
        while True:
            if ack.outcome == _DUPLICATE:
                ulog.debug("artifact already stored")
                return
            if ack.outcome == _REJECTED:
                reason = common_pb2.RejectionReason.Name(ack.rejection)
                if ack.rejection in _TRANSIENT:
                    transient += 1
                    await self._pause(transient, ulog, reason, ack.detail)
                    ack = await s.request("upload_chunk", chunk(0, b"", False))
                    offset = ack.committed_offset
                    continue
                if ack.rejection not in _UPLOAD_RESTARTABLE or restarts >= UPLOAD_RESTARTS_MAX:
                    raise _GiveUp(f"upload of {ref.name} refused: {reason}: {ack.detail}")
                restarts += 1
                ulog.warning("upload refused: restarting", reason=reason, detail=ack.detail, offset=offset)
            elif ack.outcome != _ACCEPTED:
                raise _ProtocolError(f"upload ack with outcome {ack.outcome}")
            if offset > ref.size_bytes:
                offset = 0
            ack, offset = await self._send_chunks(s, ref, offset, chunk)
            if ack.outcome == _ACCEPTED:
                ulog.debug("artifact uploaded", size_bytes=ref.size_bytes)
                return

    async def _send_chunks(self, s: _Stream, ref: ArtifactRef, offset: int,
                           chunk: Callable[[int, bytes, bool], coordinator_pb2.UploadChunk],
                           ) -> tuple[coordinator_pb2.Ack, int]:
        """Chunks from `offset` to the end, at most UPLOAD_CHUNKS_IN_FLIGHT_MAX unacknowledged.

        Returns the deciding ack (the last chunk's ACCEPTED, or the first that is not
        ACCEPTED: a refusal, or DUPLICATE when the coordinator already holds the digest) and
        the committed offset of the latest ack, where a restart resumes."""
        path = self._state.artifact_path(ref.digest)
        try:
            fd = await asyncio.to_thread(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _GiveUp(f"artifact {ref.name} file is unreadable: {e.strerror or e}") from None
        inflight: deque[asyncio.Future[coordinator_pb2.Ack]] = deque()
        try:
            pos = offset
            while True:
                n = min(CHUNK_BYTES_MAX, ref.size_bytes - pos)
                try:
                    data = await asyncio.to_thread(os.pread, fd, n, pos)
                except OSError as e:
                    raise _GiveUp(f"artifact {ref.name} file is unreadable: {e.strerror or e}") from None
                if len(data) != n:
                    raise _GiveUp(f"artifact {ref.name} file is shorter than its recorded {ref.size_bytes} bytes")
                last = pos + n == ref.size_bytes
                fut = await s.send("upload_chunk", chunk(pos, data, last), ack=True)
                assert fut is not None
                inflight.append(fut)
                pos += n
                while inflight and (last or len(inflight) >= UPLOAD_CHUNKS_IN_FLIGHT_MAX):
                    deciding = await inflight.popleft()
                    if deciding.outcome == _ACCEPTED and inflight:
                        continue
                    latest = deciding
                    while inflight:  # after a refusal or a DUPLICATE the rest only tell the offset
                        latest = await inflight.popleft()
                    return deciding, latest.committed_offset
        finally:
            await asyncio.to_thread(os.close, fd)

    # ---- finishing groups -----------------------------------------------------------------

    @staticmethod
    async def _await(fut: asyncio.Future[Any]) -> None:
        await asyncio.shield(fut)  # a storage error ends the stream's task group (fail-stop)

    async def _finish_group(self, s: _Stream, aid: AssignmentId, reason: str) -> None:
        """Send GroupFinished (again while the coordinator asks to resend later); once answered,
        the protocol finishes the assignment locally."""
        held = self._proto.held.get(aid)
        flog = self._log.bind(run=held.run_id if held is not None else "", assignment=aid)
        transient = 0
        while True:
            ack = await s.request("group_finished", coordinator_pb2.GroupFinished(assignment_id=aid, reason=reason))
            if ack.outcome == _REJECTED and ack.rejection in _TRANSIENT:
                transient += 1
                await self._pause(transient, flog, common_pb2.RejectionReason.Name(ack.rejection), ack.detail)
                continue
            break
        if ack.outcome == _REJECTED:
            # The coordinator does not hold this assignment for us (released, expired):
            # there is nothing left to give back.
            flog.warning("group finished refused; finishing locally",
                         rejection=common_pb2.RejectionReason.Name(ack.rejection), detail=ack.detail)
        else:
            flog.debug("group finished", reason=reason, outcome=common_pb2.AckOutcome.Name(ack.outcome))
        for fut in self._handle(wp.GroupFinishedAnswered(aid))[1]:
            await asyncio.shield(fut)


def _fresh_page(fresh: deque[OutboxEntry], cursor: int, limit: int) -> list[OutboxEntry]:
    """The entries that follow `cursor` in the outbox, taken from `fresh` (entries written on
    this stream, in the order their puts returned), or [] when `fresh` cannot tell them: the
    next seq is not at its head (an entry put another way, before the stream or by a new
    epoch, or out of order) and the pump reads the outbox as before. Only an unbroken run of
    seqs from cursor + 1 is taken, so nothing the outbox holds between them is passed over;
    entries at or below `cursor` were read from the outbox already and are dropped."""
    while fresh and fresh[0].seq <= cursor:
        fresh.popleft()
    page: list[OutboxEntry] = []
    while fresh and len(page) < limit and fresh[0].seq == cursor + 1 + len(page):
        page.append(fresh.popleft())
    return page


def _usable_files(files: Sequence[Any]) -> tuple[list[tuple[str, Path]], list[ArtifactUnavailable]]:
    """The outcome's files the outbox can take, and the rest as unavailable with the reason."""
    usable: list[tuple[str, Path]] = []
    missing: list[ArtifactUnavailable] = []
    for f in files:
        try:
            size = os.stat(f.path).st_size
        except OSError as e:
            missing.append(ArtifactUnavailable(f.name, f"file unreadable when the report was stored: {e.strerror or e}"))
            continue
        if size > ARTIFACT_BYTES_MAX:
            missing.append(ArtifactUnavailable(f.name, f"{size} bytes exceed the artifact limit of {ARTIFACT_BYTES_MAX}"))
            continue
        usable.append((f.name, Path(f.path)))
    return usable, missing
