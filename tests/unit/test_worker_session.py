"""Goal: the worker session keeps the protocol's promises (hello contents, credential handover, all cells of a push together, uploads before reports, replay after a cut or a restart, idempotent pushes, revoke, permanent refusal); method: a scripted fake Coordinator servicer on 127.0.0.1 over real grpc.aio, a real session over a real state dir in tmp_path, and a trivial fake executor."""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.evidence import Cleanup, Execution, Report, Status, Usage, Verification
from common.fleetpb import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from common.ids import AssignmentId, AttemptId, WorkerId
from common.limits import CHUNK_BYTES_MAX, REJOIN_ATTEMPT_MS, REJOIN_WINDOW_MS
from worker import codec
from worker.config import WorkerConfig
from worker.executor.base import AttemptDirs, CellJob, CellOutcome, LocalArtifact, now_ms, seal
from worker.outbox import WorkerState
from worker.session import Ended, WorkerSession

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "tests" / "fixtures" / "bench"
WORKER = WorkerId("w-1")
ENROLL = "enroll-token"
MANIFEST = {"python.version": "3.x", "bench.tree": "abc", "a.first": "1"}
ENV_ID = "env-test"
Frame = coordinator_pb2.CoordinatorFrame


# ---- the fake coordinator ---------------------------------------------------------------------


class FakeStream:
    def __init__(self, index: int, metadata: dict[str, str]) -> None:
        self.index = index
        self.metadata = metadata
        self.frames: list[coordinator_pb2.WorkerFrame] = []
        self.out: asyncio.Queue[Frame] = asyncio.Queue()
        self.cut = asyncio.Event()
        self.ended = False
        self.peer = ""  # the client's address: a new port is a new connection
        self.opened_s = 0.0  # loop time of its hello

    def of(self, kind: str) -> list[Any]:
        return [getattr(f, kind) for f in self.frames if f.WhichOneof("body") == kind]

    @property
    def hello(self) -> coordinator_pb2.Hello:
        return self.frames[0].hello


class FakeCoordinator(coordinator_pb2_grpc.CoordinatorServicer):
    """Acks like the real one: chunks by committed offset, reports only when every digest they
    name is stored. Scripted through attributes."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.store: dict[str, bytes] = {}
        self.partial: dict[str, bytearray] = {}
        self.events: list[tuple[str, ...]] = []
        self.reports: dict[str, coordinator_pb2.CellReport] = {}
        self.report_sends: dict[str, int] = {}
        self.refuse: tuple[grpc.StatusCode, str] | None = None
        self.refuse_first: int = 0  # refuse this many streams with UNAVAILABLE
        self.issue_credential = ""
        self.hold_reports = False  # receive reports but never ack them
        self.cut_on_report = False  # cut the stream on the next report, unacked
        self.report_outcome = common_pb2.ACK_OUTCOME_ACCEPTED
        self.reject_reports_with = 0  # a RejectionReason: refuse every report with it
        self.refuse_reports_first: list[int] = []  # RejectionReasons: refuse the next report sends with these
        self.mismatch_final_chunks = 0  # refuse this many final chunks with DIGEST_MISMATCH
        self.heartbeat_interval_ms = 50
        self.protocol_version = 0  # the Welcome's; 4 lets the worker send ReportBatch
        self.batches: list[int] = []  # the size of every ReportBatch received

    # -- test helpers
    @property
    def current(self) -> FakeStream:
        return self.streams[-1]

    def send(self, frame: Frame) -> None:
        self.current.out.put_nowait(frame)

    def all(self, kind: str) -> list[Any]:
        return [x for s in self.streams for x in s.of(kind)]

    def group_finished(self) -> list[tuple[str, str]]:
        return [(g.assignment_id, g.reason) for g in self.all("group_finished")]

    # -- the servicer
    async def Session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        first = await context.read()
        st = FakeStream(len(self.streams) + 1, dict(context.invocation_metadata()))
        st.peer, st.opened_s = context.peer(), asyncio.get_running_loop().time()
        st.frames.append(first)
        self.streams.append(st)  # listed once its hello is in
        if self.refuse is not None:
            await context.abort(*self.refuse)
        if self.refuse_first >= st.index:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "starting up")
        await context.write(Frame(welcome=coordinator_pb2.Welcome(
            coordinator_incarnation=1, heartbeat_interval_ms=self.heartbeat_interval_ms,
            worker_credential=self.issue_credential if st.index == 1 else "",
            protocol_version=self.protocol_version)))
        writer = asyncio.create_task(self._writer(st, context))
        try:
            while True:
                read = asyncio.ensure_future(context.read())
                cut = asyncio.ensure_future(st.cut.wait())
                done, _ = await asyncio.wait({read, cut}, return_when=asyncio.FIRST_COMPLETED)
                cut.cancel()
                if read not in done:
                    read.cancel()
                    break
                frame = read.result()
                if frame is grpc.aio.EOF:
                    return
                if frame.WhichOneof("body") == "report_batch":
                    # One seq per report: handled as the reports it carries, in order.
                    reports = frame.report_batch.reports
                    self.batches.append(len(reports))
                    for i, r in enumerate(reports):
                        one = coordinator_pb2.WorkerFrame(seq=frame.seq + i, cell_report=r)
                        st.frames.append(one)
                        self._handle(st, one)
                    continue
                st.frames.append(frame)
                self._handle(st, frame)
        finally:
            st.ended = True
            writer.cancel()
        await context.abort(grpc.StatusCode.UNAVAILABLE, "cut by the test")

    async def _writer(self, st: FakeStream, context: Any) -> None:
        while True:
            await context.write(await st.out.get())

    def _ack(self, st: FakeStream, seq: int, outcome: int = common_pb2.ACK_OUTCOME_ACCEPTED, **kw: Any) -> None:
        st.out.put_nowait(Frame(ack=coordinator_pb2.Ack(seq=seq, outcome=outcome, **kw)))

    def _handle(self, st: FakeStream, f: coordinator_pb2.WorkerFrame) -> None:
        kind = f.WhichOneof("body")
        assert f.seq == len(st.frames), "seqs start at 1 and grow by one per frame"
        if kind == "upload_chunk":
            u = f.upload_chunk
            if u.digest in self.store:
                return self._ack(st, f.seq, common_pb2.ACK_OUTCOME_DUPLICATE, committed_offset=u.total_length, digest=u.digest)
            buf = self.partial.setdefault(u.digest, bytearray())
            if u.data or u.last:
                if u.offset != len(buf):
                    return self._ack(st, f.seq, common_pb2.ACK_OUTCOME_REJECTED,
                                     rejection=common_pb2.REJECTION_REASON_CHUNK_OUT_OF_RANGE,
                                     committed_offset=len(buf), digest=u.digest)
                buf += u.data
            if u.last:
                del self.partial[u.digest]
                if self.mismatch_final_chunks:
                    self.mismatch_final_chunks -= 1
                    buf = bytearray(b"torn")
                if len(buf) != u.total_length or "sha256:" + hashlib.sha256(buf).hexdigest() != u.digest:
                    return self._ack(st, f.seq, common_pb2.ACK_OUTCOME_REJECTED,
                                     rejection=common_pb2.REJECTION_REASON_DIGEST_MISMATCH, digest=u.digest)
                self.store[u.digest] = bytes(buf)
                self.events.append(("durable", u.digest))
            self._ack(st, f.seq, committed_offset=len(buf), digest=u.digest)
        elif kind == "cell_report":
            r = f.cell_report
            digests = [a.digest for a in r.report.artifacts]
            if any(d not in self.store for d in digests):
                self.events.append(("refused", r.attempt_id))
                return self._ack(st, f.seq, common_pb2.ACK_OUTCOME_REJECTED,
                                 rejection=common_pb2.REJECTION_REASON_ARTIFACT_MISSING)
            self.events.append(("report", r.attempt_id, *digests))
            self.report_sends[r.attempt_id] = self.report_sends.get(r.attempt_id, 0) + 1
            if self.cut_on_report:
                self.cut_on_report = False
                st.cut.set()
                return
            if self.hold_reports:
                return
            if self.refuse_reports_first:
                return self._ack(st, f.seq, common_pb2.ACK_OUTCOME_REJECTED, rejection=self.refuse_reports_first.pop(0),
                                 detail="coordinator overloaded: resend")
            if self.reject_reports_with:
                return self._ack(st, f.seq, common_pb2.ACK_OUTCOME_REJECTED, rejection=self.reject_reports_with,
                                 detail="score without valid verification")
            seen = r.attempt_id in self.reports
            self.reports[r.attempt_id] = r
            self._ack(st, f.seq, common_pb2.ACK_OUTCOME_DUPLICATE if seen else self.report_outcome)
        elif kind in ("group_finished", "drain_notice", "goodbye", "dead_letter"):
            self._ack(st, f.seq)
        else:
            assert kind == "heartbeat", kind


# ---- a trivial executor -----------------------------------------------------------------------


class FakeExecutor:
    """Writes one log per cell (`sizes` picks its length) and reports COMPLETED, or UNKNOWN when
    cancelled. With `block`, each cell waits for `release` or its cancel."""

    def __init__(self, *, block: bool = False, sizes: dict[str, int] | None = None, files: bool = True) -> None:
        self.files = files
        self.runs: list[CellJob] = []
        self.block = block
        self.release = asyncio.Event()
        self.sizes = sizes or {}
        self.cancelled: list[str] = []

    def factory(self, kind: str, **_: Any) -> FakeExecutor:
        assert kind == "python"
        return self

    def content(self, job: CellJob) -> bytes:
        n = self.sizes.get(job.subject_id, 64)
        line = f"output of {job.attempt_id}\n".encode()
        return (line * (n // len(line) + 1))[:n]

    async def run(self, job: CellJob, cancel: asyncio.Event) -> CellOutcome:
        self.runs.append(job)
        started = now_ms()
        dirs = AttemptDirs.of(job.work_root, job.attempt_id)
        dirs.artifacts.mkdir(parents=True, exist_ok=True)
        out = dirs.artifacts / "stdout.log"
        out.write_bytes(self.content(job))
        if self.block:
            waits = [asyncio.ensure_future(self.release.wait()), asyncio.ensure_future(cancel.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        if cancel.is_set():
            self.cancelled.append(job.attempt_id)
            r = Report(Status.UNSPECIFIED, Execution.UNKNOWN, Verification.NOT_RUN, Usage.MISSING,
                       Cleanup.CONFIRMED, started_ms=started, finished_ms=now_ms(), detail="cancelled")
        else:
            r = Report(Status.UNSPECIFIED, Execution.COMPLETED, Verification.VALID, Usage.MISSING,
                       Cleanup.CONFIRMED, score=1.0, started_ms=started, finished_ms=now_ms())
        return CellOutcome(seal(r), (LocalArtifact("stdout.log", out),) if self.files else ())


# ---- harness ----------------------------------------------------------------------------------


def make_push(assignment: str = "run-1:add/r0:g1", subjects: tuple[str, ...] = ("s1", "s2"),
              deadline_ms: int = 60_000) -> coordinator_pb2.AssignmentPush:
    run = assignment.split(":")[0]
    return coordinator_pb2.AssignmentPush(
        run_id=run, assignment_id=assignment, generation=int(assignment.rsplit(":g", 1)[1]),
        group_id="add/r0", task_id="add", repetition=0, deadline_ms=deadline_ms,
        cells=[coordinator_pb2.CellAssignment(cell_id=f"add/r0/{s}", attempt_id=f"{assignment}:{s}:a1",
                                              subject_id=s, dispatch_order=i + 1) for i, s in enumerate(subjects)],
        benchmark_json='{"name":"toy"}', executor_json='{"kind":"python"}',
        task_json='{"id":"add","dir":"tasks/add"}', verifier_json='{"callable":"toybench:verify"}',
        budget_json='{"timeoutSeconds":10}',
        subject_json=[json.dumps({"id": s, "callable": "toybench:subject"}) for s in subjects])


def make_config(tmp_path: Path, port: int, **over: Any) -> WorkerConfig:
    token = tmp_path / "token"
    if not token.exists():
        token.write_text(ENROLL + "\n")
    base: dict[str, Any] = dict(
        coordinator=f"127.0.0.1:{port}", token_file=token, worker_id=WORKER, slots=2,
        state_dir=tmp_path / "state", bench_root=BENCH, work_dir=tmp_path / "work",
        cpu_millis=4000, memory_mb=2048, drain_timeout_s=5, flush_timeout_s=5)
    base.update(over)
    return WorkerConfig(**base)


@contextlib.asynccontextmanager
async def serving(fake: FakeCoordinator) -> AsyncIterator[int]:
    server = grpc.aio.server()
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


class Worker:
    """A session running over its own state dir, as `fleet-worker` would run it."""

    def __init__(self, config: WorkerConfig, executor: FakeExecutor) -> None:
        self.state = WorkerState.open(config.state_dir, worker_id=config.worker_id)
        self.session = WorkerSession(config, self.state, manifest=MANIFEST, environment_id=ENV_ID,
                                     executor_for=executor.factory, version="test")
        self.task = asyncio.create_task(self.session.run())

    async def drain(self) -> Ended:
        self.session.drain()
        try:
            return await asyncio.wait_for(self.task, 15)
        finally:
            self.state.close()

    async def crash(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.state.close()


async def eventually(predicate: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def reopen(config: WorkerConfig) -> WorkerState:
    return WorkerState.open(config.state_dir, worker_id=config.worker_id)


def stored_payload(attempt: str, assignment: str) -> bytes:
    push = make_push(assignment, subjects=(attempt.split(":")[-2],))
    r = seal(Report(Status.UNSPECIFIED, Execution.COMPLETED, Verification.VALID, Usage.MISSING,
                    Cleanup.CONFIRMED, score=0.5))
    return codec.cell_report_payload(push, push.cells[0], r)


# ---- tests ------------------------------------------------------------------------------------


def test_hello_carries_identity_incarnation_and_the_buffered_attempts(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            earlier = AttemptId("run-1:add/r0:g7:s1:a1")
            with WorkerState.open(config.state_dir, worker_id=WORKER) as st:  # incarnation 1
                st.put_report(earlier, AssignmentId("run-1:add/r0:g7"), stored_payload(earlier, "run-1:add/r0:g7"), [])
            w = Worker(config, FakeExecutor())
            await eventually(lambda: earlier in fake.reports, "the buffered report replayed")
            hello = fake.streams[0].hello
            assert fake.streams[0].frames[0].seq == 1
            assert (hello.worker_id, hello.incarnation, hello.slots, hello.cpu_millis, hello.memory_mb) == (
                WORKER, 2, 2, 4000, 2048)
            assert [(c.key, c.value) for c in hello.environment] == sorted(MANIFEST.items())
            assert hello.environment_id == ENV_ID and hello.protocol_version == 6
            assert hello.software_version == "test"
            assert list(hello.buffered_attempt_ids) == [earlier] and list(hello.owned_assignment_ids) == []
            md = fake.streams[0].metadata
            assert md["authorization"] == f"Bearer {ENROLL}" and md["x-fleet-worker-id"] == WORKER
            await eventually(lambda: fake.all("heartbeat"), "a heartbeat")
            assert await w.drain() is Ended.DRAINED
            assert fake.all("drain_notice") and fake.all("goodbye")
        with reopen(config) as st:
            assert st.depth == 0

    asyncio.run(go())


def test_the_credential_from_welcome_is_saved_and_presented_from_then_on(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.issue_credential = "cred-abc"
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, FakeExecutor())
            await eventually(lambda: fake.streams and len(fake.current.frames) > 1, "a frame after welcome")
            assert (config.state_dir / "credential").read_text() == "cred-abc"
            assert (config.state_dir / "credential").stat().st_mode & 0o077 == 0
            fake.current.cut.set()
            await eventually(lambda: len(fake.streams) == 2, "a reconnect")
            assert fake.streams[1].metadata["authorization"] == "Bearer cred-abc"
            # Each stream of a process numbers its Hello (a delayed one is refused as stale).
            assert [st.hello.stream for st in fake.streams] == [1, 2]
            assert await w.drain() is Ended.DRAINED
            w2 = Worker(config, FakeExecutor())  # a restarted process uses it too
            await eventually(lambda: len(fake.streams) == 3, "the restarted worker's stream")
            assert fake.streams[2].metadata["authorization"] == "Bearer cred-abc"
            assert (fake.streams[2].hello.incarnation, fake.streams[2].hello.stream) == (2, 1)
            assert await w2.drain() is Ended.DRAINED

    asyncio.run(go())


def test_a_push_runs_all_cells_together_and_reports_follow_their_final_chunk(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        ex = FakeExecutor(block=True, sizes={"s1": 2 * CHUNK_BYTES_MAX + 12345, "s2": 0, "s3": 100})
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push(subjects=("s1", "s2", "s3"))
            fake.send(Frame(assignment=push))
            # Every cell is running at once before any finishes.
            await eventually(lambda: len(ex.runs) == 3, "all three cells started")
            await eventually(lambda: any(h.running_cells == 3 and push.assignment_id in h.owned_assignment_ids
                                         for h in fake.all("heartbeat")), "a heartbeat with three running cells")
            assert not fake.all("cell_report")
            ex.release.set()
            await eventually(lambda: fake.group_finished() == [(push.assignment_id, "completed")], "group finished")
            durable: set[str] = set()
            for event in fake.events:
                if event[0] == "durable":
                    durable.add(event[1])
                elif event[0] == "report":
                    assert set(event[2:]) <= durable, f"report {event[1]} before its artifacts were durable"
                    assert len(event) == 3
            assert not [e for e in fake.events if e[0] == "refused"]
            assert sorted(fake.reports) == sorted(c.attempt_id for c in push.cells)
            for job in ex.runs:
                (ref,) = fake.reports[job.attempt_id].report.artifacts
                assert fake.store[ref.digest] == ex.content(job) and ref.size_bytes == len(ex.content(job))
                assert not AttemptDirs.of(job.work_root, job.attempt_id).root.exists(), "scratch deleted"
            big = [u for u in fake.all("upload_chunk") if u.attempt_id.endswith(":s1:a1")]
            assert [len(u.data) for u in big] == [0, CHUNK_BYTES_MAX, CHUNK_BYTES_MAX, 12345]
            assert [u.offset for u in big] == [0, 0, CHUNK_BYTES_MAX, 2 * CHUNK_BYTES_MAX]
            assert [u.last for u in big] == [False, False, False, True]
            empty = [u for u in fake.all("upload_chunk") if u.attempt_id.endswith(":s2:a1")]
            assert [(u.offset, len(u.data), u.last) for u in empty] == [(0, 0, False), (0, 0, True)]
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.was_finished(AssignmentId(push.assignment_id)) and not st.assignments()

    asyncio.run(go())


def test_an_artifact_the_coordinator_already_holds_is_not_uploaded_again(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        ex = FakeExecutor()
        push = make_push(subjects=("s1",))
        job_content = (f"output of {push.cells[0].attempt_id}\n".encode() * 10)[:64]
        digest = "sha256:" + hashlib.sha256(job_content).hexdigest()
        fake.store[digest] = job_content
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            fake.send(Frame(assignment=push))
            await eventually(lambda: fake.group_finished(), "group finished")
            chunks = [u for u in fake.all("upload_chunk") if u.digest == digest]
            assert [(u.offset, u.data, u.last) for u in chunks] == [(0, b"", False)], "a probe, then nothing"
            (ref,) = fake.reports[push.cells[0].attempt_id].report.artifacts
            assert ref.digest == digest
            assert await w.drain() is Ended.DRAINED

    asyncio.run(go())


def test_a_stream_cut_mid_run_reconnects_and_replays_unacked_reports(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.cut_on_report = True
        ex = FakeExecutor()
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(fake.streams) >= 2, "a reconnect after the cut")
            await eventually(lambda: fake.group_finished() == [(push.assignment_id, "completed")], "group finished")
            first_report = next(e[1] for e in fake.events if e[0] == "report")
            assert fake.report_sends[first_report] == 2, "the unacked report was sent again"
            assert first_report in fake.streams[1].hello.buffered_attempt_ids
            assert len(ex.runs) == 2, "nothing ran twice"
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.was_finished(AssignmentId(push.assignment_id))

    asyncio.run(go())


def test_protocol_4_sends_the_reports_of_a_group_as_one_batch_and_replays_a_cut_one(tmp_path: Path) -> None:
    """A coordinator of protocol 4: the cells of a group, finished together, travel in one
    ReportBatch whose reports are acked one by one; a batch cut before its acks is replayed
    whole on the next stream, and nothing runs twice."""
    async def go() -> None:
        fake = FakeCoordinator()
        fake.protocol_version = 4
        fake.cut_on_report = True
        ex = FakeExecutor(block=True, files=False)
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push(subjects=("s1", "s2", "s3", "s4"))
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(ex.runs) == 4, "all four cells started")
            ex.release.set()
            await eventually(lambda: len(fake.streams) >= 2, "a reconnect after the cut")
            await eventually(lambda: fake.group_finished() == [(push.assignment_id, "completed")], "group finished")
            assert max(fake.batches) >= 2, f"reports were not batched: {fake.batches}"
            assert sorted(fake.reports) == sorted(c.attempt_id for c in push.cells)
            cut = [e[1] for e in fake.events if e[0] == "report"][0]
            assert fake.report_sends[cut] == 2 and cut in fake.streams[1].hello.buffered_attempt_ids
            assert len(ex.runs) == 4, "nothing ran twice"
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.was_finished(AssignmentId(push.assignment_id))

    asyncio.run(go())


def test_protocol_5_finishes_a_group_acked_in_full_without_group_finished(tmp_path: Path) -> None:
    """A coordinator of protocol 5 releases an assignment at its last report's commit: a group
    whose every cell was acked ACCEPTED, or DUPLICATE after a replay of a batch cut before its
    acks, is finished in the outbox with no GroupFinished on the wire; nothing runs twice."""
    async def go() -> None:
        fake = FakeCoordinator()
        fake.protocol_version = 5
        fake.cut_on_report = True
        ex = FakeExecutor(block=True, files=False)
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push(subjects=("s1", "s2", "s3"))
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(ex.runs) == 3, "all three cells started")
            ex.release.set()
            await eventually(lambda: len(fake.streams) >= 2, "a reconnect after the cut")
            await eventually(lambda: w.session.groups_finished == 1, "the group finished locally")
            assert not w.session.held_assignment_ids and w.state.depth == 0
            assert w.state.was_finished(AssignmentId(push.assignment_id))
            assert fake.group_finished() == [], "no GroupFinished to a coordinator of protocol 5"
            assert sorted(fake.reports) == sorted(c.attempt_id for c in push.cells)
            cut = [e[1] for e in fake.events if e[0] == "report"][0]
            assert fake.report_sends[cut] == 2, "the cut report was replayed"
            assert len(ex.runs) == 3, "nothing ran twice"
            # The next push on the same stream runs as usual.
            push2 = make_push("run-1:add/r0:g2", subjects=("s1",))
            fake.send(Frame(assignment=push2))
            await eventually(lambda: w.session.groups_finished == 2, "the second group finished")
            assert fake.group_finished() == [] and len(ex.runs) == 4
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and not st.assignments()
            assert st.was_finished(AssignmentId(push.assignment_id)) and st.was_finished(AssignmentId(push2.assignment_id))

    asyncio.run(go())


def _groups_through_the_pump(tmp_path: Path, groups: int) -> tuple[FakeCoordinator, list[list[int]], int]:
    """`groups` groups of 3 cells run one after another (protocol 5) with the outbox's reads
    counted: the coordinator, the seqs of every page the pump's `pending` returned (empty
    pages too), and the outbox's depth at the end."""
    pages: list[list[int]] = []

    async def go() -> tuple[FakeCoordinator, int]:
        fake = FakeCoordinator()
        fake.protocol_version = 5
        async with serving(fake) as port:
            w = Worker(make_config(tmp_path, port), FakeExecutor(files=False))
            pending = w.state.pending

            def counted(**kw: Any) -> list:
                page = pending(**kw)
                pages.append([e.seq for e in page])
                return page

            w.state.pending = counted  # type: ignore[method-assign]
            await eventually(lambda: fake.streams, "a stream")
            await eventually(lambda: w.session.connected, "the welcome")
            for g in range(groups):
                push = make_push(f"run-1:add/r0:g{g + 1}", subjects=("s1", "s2", "s3"))
                fake.send(Frame(assignment=push))
                await eventually(lambda g=g: w.session.groups_finished == g + 1, f"group {g + 1} finished")
            depth = w.state.depth
            assert await w.drain() is Ended.DRAINED
            return fake, depth

    fake, depth = asyncio.run(go())
    return fake, pages, depth


def test_the_pump_reads_the_outbox_when_a_report_is_put_not_at_every_ack(tmp_path: Path) -> None:
    """The pump's only new work is a put: acks, settles and finished groups (which wake the
    finisher) do not make it read the outbox again. Counted: reads that find nothing new are
    at most one per put, plus the one at connect."""
    groups = 5
    fake, pages, _ = _groups_through_the_pump(tmp_path, groups)
    assert len(fake.reports) == 3 * groups and fake.group_finished() == []
    assert sum(1 for page in pages if not page) <= 3 * groups + 1, pages


def test_the_pump_delivers_reports_put_on_its_stream_without_reading_them_back(tmp_path: Path) -> None:
    """A report the outbox wrote while the stream was open goes to the pump as the put
    returned it: the pump's reads find no entry (issue 26: the read-back was 4% of a W1
    worker's loop), and every report is still delivered, and once."""
    groups = 4
    fake, pages, depth = _groups_through_the_pump(tmp_path, groups)
    assert len(fake.reports) == 3 * groups
    assert set(fake.report_sends.values()) == {1}, fake.report_sends
    assert [seq for page in pages for seq in page] == [], pages
    assert depth == 0


def test_protocol_5_still_sends_group_finished_when_a_cell_was_not_counted(tmp_path: Path) -> None:
    """A LATE ack means the coordinator's assignment ended before that report: the worker
    cannot know it was released by its reports, so it says GroupFinished as before."""
    async def go() -> None:
        fake = FakeCoordinator()
        fake.protocol_version = 5
        fake.report_outcome = common_pb2.ACK_OUTCOME_LATE
        ex = FakeExecutor(files=False)
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: fake.group_finished() == [(push.assignment_id, "completed")], "group finished")
            await eventually(lambda: not w.session.held_assignment_ids, "finished locally after its ack")
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.was_finished(AssignmentId(push.assignment_id))

    asyncio.run(go())


def test_groups_keep_running_while_disconnected_and_report_after_reconnecting(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        ex = FakeExecutor(block=True)
        async with serving(fake) as port:
            w = Worker(make_config(tmp_path, port), ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(ex.runs) == 2, "both cells started")
            fake.refuse_first = 10**6  # every new stream is refused UNAVAILABLE for now
            fake.current.cut.set()
            await eventually(lambda: len(fake.streams) >= 2, "a refused reconnect")
            ex.release.set()
            await eventually(lambda: w.state.depth == 2, "both outcomes buffered while disconnected")
            refused_streams = len(fake.streams)
            assert not fake.all("cell_report")
            fake.refuse_first = 0
            await eventually(lambda: fake.group_finished() == [(push.assignment_id, "completed")], "group finished")
            assert len(fake.streams) > refused_streams and len(ex.runs) == 2 and not ex.cancelled
            assert sorted(fake.reports) == sorted(c.attempt_id for c in push.cells)
            assert await w.drain() is Ended.DRAINED

    asyncio.run(go())


def test_a_lost_stream_with_work_at_stake_is_rejoined_on_fresh_connections_then_backs_off(tmp_path: Path) -> None:
    """Through the rejoin window (the coordinator's grace) a worker holding a group tries every
    REJOIN_ATTEMPT_MS, each try on a new channel (a new connection: a backing-off subchannel is
    not shared); past the window, not welcomed, it backs off as any worker does, on one channel."""
    async def go() -> None:
        fake = FakeCoordinator()
        ex = FakeExecutor(block=True)
        async with serving(fake) as port:
            w = Worker(make_config(tmp_path, port), ex)
            w.session._rng = random.Random(26)  # the backoff's draws, fixed
            await eventually(lambda: fake.streams, "a stream")
            fake.send(Frame(assignment=make_push()))
            await eventually(lambda: len(ex.runs) == 2, "both cells started")
            fake.refuse_first = 10**6  # every new stream is refused UNAVAILABLE
            loop = asyncio.get_running_loop()
            cut_at = loop.time()
            fake.current.cut.set()
            window_s, attempt_s = REJOIN_WINDOW_MS / 1000, REJOIN_ATTEMPT_MS / 1000
            await asyncio.sleep(window_s + 2.5)
            tries = fake.streams[1:]
            inside = [st for st in tries if st.opened_s < cut_at + window_s]
            after = [st for st in tries if st.opened_s > cut_at + window_s + attempt_s]
            assert len(inside) >= 4, [round(st.opened_s - cut_at, 3) for st in tries]
            assert len({st.peer for st in inside}) == len(inside), "a rejoin try reused a connection"
            gaps = [b.opened_s - a.opened_s for a, b in zip(inside, inside[1:])]
            # One try an attempt period (each timed from the start of the one before), never a loop.
            assert sum(gaps) / len(gaps) >= attempt_s * 0.9 and min(gaps) >= attempt_s / 2, gaps
            assert len(after) >= 2 and len({st.peer for st in after}) == 1, \
                "past the window the worker should back off on its one channel"
            assert len(after) < 2.5 / attempt_s, "past the window the worker still tries at the rejoin pace"
            assert not ex.cancelled, "the group ran on through the disconnection"
            fake.refuse_first = 0
            ex.release.set()
            await eventually(lambda: w.state.depth == 0, "its reports delivered after the coordinator came back", 20)
            assert await w.drain() is Ended.DRAINED

    asyncio.run(go())


def test_a_repeated_push_is_ignored_while_running_and_after_finishing(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        ex = FakeExecutor(block=True)
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            fake.send(Frame(assignment=make_push(deadline_ms=60_000)))
            await eventually(lambda: len(ex.runs) == 2, "both cells started")
            fake.send(Frame(assignment=make_push(deadline_ms=59_000)))  # re-sent: another relative deadline
            await asyncio.sleep(0.2)
            ex.release.set()
            await eventually(lambda: fake.group_finished(), "group finished")
            fake.send(Frame(assignment=make_push(deadline_ms=1_000)))
            await asyncio.sleep(0.3)
            assert len(ex.runs) == 2 and len(fake.group_finished()) == 1
            assert await w.drain() is Ended.DRAINED

    asyncio.run(go())


def test_revoke_cancels_the_cells_and_their_outcomes_are_still_reported(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.report_outcome = common_pb2.ACK_OUTCOME_LATE
        ex = FakeExecutor(block=True)
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(ex.runs) == 2, "both cells started")
            fake.send(Frame(revoke=coordinator_pb2.Revoke(assignment_id=push.assignment_id, reason="expired")))
            await eventually(lambda: len(fake.reports) == 2, "both (late) reports")
            assert sorted(ex.cancelled) == sorted(c.attempt_id for c in push.cells)
            assert all(r.report.execution == common_pb2.EXECUTION_UNKNOWN for r in fake.reports.values())
            await eventually(lambda: w.session.held_assignment_ids == [], "the assignment let go")
            await asyncio.sleep(0.2)
            assert fake.group_finished() == [], "a revoked assignment is not finished on the coordinator"
            assert push.assignment_id not in fake.current.of("heartbeat")[-1].owned_assignment_ids
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.was_finished(AssignmentId(push.assignment_id))

    asyncio.run(go())


def test_a_restart_resends_the_unacked_report_without_running_the_cell_and_hands_back(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.hold_reports = True
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            first = FakeExecutor()
            w = Worker(config, first)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(fake.report_sends) == 2, "both reports sent, neither acked")
            await w.crash()  # the process dies with both reports unacknowledged
            fake.hold_reports = False
            second = FakeExecutor()
            w2 = Worker(config, second)
            await eventually(lambda: fake.group_finished(), "the orphan handed back")
            assert fake.group_finished() == [(push.assignment_id, "handed_back")]
            assert second.runs == [], "a finished cell is never executed again"
            hello = fake.current.hello
            assert hello.incarnation == 2 and list(hello.owned_assignment_ids) == []
            assert sorted(hello.buffered_attempt_ids) == sorted(c.attempt_id for c in push.cells)
            assert sorted(fake.reports) == sorted(c.attempt_id for c in push.cells)
            # Handed back only after its reports were acknowledged.
            finished_at = next(i for i, f in enumerate(fake.current.frames) if f.WhichOneof("body") == "group_finished")
            reports_at = [i for i, f in enumerate(fake.current.frames) if f.WhichOneof("body") == "cell_report"]
            assert len(reports_at) == 2 and max(reports_at) < finished_at
            fake.send(Frame(assignment=push))  # the coordinator re-sends it: still not run
            await asyncio.sleep(0.2)
            assert second.runs == []
            assert await w2.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.was_finished(AssignmentId(push.assignment_id)) and not st.assignments()

    asyncio.run(go())


def test_an_unavailable_coordinator_is_retried(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.refuse_first = 2
        async with serving(fake) as port:
            w = Worker(make_config(tmp_path, port), FakeExecutor())
            await eventually(lambda: len(fake.streams) == 3 and len(fake.current.frames) > 1, "the third stream")
            assert all(s.hello.incarnation == 1 for s in fake.streams)
            assert await w.drain() is Ended.DRAINED

    asyncio.run(go())


def test_a_permanent_refusal_makes_fleet_worker_exit_77_with_one_clear_line(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.refuse = (grpc.StatusCode.FAILED_PRECONDITION,
                       "INCARNATION_STALE: incarnation 1 is older than the registered 2")
        async with serving(fake) as port:
            (tmp_path / "token").write_text(ENROLL)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "worker.main", "--coordinator", f"127.0.0.1:{port}",
                "--token-file", str(tmp_path / "token"), "--worker-id", WORKER, "--slots", "1",
                "--state-dir", str(tmp_path / "state"), "--bench-root", str(BENCH),
                cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(REPO)})
            out, err = await asyncio.wait_for(proc.communicate(), 20)
            assert proc.returncode == 77, err.decode()  # worker/main.py EXIT_REFUSED
            lines = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
            errors = [line for line in lines if line.get("level") == "error"]
            assert len(errors) == 1, lines
            assert "FAILED_PRECONDITION" in errors[0]["event"] and "INCARNATION_STALE" in errors[0]["event"]
            assert len(fake.streams) == 1, "a permanent refusal is not retried"

    asyncio.run(go())


def test_fleet_worker_refuses_python_O_and_prints_its_identity(tmp_path: Path) -> None:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    optimized = subprocess.run([sys.executable, "-O", "-m", "worker.main", "identity", "--bench-root", str(BENCH)],
                               cwd=REPO, capture_output=True, text=True, env=env, timeout=20)
    assert optimized.returncode == 2 and "python -O" in optimized.stderr
    shown = subprocess.run([sys.executable, "-m", "worker.main", "identity", "--bench-root", str(BENCH)],
                           cwd=REPO, capture_output=True, text=True, env=env, timeout=20)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["environmentId"].startswith("env-") and "python.version" in data["manifest"]
    assert "bench.tree" not in data["manifest"], "the bench root as a whole is no part of the identity"


def test_plaintext_to_a_remote_coordinator_needs_insecure(tmp_path: Path) -> None:
    from worker.config import ConfigError

    with pytest.raises(ConfigError, match="--insecure"):
        make_config(tmp_path, 7443, coordinator="10.1.2.3:7443")
    assert make_config(tmp_path, 7443, coordinator="10.1.2.3:7443", insecure=True).plaintext
    assert make_config(tmp_path, 7443, coordinator="[::1]:7443").plaintext
    assert "secret" not in repr(make_config(tmp_path, 1, environ={"API_KEY": "secret"}))


def test_a_refused_upload_restarts_and_a_refused_report_is_dead_lettered(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.mismatch_final_chunks = 1
        fake.reject_reports_with = common_pb2.REJECTION_REASON_INVALID_EVIDENCE
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, FakeExecutor(sizes={"s1": CHUNK_BYTES_MAX + 10}))
            await eventually(lambda: fake.streams, "a stream")
            push = make_push(subjects=("s1",))
            fake.send(Frame(assignment=push))
            await eventually(lambda: fake.group_finished(), "group finished")
            attempt = push.cells[0].attempt_id
            chunks = [(u.offset, len(u.data), u.last) for u in fake.all("upload_chunk")]
            assert chunks == [(0, 0, False), (0, CHUNK_BYTES_MAX, False), (CHUNK_BYTES_MAX, 10, True),
                              (0, CHUNK_BYTES_MAX, False), (CHUNK_BYTES_MAX, 10, True)], "restarted from 0"
            (dead,) = fake.all("dead_letter")
            assert dead.attempt_id == attempt and "INVALID_EVIDENCE" in dead.reason
            assert fake.group_finished() == [(push.assignment_id, "handed_back")], "not every cell was reported"
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and [d.entry.attempt_id for d in st.dead_letters()] == [attempt]

    asyncio.run(go())


def test_an_overloaded_or_full_coordinator_gets_the_report_again_not_a_dead_letter(tmp_path: Path) -> None:
    """OVERLOADED (protocol 6, which this worker's hello names) and STORAGE_FULL say "later":
    the report is sent again after a backoff until it is accepted; nothing is dead-lettered."""
    async def go() -> None:
        fake = FakeCoordinator()
        fake.protocol_version = common_pb2.PROTOCOL_REVISION_OVERLOADED
        fake.refuse_reports_first = [common_pb2.REJECTION_REASON_OVERLOADED, common_pb2.REJECTION_REASON_OVERLOADED,
                                     common_pb2.REJECTION_REASON_STORAGE_FULL]
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, FakeExecutor(files=False))
            await eventually(lambda: fake.streams, "a stream")
            assert fake.current.hello.protocol_version == common_pb2.PROTOCOL_REVISION_OVERLOADED
            push = make_push(subjects=("s1",))
            fake.send(Frame(assignment=push))
            attempt = push.cells[0].attempt_id
            await eventually(lambda: attempt in fake.reports, "the report accepted", timeout_s=20)
            assert fake.report_sends[attempt] == 4, "refused three times, then accepted"
            assert fake.all("dead_letter") == []
            assert await w.drain() is Ended.DRAINED
        with reopen(config) as st:
            assert st.depth == 0 and st.dead_letters() == []

    asyncio.run(go())


def test_a_drain_past_its_timeout_cancels_groups_and_still_reports_them(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        ex = FakeExecutor(block=True)
        async with serving(fake) as port:
            w = Worker(make_config(tmp_path, port, drain_timeout_s=0), ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(ex.runs) == 2, "both cells started")
            assert await w.drain() is Ended.DRAINED
            assert sorted(ex.cancelled) == sorted(fake.reports) == sorted(c.attempt_id for c in push.cells)
            assert fake.group_finished() == [(push.assignment_id, "completed")]
            assert fake.current.of("drain_notice")[0].deadline_ms == 0
            kinds = [f.WhichOneof("body") for f in fake.current.frames]
            assert kinds[-1] == "goodbye" and kinds.index("drain_notice") < kinds.index("goodbye")

    asyncio.run(go())


def test_abort_stops_promptly_and_the_outbox_keeps_what_finished(tmp_path: Path) -> None:
    async def go() -> None:
        fake = FakeCoordinator()
        fake.hold_reports = True
        ex = FakeExecutor(block=True)
        async with serving(fake) as port:
            config = make_config(tmp_path, port)
            w = Worker(config, ex)
            await eventually(lambda: fake.streams, "a stream")
            push = make_push()
            fake.send(Frame(assignment=push))
            await eventually(lambda: len(ex.runs) == 2, "both cells started")
            w.session.abort()
            assert await asyncio.wait_for(w.task, 10) is Ended.ABORTED
            w.state.close()
        with reopen(config) as st:
            assert sorted(e.attempt_id for e in st.pending()) == sorted(c.attempt_id for c in push.cells)
            assert [a for a, _ in st.assignments()] == [push.assignment_id], "handed back by the next start"

    asyncio.run(go())


def test_sigterm_drains_fleet_worker_and_it_exits_0(tmp_path: Path) -> None:
    async def go() -> None:
        import signal

        fake = FakeCoordinator()
        async with serving(fake) as port:
            (tmp_path / "token").write_text(ENROLL)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "worker.main", "--coordinator", f"127.0.0.1:{port}",
                "--token-file", str(tmp_path / "token"), "--worker-id", WORKER, "--slots", "1",
                "--state-dir", str(tmp_path / "state"), "--bench-root", str(BENCH),
                cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(REPO)})
            try:
                await eventually(lambda: fake.streams and fake.current.of("heartbeat"), "a heartbeat", 15)
            except AssertionError:
                proc.kill()
                raise
            hello = fake.current.hello
            assert hello.environment_id.startswith("env-") and hello.cpu_millis > 0 and hello.memory_mb > 0
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 15)
            assert proc.returncode == 0, err.decode()
            assert fake.all("drain_notice") and fake.all("goodbye")

    asyncio.run(go())


@pytest.mark.skipif(not __import__("shutil").which("openssl"), reason="needs the openssl command")
def test_with_a_ca_file_the_session_runs_over_tls(tmp_path: Path) -> None:
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=20)

    async def go() -> None:
        fake = FakeCoordinator()
        server = grpc.aio.server()
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(fake, server)
        creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
        port = server.add_secure_port("127.0.0.1:0", creds)
        await server.start()
        try:
            w = Worker(make_config(tmp_path, port, coordinator=f"localhost:{port}", tls_ca=cert), FakeExecutor())
            await eventually(lambda: fake.streams and fake.current.of("heartbeat"), "a heartbeat over TLS")
            assert fake.current.metadata["authorization"] == f"Bearer {ENROLL}"
            assert await w.drain() is Ended.DRAINED
        finally:
            await server.stop(0)

    asyncio.run(go())
