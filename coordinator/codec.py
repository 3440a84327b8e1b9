"""The coordinator's edge codec: wire frames to core commands and core effects to frames.

Only this module turns a worker's frame into a command (`frame_command`, `hello_command`, and
a ReportBatch's rows through `report_row` and `cell_reported`, which the actor calls for each
row); the services decode nothing themselves. Only this module, the services and the log codec
touch generated protobuf types. Decoding is strict: a frame that misses a required field or
carries an out-of-range value becomes a `FrameError` with a Rejection, never an exception that
reaches the core.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.evidence import Report
from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2
from common.ids import AssignmentId, AttemptId, RunId, WorkerId, is_digest
from common.limits import ID_CHARS_MAX, MANIFEST_ENTRIES_MAX, MANIFEST_KEY_CHARS_MAX, MANIFEST_VALUE_CHARS_MAX
from common.rejections import Rejection
from common.spec import ExperimentSpec, canonical_json
from coordinator.core import commands as c
from coordinator.core.effects import (
    NotifyRunState,
    OfferRun,
    Outcome,
    PushAssignment,
    RefuseRun,
    RequestDrain,
    RevokeAssignment,
)
from coordinator.logcodec import LogCodecError, report_from_proto

# The protocol's revisions, what each brought and what each implies, are protos/fleet/v1/common.proto
# `ProtocolRevision`; these are the coordinator's names for them. It speaks 6: an assignment is
# released by the commit of its last cell report (coordinator/core/machine.py `_cell_reported`),
# and an overload is refused OVERLOADED to a worker of 6 (`overload_rejection`); workers of 3
# to 5 are served as before (the GroupFinished of 3 and 4 is answered DUPLICATE, an overload
# STORAGE_FULL), one below 3 cannot show that it runs a run's benchmark and is refused.
PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_OVERLOADED
ACK_BATCH_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_ACK_BATCH
RUN_OFFER_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_RUN_OFFER
REPORT_BATCH_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_REPORT_BATCH
BUNDLE_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_BUNDLE
TRANSPORT_LIVENESS_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_TRANSPORT_LIVENESS
OVERLOADED_PROTOCOL_VERSION = common_pb2.PROTOCOL_REVISION_OVERLOADED
BUNDLE_FRAMES_MAX = 256
ACK_BATCH_MAX = 256


def overload_rejection(protocol_version: int) -> Rejection:
    """What a worker's frame is refused with when the actor's queue is full: OVERLOADED to a
    worker that knows the reason, STORAGE_FULL (which every worker resends) to an older one."""
    return Rejection.OVERLOADED if protocol_version >= OVERLOADED_PROTOCOL_VERSION else Rejection.STORAGE_FULL


class FrameError(ValueError):
    def __init__(self, rejection: Rejection, detail: str) -> None:
        super().__init__(f"{rejection.name}: {detail}")
        self.rejection = rejection
        self.detail = detail


def require_id(value: str, what: str) -> str:
    if not value or len(value) > ID_CHARS_MAX:
        raise FrameError(Rejection.MALFORMED_FRAME, f"{what} is empty or longer than {ID_CHARS_MAX} characters")
    return value


_REQUIRED_ENUMS = ("status", "execution", "verification", "usage", "cleanup")


def decode_report(msg: common_pb2.Report) -> Report:
    try:
        report = report_from_proto(msg)
    except LogCodecError as e:
        raise FrameError(Rejection.MALFORMED_FRAME, f"report does not decode: {e}") from None
    # An enum left at zero (UNSPECIFIED) decodes; the frame is refused all the same.
    if not (report.status and report.execution and report.verification and report.usage and report.cleanup):
        name = next(n for n in _REQUIRED_ENUMS if not getattr(report, n))
        raise FrameError(Rejection.MALFORMED_FRAME, f"report misses its required field {name}")
    return report


# A report as the core takes it: (attempt id, assignment id, generation, report).
ReportRow = tuple[AttemptId, AssignmentId, int, Report]
Maker = Callable[[int], object]  # a command, given the actor's time when it is applied

# The Session frames that are one command each, and those whose commit may push a group to
# the worker (its slot refilled: the slot_refill histogram is measured for them).
COMMAND_FRAMES = frozenset({"cell_report", "group_finished", "run_environment", "drain_notice", "goodbye"})
REFILL_FRAMES = frozenset({"cell_report", "run_environment"})


def report_row(r: coordinator_pb2.CellReport) -> ReportRow:
    """A CellReport's ids, generation and report, checked (`FrameError` if not)."""
    report = decode_report(r.report)
    return (AttemptId(require_id(r.attempt_id, "attempt_id")), AssignmentId(require_id(r.assignment_id, "assignment_id")),
            r.generation, report)


def cell_reported(now_ms: int, worker_id: WorkerId, row: ReportRow) -> c.CellReported:
    """The command of one report row (a ReportBatch's rows are applied by the actor at one
    time, from rows rather than a closure each: 1 us a report less)."""
    return c.CellReported(now_ms, worker_id, row[0], row[1], row[2], row[3])


def offered_command(worker_id: WorkerId, row: ReportRow) -> Maker:
    """A result the worker kept and offers again after the coordinator's epoch changed."""
    return lambda now: c.ResultOffered(now, worker_id, row[0], row[1], row[2], row[3])


def report_command(worker_id: WorkerId, r: coordinator_pb2.CellReport) -> Maker:
    row = report_row(r)
    if r.offered:
        return offered_command(worker_id, row)
    return lambda now: cell_reported(now, worker_id, row)


def frame_command(kind: str, body: Any, worker_id: WorkerId, incarnation: int) -> Maker:
    """The command of a Session frame of a kind in COMMAND_FRAMES (`FrameError` if it does not
    decode)."""
    if kind == "cell_report":
        return report_command(worker_id, body)
    if kind == "group_finished":
        aid = AssignmentId(require_id(body.assignment_id, "assignment_id"))
        unstarted = body.reason == "not_started"
        return lambda now: c.GroupFinished(now, worker_id, aid, unstarted)
    if kind == "run_environment":
        run_id = RunId(require_id(body.run_id, "run_id"))
        measured = decode_manifest(body.components, "the run environment")
        return lambda now: c.RunEnvironmentMeasured(now, worker_id, incarnation, run_id, measured)
    if kind == "drain_notice":
        return lambda now: c.WorkerDrained(now, worker_id)
    assert kind == "goodbye", f"{kind} is not a command frame"
    return lambda now: c.WorkerGone(now, worker_id)


def hello_command(worker_id: WorkerId, hello: coordinator_pb2.Hello, environment: tuple[tuple[str, str], ...]) -> Maker:
    """The registration a Hello asks for (its environment decoded and checked by the caller,
    `decode_manifest`, before the session exists)."""
    owned = tuple(AssignmentId(a) for a in hello.owned_assignment_ids)
    buffered = tuple(AttemptId(a) for a in hello.buffered_attempt_ids)
    return lambda now: c.WorkerRegistered(
        now, worker_id, hello.incarnation, hello.slots, hello.environment_id, hello.cpu_millis, hello.memory_mb,
        owned=owned, buffered=buffered, cell_environment_id=hello.cell_environment_id, environment=environment,
        degraded=hello.degraded[:ID_CHARS_MAX])  # as a heartbeat's, cut to the bound


def require_digest(value: str) -> str:
    if not is_digest(value):
        raise FrameError(Rejection.MALFORMED_FRAME, f"{value!r} is not a sha256:<64 hex> digest")
    return value


@dataclass(frozen=True, slots=True)
class RunParts:
    """The frozen spec cut into the JSON pieces an assignment push carries."""

    benchmark_json: str
    executor_json: str
    verifier_json: str
    budget_json: str
    tasks: dict[str, str]
    subjects: dict[str, str]

    @staticmethod
    def of(spec: ExperimentSpec) -> RunParts:
        doc = spec.document()
        return RunParts(
            benchmark_json=canonical_json(doc["benchmark"]),
            executor_json=canonical_json(doc["executor"]),
            verifier_json=canonical_json(doc["verifier"]),
            budget_json=canonical_json(doc["budget"]),
            tasks={t["id"]: canonical_json(t) for t in doc["tasks"]},
            subjects={s["id"]: canonical_json(s) for s in doc["subjects"]},
        )


def push_frame(push: PushAssignment, parts: RunParts, now_ms: int) -> coordinator_pb2.CoordinatorFrame:
    """Built in place, each cell added to the frame's own list: a cell built alone and copied in
    costs a copy of every field (docs/benchmarks.md has the measurement)."""
    task_id = push.cells[0].task_id if push.cells else ""
    frame = coordinator_pb2.CoordinatorFrame()
    p = frame.assignment
    p.SetInParent()  # present even when every field is at its default
    p.run_id = push.run_id
    p.assignment_id = push.assignment_id
    p.generation = push.generation
    p.group_id = push.group_id
    p.task_id = task_id
    p.repetition = push.cells[0].repetition if push.cells else 0
    p.deadline_ms = max(0, push.deadline_ms - now_ms)
    p.benchmark_json = parts.benchmark_json
    p.executor_json = parts.executor_json
    p.task_json = parts.tasks[task_id]
    p.verifier_json = parts.verifier_json
    p.budget_json = parts.budget_json
    add = p.cells.add
    for cell in push.cells:
        add(cell_id=cell.cell_id, attempt_id=cell.attempt_id, subject_id=cell.subject_id,
            dispatch_order=cell.dispatch_order)
    p.subject_json.extend([parts.subjects[cell.subject_id] for cell in push.cells])
    return frame


def decode_manifest(components: Any, what: str) -> tuple[tuple[str, str], ...]:
    """Measured (key, value) components, bounded and without repeats, sorted by key."""
    if len(components) > MANIFEST_ENTRIES_MAX:
        raise FrameError(Rejection.MESSAGE_TOO_LARGE, f"{what} has {len(components)} entries, over {MANIFEST_ENTRIES_MAX}")
    out: dict[str, str] = {}
    for comp in components:
        if not comp.key or len(comp.key) > MANIFEST_KEY_CHARS_MAX or len(comp.value) > MANIFEST_VALUE_CHARS_MAX:
            raise FrameError(Rejection.MALFORMED_FRAME, f"{what} has an empty or oversized key or value ({comp.key[:80]!r})")
        if comp.key in out:
            raise FrameError(Rejection.MALFORMED_FRAME, f"{what} names {comp.key!r} twice")
        out[comp.key] = comp.value
    return tuple(sorted(out.items()))


def components(pairs: Any) -> list[common_pb2.EnvironmentComponent]:
    return [common_pb2.EnvironmentComponent(key=k, value=v) for k, v in pairs]


def differences(diffs: Any) -> list[common_pb2.EnvironmentDifference]:
    return [common_pb2.EnvironmentDifference(key=k, run_value=a, worker_value=b) for k, a, b in diffs]


def offer_frame(offer: OfferRun) -> coordinator_pb2.CoordinatorFrame:
    return coordinator_pb2.CoordinatorFrame(run_offer=coordinator_pb2.RunOffer(run_id=offer.run_id, keys=offer.keys))


def refused_frame(refusal: RefuseRun) -> coordinator_pb2.CoordinatorFrame:
    return coordinator_pb2.CoordinatorFrame(run_refused=coordinator_pb2.RunRefused(
        run_id=refusal.run_id, reason=refusal.reason, differences=differences(refusal.differences)))


def revoke_frame(revoke: RevokeAssignment) -> coordinator_pb2.CoordinatorFrame:
    return coordinator_pb2.CoordinatorFrame(revoke=coordinator_pb2.Revoke(
        assignment_id=revoke.assignment_id, reason=revoke.reason))


def drain_frame(request: RequestDrain) -> coordinator_pb2.CoordinatorFrame:
    return coordinator_pb2.CoordinatorFrame(drain=coordinator_pb2.DrainRequest(reason=request.reason))


def run_state_frame(notice: NotifyRunState) -> coordinator_pb2.CoordinatorFrame:
    return coordinator_pb2.CoordinatorFrame(run_state=coordinator_pb2.RunStateNotice(
        run_id=notice.run_id, paused=notice.paused, blocked_reason=notice.blocked_reason))


def ack_frame(seq: int, outcome: Outcome, *, committed_offset: int = 0, digest: str = "") -> coordinator_pb2.CoordinatorFrame:
    return coordinator_pb2.CoordinatorFrame(ack=coordinator_pb2.Ack(
        seq=seq, outcome=int(outcome.kind), rejection=int(outcome.rejection), detail=outcome.detail,
        committed_offset=committed_offset, digest=digest))


def ack_batch_frames(acks: list[tuple[int, Outcome]]) -> list[coordinator_pb2.CoordinatorFrame]:
    """Acks of consecutive seqs (a ReportBatch's) as AckBatch frames of at most ACK_BATCH_MAX,
    for a session that reads AckBatch: built at once instead of a frame each that the writer
    joins again. Each Ack is added in place (not built alone and copied in: a third of the
    cost), with only the fields an accepted ack sets."""
    frames = []
    for i in range(0, len(acks), ACK_BATCH_MAX):
        frame = coordinator_pb2.CoordinatorFrame()
        add = frame.acks.acks.add
        for seq, o in acks[i:i + ACK_BATCH_MAX]:
            if o.rejection or o.detail:
                add(seq=seq, outcome=int(o.kind), rejection=int(o.rejection), detail=o.detail)
            else:
                add(seq=seq, outcome=int(o.kind))
        frames.append(frame)
    return frames


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_tag(field_number: int) -> bytes:
    return _varint(field_number << 3 | 2)  # wire type 2: length-delimited


_BUNDLE_TAG = _len_tag(coordinator_pb2.CoordinatorFrame.DESCRIPTOR.fields_by_name["bundle"].number)
_BUNDLE_FRAME_TAG = _len_tag(coordinator_pb2.FrameBundle.DESCRIPTOR.fields_by_name["frames"].number)


def bundle_bytes(frames: list[coordinator_pb2.CoordinatorFrame]) -> bytes:
    """`CoordinatorFrame(bundle=FrameBundle(frames=frames)).SerializeToString()`, built from
    each frame's own serialization: a bundle message would copy every frame into itself first
    (a push of 32 cells with their JSON, the acks), 7% of the event loop under a stream of
    reports. The session's writer sends the bytes as they are (`serialize_frame`)."""
    parts = []
    for frame in frames:
        data = frame.SerializeToString()
        parts += (_BUNDLE_FRAME_TAG, _varint(len(data)), data)
    inner = b"".join(parts)
    return b"".join((_BUNDLE_TAG, _varint(len(inner)), inner))


def serialize_frame(frame: coordinator_pb2.CoordinatorFrame | bytes) -> bytes:
    """The Session method's response serializer: a frame, or one already serialized (a bundle)."""
    return frame if type(frame) is bytes else frame.SerializeToString()


def action_response(outcome: Outcome) -> admin_pb2.ActionResponse:
    return admin_pb2.ActionResponse(outcome=int(outcome.kind), rejection=int(outcome.rejection), detail=outcome.detail)

