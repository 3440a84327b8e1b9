# Written by tools/gen_protos.py from protos/fleet/v1/coordinator.proto; do not edit, rerun the tool.
from common.fleetpb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerFrame(_message.Message):
    __slots__ = ("seq", "hello", "heartbeat", "cell_report", "upload_chunk", "group_finished", "drain_notice", "goodbye", "dead_letter", "run_environment", "report_batch")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CELL_REPORT_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_CHUNK_FIELD_NUMBER: _ClassVar[int]
    GROUP_FINISHED_FIELD_NUMBER: _ClassVar[int]
    DRAIN_NOTICE_FIELD_NUMBER: _ClassVar[int]
    GOODBYE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    RUN_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    REPORT_BATCH_FIELD_NUMBER: _ClassVar[int]
    seq: int
    hello: Hello
    heartbeat: Heartbeat
    cell_report: CellReport
    upload_chunk: UploadChunk
    group_finished: GroupFinished
    drain_notice: DrainNotice
    goodbye: Goodbye
    dead_letter: DeadLetter
    run_environment: RunEnvironment
    report_batch: ReportBatch
    def __init__(self, seq: _Optional[int] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., cell_report: _Optional[_Union[CellReport, _Mapping]] = ..., upload_chunk: _Optional[_Union[UploadChunk, _Mapping]] = ..., group_finished: _Optional[_Union[GroupFinished, _Mapping]] = ..., drain_notice: _Optional[_Union[DrainNotice, _Mapping]] = ..., goodbye: _Optional[_Union[Goodbye, _Mapping]] = ..., dead_letter: _Optional[_Union[DeadLetter, _Mapping]] = ..., run_environment: _Optional[_Union[RunEnvironment, _Mapping]] = ..., report_batch: _Optional[_Union[ReportBatch, _Mapping]] = ...) -> None: ...

class CoordinatorFrame(_message.Message):
    __slots__ = ("welcome", "assignment", "revoke", "ack", "run_state", "upload_status", "drain", "acks", "run_offer", "run_refused", "bundle")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_STATUS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    RUN_OFFER_FIELD_NUMBER: _ClassVar[int]
    RUN_REFUSED_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    assignment: AssignmentPush
    revoke: Revoke
    ack: Ack
    run_state: RunStateNotice
    upload_status: UploadStatus
    drain: DrainRequest
    acks: AckBatch
    run_offer: RunOffer
    run_refused: RunRefused
    bundle: FrameBundle
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., assignment: _Optional[_Union[AssignmentPush, _Mapping]] = ..., revoke: _Optional[_Union[Revoke, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., run_state: _Optional[_Union[RunStateNotice, _Mapping]] = ..., upload_status: _Optional[_Union[UploadStatus, _Mapping]] = ..., drain: _Optional[_Union[DrainRequest, _Mapping]] = ..., acks: _Optional[_Union[AckBatch, _Mapping]] = ..., run_offer: _Optional[_Union[RunOffer, _Mapping]] = ..., run_refused: _Optional[_Union[RunRefused, _Mapping]] = ..., bundle: _Optional[_Union[FrameBundle, _Mapping]] = ...) -> None: ...

class FrameBundle(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[CoordinatorFrame]
    def __init__(self, frames: _Optional[_Iterable[_Union[CoordinatorFrame, _Mapping]]] = ...) -> None: ...

class PendingUpload(_message.Message):
    __slots__ = ("digest", "total_length")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LENGTH_FIELD_NUMBER: _ClassVar[int]
    digest: str
    total_length: int
    def __init__(self, digest: _Optional[str] = ..., total_length: _Optional[int] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("worker_id", "incarnation", "slots", "cpu_millis", "memory_mb", "environment", "environment_id", "owned_assignment_ids", "buffered_attempt_ids", "pending_uploads", "protocol_version", "software_version", "cell_environment_id", "stream", "degraded")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNED_ASSIGNMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    PENDING_UPLOADS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CELL_ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    incarnation: int
    slots: int
    cpu_millis: int
    memory_mb: int
    environment: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentComponent]
    environment_id: str
    owned_assignment_ids: _containers.RepeatedScalarFieldContainer[str]
    buffered_attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    pending_uploads: _containers.RepeatedCompositeFieldContainer[PendingUpload]
    protocol_version: int
    software_version: str
    cell_environment_id: str
    stream: int
    degraded: str
    def __init__(self, worker_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., slots: _Optional[int] = ..., cpu_millis: _Optional[int] = ..., memory_mb: _Optional[int] = ..., environment: _Optional[_Iterable[_Union[_common_pb2.EnvironmentComponent, _Mapping]]] = ..., environment_id: _Optional[str] = ..., owned_assignment_ids: _Optional[_Iterable[str]] = ..., buffered_attempt_ids: _Optional[_Iterable[str]] = ..., pending_uploads: _Optional[_Iterable[_Union[PendingUpload, _Mapping]]] = ..., protocol_version: _Optional[int] = ..., software_version: _Optional[str] = ..., cell_environment_id: _Optional[str] = ..., stream: _Optional[int] = ..., degraded: _Optional[str] = ...) -> None: ...

class RunEnvironment(_message.Message):
    __slots__ = ("run_id", "components")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    components: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentComponent]
    def __init__(self, run_id: _Optional[str] = ..., components: _Optional[_Iterable[_Union[_common_pb2.EnvironmentComponent, _Mapping]]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("owned_assignment_ids", "running_cells", "outbox_depth", "degraded")
    OWNED_ASSIGNMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_CELLS_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    owned_assignment_ids: _containers.RepeatedScalarFieldContainer[str]
    running_cells: int
    outbox_depth: int
    degraded: str
    def __init__(self, owned_assignment_ids: _Optional[_Iterable[str]] = ..., running_cells: _Optional[int] = ..., outbox_depth: _Optional[int] = ..., degraded: _Optional[str] = ...) -> None: ...

class CellReport(_message.Message):
    __slots__ = ("run_id", "attempt_id", "assignment_id", "generation", "report", "offered")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    attempt_id: str
    assignment_id: str
    generation: int
    report: _common_pb2.Report
    offered: bool
    def __init__(self, run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., generation: _Optional[int] = ..., report: _Optional[_Union[_common_pb2.Report, _Mapping]] = ..., offered: _Optional[bool] = ...) -> None: ...

class UploadChunk(_message.Message):
    __slots__ = ("upload_id", "attempt_id", "digest", "total_length", "offset", "data", "last")
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LENGTH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    upload_id: str
    attempt_id: str
    digest: str
    total_length: int
    offset: int
    data: bytes
    last: bool
    def __init__(self, upload_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., digest: _Optional[str] = ..., total_length: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ...) -> None: ...

class GroupFinished(_message.Message):
    __slots__ = ("assignment_id", "reason")
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    assignment_id: str
    reason: str
    def __init__(self, assignment_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainNotice(_message.Message):
    __slots__ = ("deadline_ms",)
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    deadline_ms: int
    def __init__(self, deadline_ms: _Optional[int] = ...) -> None: ...

class Goodbye(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("attempt_id", "reason")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    reason: str
    def __init__(self, attempt_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RunOffer(_message.Message):
    __slots__ = ("run_id", "keys")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RunRefused(_message.Message):
    __slots__ = ("run_id", "reason", "differences")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    differences: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentDifference]
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ..., differences: _Optional[_Iterable[_Union[_common_pb2.EnvironmentDifference, _Mapping]]] = ...) -> None: ...

class DescribeRunEnvironmentRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class DescribeRunEnvironmentResponse(_message.Message):
    __slots__ = ("run_id", "reference", "worker_keys", "pin", "pinned_by", "environment_match")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    WORKER_KEYS_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    PINNED_BY_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_MATCH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reference: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentComponent]
    worker_keys: _containers.RepeatedScalarFieldContainer[str]
    pin: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentComponent]
    pinned_by: str
    environment_match: str
    def __init__(self, run_id: _Optional[str] = ..., reference: _Optional[_Iterable[_Union[_common_pb2.EnvironmentComponent, _Mapping]]] = ..., worker_keys: _Optional[_Iterable[str]] = ..., pin: _Optional[_Iterable[_Union[_common_pb2.EnvironmentComponent, _Mapping]]] = ..., pinned_by: _Optional[str] = ..., environment_match: _Optional[str] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("coordinator_incarnation", "heartbeat_interval_ms", "suspect_after_ms", "expire_after_ms", "worker_credential", "upload_offsets", "protocol_version", "idle_heartbeat_interval_ms", "coordinator_epoch")
    COORDINATOR_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SUSPECT_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    WORKER_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    IDLE_HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    coordinator_incarnation: int
    heartbeat_interval_ms: int
    suspect_after_ms: int
    expire_after_ms: int
    worker_credential: str
    upload_offsets: _containers.RepeatedCompositeFieldContainer[UploadStatus]
    protocol_version: int
    idle_heartbeat_interval_ms: int
    coordinator_epoch: str
    def __init__(self, coordinator_incarnation: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., suspect_after_ms: _Optional[int] = ..., expire_after_ms: _Optional[int] = ..., worker_credential: _Optional[str] = ..., upload_offsets: _Optional[_Iterable[_Union[UploadStatus, _Mapping]]] = ..., protocol_version: _Optional[int] = ..., idle_heartbeat_interval_ms: _Optional[int] = ..., coordinator_epoch: _Optional[str] = ...) -> None: ...

class CellAssignment(_message.Message):
    __slots__ = ("cell_id", "attempt_id", "subject_id", "dispatch_order")
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_ORDER_FIELD_NUMBER: _ClassVar[int]
    cell_id: str
    attempt_id: str
    subject_id: str
    dispatch_order: int
    def __init__(self, cell_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., subject_id: _Optional[str] = ..., dispatch_order: _Optional[int] = ...) -> None: ...

class AssignmentPush(_message.Message):
    __slots__ = ("run_id", "assignment_id", "generation", "group_id", "task_id", "repetition", "deadline_ms", "cells", "benchmark_json", "executor_json", "task_json", "verifier_json", "budget_json", "subject_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPETITION_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    CELLS_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_JSON_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_JSON_FIELD_NUMBER: _ClassVar[int]
    TASK_JSON_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_JSON_FIELD_NUMBER: _ClassVar[int]
    BUDGET_JSON_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    assignment_id: str
    generation: int
    group_id: str
    task_id: str
    repetition: int
    deadline_ms: int
    cells: _containers.RepeatedCompositeFieldContainer[CellAssignment]
    benchmark_json: str
    executor_json: str
    task_json: str
    verifier_json: str
    budget_json: str
    subject_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., generation: _Optional[int] = ..., group_id: _Optional[str] = ..., task_id: _Optional[str] = ..., repetition: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., cells: _Optional[_Iterable[_Union[CellAssignment, _Mapping]]] = ..., benchmark_json: _Optional[str] = ..., executor_json: _Optional[str] = ..., task_json: _Optional[str] = ..., verifier_json: _Optional[str] = ..., budget_json: _Optional[str] = ..., subject_json: _Optional[_Iterable[str]] = ...) -> None: ...

class Revoke(_message.Message):
    __slots__ = ("assignment_id", "reason")
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    assignment_id: str
    reason: str
    def __init__(self, assignment_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "outcome", "rejection", "detail", "committed_offset", "digest")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REJECTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    seq: int
    outcome: _common_pb2.AckOutcome
    rejection: _common_pb2.RejectionReason
    detail: str
    committed_offset: int
    digest: str
    def __init__(self, seq: _Optional[int] = ..., outcome: _Optional[_Union[_common_pb2.AckOutcome, str]] = ..., rejection: _Optional[_Union[_common_pb2.RejectionReason, str]] = ..., detail: _Optional[str] = ..., committed_offset: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class AckBatch(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    def __init__(self, acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ...) -> None: ...

class ReportBatch(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[CellReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[CellReport, _Mapping]]] = ...) -> None: ...

class RunStateNotice(_message.Message):
    __slots__ = ("run_id", "paused", "blocked_reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    paused: bool
    blocked_reason: str
    def __init__(self, run_id: _Optional[str] = ..., paused: _Optional[bool] = ..., blocked_reason: _Optional[str] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class UploadStatus(_message.Message):
    __slots__ = ("digest", "committed_offset", "complete")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    committed_offset: int
    complete: bool
    def __init__(self, digest: _Optional[str] = ..., committed_offset: _Optional[int] = ..., complete: _Optional[bool] = ...) -> None: ...
