"""A raw worker-session client for integration tests: it opens `Coordinator.Session` with
chosen metadata, sends hand-made `WorkerFrame`s and reads `CoordinatorFrame`s with timeouts;
it runs nothing and decides nothing, so a test can play a correct or a misbehaving worker.

Synchronous gRPC: the request stream is fed from a bounded queue, and a reader thread moves
every response (and the final status) into another queue, so that each read has a timeout.
"""
from __future__ import annotations

import hashlib
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from common.fleetpb import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc

READ_TIMEOUT_S = 10.0
SEND_QUEUE_FRAMES_MAX = 64
RECV_QUEUE_FRAMES_MAX = 10_000
# Big enough to send a frame past the coordinator's MESSAGE_BYTES_MAX on purpose.
CLIENT_MESSAGE_BYTES_MAX = 64 << 20
ENVIRONMENT_ID = "env-rawclient-1"
_END = object()


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[
        ("grpc.max_send_message_length", CLIENT_MESSAGE_BYTES_MAX),
        ("grpc.max_receive_message_length", CLIENT_MESSAGE_BYTES_MAX)])


def worker_metadata(token: str | None, worker_id: str | None) -> tuple[tuple[str, str], ...]:
    md = []
    if token is not None:
        md.append(("authorization", f"Bearer {token}"))
    if worker_id is not None:
        md.append(("x-fleet-worker-id", worker_id))
    return tuple(md)


def hello(worker_id: str, *, incarnation: int = 1, slots: int = 1, environment_id: str = ENVIRONMENT_ID,
          seq: int = 1, **extra: Any) -> coordinator_pb2.WorkerFrame:
    fields = dict(worker_id=worker_id, incarnation=incarnation, slots=slots, cpu_millis=4_000, memory_mb=4_096,
                  environment=[common_pb2.EnvironmentComponent(key="rawclient", value=environment_id)],
                  environment_id=environment_id, protocol_version=3, software_version="rawclient")
    fields.update(extra)
    return coordinator_pb2.WorkerFrame(seq=seq, hello=coordinator_pb2.Hello(**fields))


def good_report(score: float = 1.0, **overrides: Any) -> common_pb2.Report:
    """A selectable report whose status agrees with its evidence (usage missing, so no cost)."""
    fields = dict(status=common_pb2.STATUS_COMPLETED, execution=common_pb2.EXECUTION_COMPLETED,
                  verification=common_pb2.VERIFICATION_VALID, usage=common_pb2.USAGE_MISSING,
                  cleanup=common_pb2.CLEANUP_CONFIRMED, score=score, detail="rawclient")
    fields.update(overrides)
    return common_pb2.Report(**fields)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class SessionClosed(AssertionError):
    """The stream ended (with `code` and `details`) while a frame was awaited."""

    def __init__(self, code: grpc.StatusCode, details: str, waiting_for: str) -> None:
        super().__init__(f"session ended with {code.name}: {details!r} while waiting for {waiting_for}")
        self.code = code
        self.details = details


@dataclass
class RawSession:
    """One `Coordinator.Session` stream. `seq` counts the frames sent by `send_body`."""

    address: str
    metadata: tuple[tuple[str, str], ...]
    seq: int = 0
    pushes: list = field(default_factory=list)  # AssignmentPush frames seen so far, in order
    others: list = field(default_factory=list)  # frames that were neither acks nor pushes
    _acks: dict = field(default_factory=dict)  # seq -> Ack not yet taken
    welcome: Any = None
    # Offers are answered at once with these values (key -> value; a key not here is
    # answered "" — what a run submitted without a manifest never asks for), unless off.
    auto_measure: bool = True
    measurements: dict = field(default_factory=dict)
    measured_seqs: list = field(default_factory=list)  # seqs of the automatic answers

    def __post_init__(self) -> None:
        self._channel = channel(self.address)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)
        self._out: queue.Queue = queue.Queue(SEND_QUEUE_FRAMES_MAX)
        self._in: queue.Queue = queue.Queue(RECV_QUEUE_FRAMES_MAX)
        self._status: tuple[grpc.StatusCode, str] | None = None
        self._bundled: list = []  # frames of a FrameBundle not yet taken
        self._call = self._stub.Session(self._requests(), metadata=self.metadata)
        self._reader = threading.Thread(target=self._read_loop, name="rawclient-reader", daemon=True)
        self._reader.start()

    # ---- plumbing -----------------------------------------------------------------------

    def _requests(self):
        while True:
            item = self._out.get()
            if item is _END:
                return
            yield item

    def _read_loop(self) -> None:
        try:
            for frame in self._call:
                self._in.put(frame)
            self._status = (self._call.code(), self._call.details() or "")
        except grpc.RpcError as e:
            self._status = (e.code(), e.details() or "")
        self._in.put(_END)

    def send(self, frame: coordinator_pb2.WorkerFrame) -> None:
        self._out.put(frame, timeout=READ_TIMEOUT_S)

    def send_body(self, **body: Any) -> int:
        """Send the next frame (seq + 1) with one body field; returns its seq."""
        self.seq += 1
        self.send(coordinator_pb2.WorkerFrame(seq=self.seq, **body))
        return self.seq

    def recv(self, timeout: float = READ_TIMEOUT_S, waiting_for: str = "a frame") -> Any:
        """The next frame (a FrameBundle, to a hello of protocol 4, is read frame by frame)."""
        if self._bundled:
            return self._take(self._bundled.pop(0))
        item = self._next(timeout, waiting_for)
        if item.WhichOneof("body") == "bundle":
            self._bundled = list(item.bundle.frames)
            return self._take(self._bundled.pop(0))
        return self._take(item)

    def _next(self, timeout: float, waiting_for: str) -> Any:
        """The next frame; raises SessionClosed when the stream ended, AssertionError on timeout."""
        try:
            item = self._in.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame within {timeout}s while waiting for {waiting_for}") from None
        if item is _END:
            self._in.put(_END)  # keep reporting the end to later reads
            code, details = self._status or (grpc.StatusCode.UNKNOWN, "")
            raise SessionClosed(code, details, waiting_for)
        return item

    def _take(self, item: Any) -> Any:
        kind = item.WhichOneof("body")
        if kind == "assignment":
            self.pushes.append(item.assignment)
        elif kind == "ack":
            self._acks[item.ack.seq] = item.ack
        elif kind == "acks":  # an AckBatch, to a hello of protocol 2 or more
            for ack in item.acks.acks:
                self._acks[ack.seq] = ack
        elif kind == "welcome":
            self.welcome = item.welcome
        elif kind == "run_offer" and self.auto_measure:
            offer = item.run_offer
            self.measured_seqs.append(self.send_body(run_environment=coordinator_pb2.RunEnvironment(
                run_id=offer.run_id, components=[common_pb2.EnvironmentComponent(
                    key=k, value=self.measurements.get(k, "")) for k in offer.keys])))
        else:
            self.others.append(item)
        return item

    # ---- waiting for what a test expects --------------------------------------------------

    def open(self, hello_frame: coordinator_pb2.WorkerFrame, timeout: float = READ_TIMEOUT_S) -> Any:
        """Send `hello_frame` (seq 1) and return the Welcome."""
        self.seq = hello_frame.seq
        self.send(hello_frame)
        deadline = time.monotonic() + timeout
        while self.welcome is None:
            self.recv(max(0.01, deadline - time.monotonic()), "the welcome")
        return self.welcome

    def ack(self, seq: int, timeout: float = READ_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout
        while seq not in self._acks:
            self.recv(max(0.01, deadline - time.monotonic()), f"the ack of seq {seq}")
        return self._acks.pop(seq)

    def push(self, count: int = 1, timeout: float = READ_TIMEOUT_S) -> list:
        """Wait until `count` pushes were seen; returns all pushes so far."""
        deadline = time.monotonic() + timeout
        while len(self.pushes) < count:
            self.recv(max(0.01, deadline - time.monotonic()), f"push number {count}")
        return list(self.pushes)

    def quiet(self, seconds: float) -> list:
        """Read for `seconds` and return what arrived (to show that nothing did)."""
        got = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                got.append(self.recv(left))
            except AssertionError as e:
                if isinstance(e, SessionClosed):
                    raise
                break
        return got

    def closed(self, timeout: float = READ_TIMEOUT_S) -> tuple[grpc.StatusCode, str, list]:
        """Wait for the stream to end; (status code, details, frames received meanwhile)."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                got.append(self.recv(max(0.01, deadline - time.monotonic()), "the end of the stream"))
            except SessionClosed as e:
                return e.code, e.details, got

    # ---- frames ---------------------------------------------------------------------------

    def report(self, push: Any, cell_index: int = 0, report: common_pb2.Report | None = None, *,
               attempt_id: str | None = None, assignment_id: str | None = None,
               generation: int | None = None, run_id: str | None = None) -> int:
        cell = push.cells[cell_index]
        return self.send_body(cell_report=coordinator_pb2.CellReport(
            run_id=push.run_id if run_id is None else run_id,
            attempt_id=cell.attempt_id if attempt_id is None else attempt_id,
            assignment_id=push.assignment_id if assignment_id is None else assignment_id,
            generation=push.generation if generation is None else generation,
            report=good_report() if report is None else report))

    def chunk(self, attempt_id: str, digest: str, total_length: int, offset: int, data: bytes, *,
              last: bool = False, upload_id: str = "u1") -> int:
        return self.send_body(upload_chunk=coordinator_pb2.UploadChunk(
            upload_id=upload_id, attempt_id=attempt_id, digest=digest, total_length=total_length,
            offset=offset, data=data, last=last))

    def upload(self, attempt_id: str, data: bytes, *, digest: str | None = None) -> Any:
        """Probe, send the bytes in one chunk with last=True; returns the final Ack."""
        digest = digest or digest_of(data)
        probe = self.ack(self.chunk(attempt_id, digest, len(data), 0, b""))
        assert probe.outcome == common_pb2.ACK_OUTCOME_ACCEPTED, probe
        return self.ack(self.chunk(attempt_id, digest, len(data), probe.committed_offset,
                                   data[probe.committed_offset:], last=True))

    def close(self) -> None:
        try:
            self._out.put_nowait(_END)
        except queue.Full:
            pass
        self._call.cancel()
        self._reader.join(5)
        self._channel.close()

    def __enter__(self) -> RawSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def admin_call(address: str, token: str | None, name: str, request: Any, timeout: float = 10.0) -> Any:
    """One Admin RPC with a chosen bearer token (None: no authorization metadata)."""
    ch = channel(address)
    try:
        stub = admin_pb2_grpc.AdminStub(ch)
        md = (("authorization", f"Bearer {token}"),) if token is not None else ()
        result = getattr(stub, name)(request, metadata=md, timeout=timeout)
        if hasattr(result, "__next__"):  # a server stream: read it whole, errors included
            return list(result)
        return result
    finally:
        ch.close()


def status_request() -> admin_pb2.GetStatusRequest:
    return admin_pb2.GetStatusRequest()
