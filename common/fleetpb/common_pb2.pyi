# Written by tools/gen_protos.py from protos/fleet/v1/common.proto; do not edit, rerun the tool.
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProtocolRevision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_REVISION_UNSPECIFIED: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_ACK_BATCH: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_RUN_OFFER: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_REPORT_BATCH: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_BUNDLE: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_TRANSPORT_LIVENESS: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_COMPLETION_BY_REPORTS: _ClassVar[ProtocolRevision]
    PROTOCOL_REVISION_OVERLOADED: _ClassVar[ProtocolRevision]

class RejectionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REJECTION_REASON_UNSPECIFIED: _ClassVar[RejectionReason]
    REJECTION_REASON_MALFORMED_FRAME: _ClassVar[RejectionReason]
    REJECTION_REASON_OUT_OF_ORDER: _ClassVar[RejectionReason]
    REJECTION_REASON_UNKNOWN_RUN: _ClassVar[RejectionReason]
    REJECTION_REASON_UNKNOWN_WORKER: _ClassVar[RejectionReason]
    REJECTION_REASON_UNKNOWN_ASSIGNMENT: _ClassVar[RejectionReason]
    REJECTION_REASON_UNKNOWN_ATTEMPT: _ClassVar[RejectionReason]
    REJECTION_REASON_UNKNOWN_CELL: _ClassVar[RejectionReason]
    REJECTION_REASON_GENERATION_MISMATCH: _ClassVar[RejectionReason]
    REJECTION_REASON_NOT_OWNER: _ClassVar[RejectionReason]
    REJECTION_REASON_CONFLICTING_REPORT: _ClassVar[RejectionReason]
    REJECTION_REASON_ARTIFACT_MISSING: _ClassVar[RejectionReason]
    REJECTION_REASON_STATUS_CONTRADICTS_EVIDENCE: _ClassVar[RejectionReason]
    REJECTION_REASON_INVALID_EVIDENCE: _ClassVar[RejectionReason]
    REJECTION_REASON_ENVIRONMENT_MISMATCH: _ClassVar[RejectionReason]
    REJECTION_REASON_CAPACITY_INVALID: _ClassVar[RejectionReason]
    REJECTION_REASON_INCARNATION_STALE: _ClassVar[RejectionReason]
    REJECTION_REASON_SPEC_CONFLICT: _ClassVar[RejectionReason]
    REJECTION_REASON_SPEC_INVALID: _ClassVar[RejectionReason]
    REJECTION_REASON_REPAIR_REASON_MISMATCH: _ClassVar[RejectionReason]
    REJECTION_REASON_RUN_NOT_PAUSED: _ClassVar[RejectionReason]
    REJECTION_REASON_CELL_NOT_INCOMPLETE: _ClassVar[RejectionReason]
    REJECTION_REASON_WORKER_NOT_ACTIVE: _ClassVar[RejectionReason]
    REJECTION_REASON_DIGEST_MISMATCH: _ClassVar[RejectionReason]
    REJECTION_REASON_LENGTH_MISMATCH: _ClassVar[RejectionReason]
    REJECTION_REASON_CHUNK_OUT_OF_RANGE: _ClassVar[RejectionReason]
    REJECTION_REASON_ARTIFACT_TOO_LARGE: _ClassVar[RejectionReason]
    REJECTION_REASON_MESSAGE_TOO_LARGE: _ClassVar[RejectionReason]
    REJECTION_REASON_UNAUTHENTICATED: _ClassVar[RejectionReason]
    REJECTION_REASON_PERMISSION_DENIED: _ClassVar[RejectionReason]
    REJECTION_REASON_IDENTITY_MISMATCH: _ClassVar[RejectionReason]
    REJECTION_REASON_GROUP_NOT_ASSIGNED: _ClassVar[RejectionReason]
    REJECTION_REASON_RUN_NOT_BLOCKED: _ClassVar[RejectionReason]
    REJECTION_REASON_STORAGE_FULL: _ClassVar[RejectionReason]
    REJECTION_REASON_RUN_PIN_HELD: _ClassVar[RejectionReason]
    REJECTION_REASON_PROTOCOL_UNSUPPORTED: _ClassVar[RejectionReason]
    REJECTION_REASON_PAGE_TOKEN_INVALID: _ClassVar[RejectionReason]
    REJECTION_REASON_ORDER_RUN_IN_PROGRESS: _ClassVar[RejectionReason]
    REJECTION_REASON_ORDER_RUN_OTHER_BENCHMARK: _ClassVar[RejectionReason]
    REJECTION_REASON_SPEND_CAP_REACHED: _ClassVar[RejectionReason]
    REJECTION_REASON_PROVIDERS_INVALID: _ClassVar[RejectionReason]
    REJECTION_REASON_WORKER_NOT_QUARANTINED: _ClassVar[RejectionReason]
    REJECTION_REASON_NOT_YET_MEASURED: _ClassVar[RejectionReason]
    REJECTION_REASON_OVERLOADED: _ClassVar[RejectionReason]
    REJECTION_REASON_SESSION_STALE: _ClassVar[RejectionReason]

class Execution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_UNSPECIFIED: _ClassVar[Execution]
    EXECUTION_COMPLETED: _ClassVar[Execution]
    EXECUTION_SUBJECT_FAILED: _ClassVar[Execution]
    EXECUTION_NOT_STARTED: _ClassVar[Execution]
    EXECUTION_UNKNOWN: _ClassVar[Execution]

class Verification(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERIFICATION_UNSPECIFIED: _ClassVar[Verification]
    VERIFICATION_VALID: _ClassVar[Verification]
    VERIFICATION_INVALID: _ClassVar[Verification]
    VERIFICATION_NOT_RUN: _ClassVar[Verification]

class Usage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USAGE_UNSPECIFIED: _ClassVar[Usage]
    USAGE_COMPLETE: _ClassVar[Usage]
    USAGE_PARTIAL: _ClassVar[Usage]
    USAGE_MISSING: _ClassVar[Usage]
    USAGE_UNKNOWN: _ClassVar[Usage]

class Cleanup(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLEANUP_UNSPECIFIED: _ClassVar[Cleanup]
    CLEANUP_CONFIRMED: _ClassVar[Cleanup]
    CLEANUP_UNKNOWN: _ClassVar[Cleanup]

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    STATUS_COMPLETED: _ClassVar[Status]
    STATUS_SUBJECT_FAILED: _ClassVar[Status]
    STATUS_INFRA_FAILED: _ClassVar[Status]
    STATUS_INDETERMINATE: _ClassVar[Status]
    STATUS_THROTTLED: _ClassVar[Status]

class AckOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_OUTCOME_UNSPECIFIED: _ClassVar[AckOutcome]
    ACK_OUTCOME_ACCEPTED: _ClassVar[AckOutcome]
    ACK_OUTCOME_DUPLICATE: _ClassVar[AckOutcome]
    ACK_OUTCOME_LATE: _ClassVar[AckOutcome]
    ACK_OUTCOME_REJECTED: _ClassVar[AckOutcome]
PROTOCOL_REVISION_UNSPECIFIED: ProtocolRevision
PROTOCOL_REVISION_ACK_BATCH: ProtocolRevision
PROTOCOL_REVISION_RUN_OFFER: ProtocolRevision
PROTOCOL_REVISION_REPORT_BATCH: ProtocolRevision
PROTOCOL_REVISION_BUNDLE: ProtocolRevision
PROTOCOL_REVISION_TRANSPORT_LIVENESS: ProtocolRevision
PROTOCOL_REVISION_COMPLETION_BY_REPORTS: ProtocolRevision
PROTOCOL_REVISION_OVERLOADED: ProtocolRevision
REJECTION_REASON_UNSPECIFIED: RejectionReason
REJECTION_REASON_MALFORMED_FRAME: RejectionReason
REJECTION_REASON_OUT_OF_ORDER: RejectionReason
REJECTION_REASON_UNKNOWN_RUN: RejectionReason
REJECTION_REASON_UNKNOWN_WORKER: RejectionReason
REJECTION_REASON_UNKNOWN_ASSIGNMENT: RejectionReason
REJECTION_REASON_UNKNOWN_ATTEMPT: RejectionReason
REJECTION_REASON_UNKNOWN_CELL: RejectionReason
REJECTION_REASON_GENERATION_MISMATCH: RejectionReason
REJECTION_REASON_NOT_OWNER: RejectionReason
REJECTION_REASON_CONFLICTING_REPORT: RejectionReason
REJECTION_REASON_ARTIFACT_MISSING: RejectionReason
REJECTION_REASON_STATUS_CONTRADICTS_EVIDENCE: RejectionReason
REJECTION_REASON_INVALID_EVIDENCE: RejectionReason
REJECTION_REASON_ENVIRONMENT_MISMATCH: RejectionReason
REJECTION_REASON_CAPACITY_INVALID: RejectionReason
REJECTION_REASON_INCARNATION_STALE: RejectionReason
REJECTION_REASON_SPEC_CONFLICT: RejectionReason
REJECTION_REASON_SPEC_INVALID: RejectionReason
REJECTION_REASON_REPAIR_REASON_MISMATCH: RejectionReason
REJECTION_REASON_RUN_NOT_PAUSED: RejectionReason
REJECTION_REASON_CELL_NOT_INCOMPLETE: RejectionReason
REJECTION_REASON_WORKER_NOT_ACTIVE: RejectionReason
REJECTION_REASON_DIGEST_MISMATCH: RejectionReason
REJECTION_REASON_LENGTH_MISMATCH: RejectionReason
REJECTION_REASON_CHUNK_OUT_OF_RANGE: RejectionReason
REJECTION_REASON_ARTIFACT_TOO_LARGE: RejectionReason
REJECTION_REASON_MESSAGE_TOO_LARGE: RejectionReason
REJECTION_REASON_UNAUTHENTICATED: RejectionReason
REJECTION_REASON_PERMISSION_DENIED: RejectionReason
REJECTION_REASON_IDENTITY_MISMATCH: RejectionReason
REJECTION_REASON_GROUP_NOT_ASSIGNED: RejectionReason
REJECTION_REASON_RUN_NOT_BLOCKED: RejectionReason
REJECTION_REASON_STORAGE_FULL: RejectionReason
REJECTION_REASON_RUN_PIN_HELD: RejectionReason
REJECTION_REASON_PROTOCOL_UNSUPPORTED: RejectionReason
REJECTION_REASON_PAGE_TOKEN_INVALID: RejectionReason
REJECTION_REASON_ORDER_RUN_IN_PROGRESS: RejectionReason
REJECTION_REASON_ORDER_RUN_OTHER_BENCHMARK: RejectionReason
REJECTION_REASON_SPEND_CAP_REACHED: RejectionReason
REJECTION_REASON_PROVIDERS_INVALID: RejectionReason
REJECTION_REASON_WORKER_NOT_QUARANTINED: RejectionReason
REJECTION_REASON_NOT_YET_MEASURED: RejectionReason
REJECTION_REASON_OVERLOADED: RejectionReason
REJECTION_REASON_SESSION_STALE: RejectionReason
EXECUTION_UNSPECIFIED: Execution
EXECUTION_COMPLETED: Execution
EXECUTION_SUBJECT_FAILED: Execution
EXECUTION_NOT_STARTED: Execution
EXECUTION_UNKNOWN: Execution
VERIFICATION_UNSPECIFIED: Verification
VERIFICATION_VALID: Verification
VERIFICATION_INVALID: Verification
VERIFICATION_NOT_RUN: Verification
USAGE_UNSPECIFIED: Usage
USAGE_COMPLETE: Usage
USAGE_PARTIAL: Usage
USAGE_MISSING: Usage
USAGE_UNKNOWN: Usage
CLEANUP_UNSPECIFIED: Cleanup
CLEANUP_CONFIRMED: Cleanup
CLEANUP_UNKNOWN: Cleanup
STATUS_UNSPECIFIED: Status
STATUS_COMPLETED: Status
STATUS_SUBJECT_FAILED: Status
STATUS_INFRA_FAILED: Status
STATUS_INDETERMINATE: Status
STATUS_THROTTLED: Status
ACK_OUTCOME_UNSPECIFIED: AckOutcome
ACK_OUTCOME_ACCEPTED: AckOutcome
ACK_OUTCOME_DUPLICATE: AckOutcome
ACK_OUTCOME_LATE: AckOutcome
ACK_OUTCOME_REJECTED: AckOutcome

class EnvironmentDifference(_message.Message):
    __slots__ = ("key", "run_value", "worker_value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_VALUE_FIELD_NUMBER: _ClassVar[int]
    WORKER_VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    run_value: str
    worker_value: str
    def __init__(self, key: _Optional[str] = ..., run_value: _Optional[str] = ..., worker_value: _Optional[str] = ...) -> None: ...

class EnvironmentComponent(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ArtifactRef(_message.Message):
    __slots__ = ("name", "digest", "size_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    digest: str
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ArtifactUnavailable(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("status", "execution", "verification", "usage", "cleanup", "score", "environment_failure", "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "started_ms", "finished_ms", "detail", "artifacts", "unavailable", "throttled", "retry_after_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FAILURE_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    execution: Execution
    verification: Verification
    usage: Usage
    cleanup: Cleanup
    score: float
    environment_failure: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float
    started_ms: int
    finished_ms: int
    detail: str
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactRef]
    unavailable: _containers.RepeatedCompositeFieldContainer[ArtifactUnavailable]
    throttled: str
    retry_after_ms: int
    def __init__(self, status: _Optional[_Union[Status, str]] = ..., execution: _Optional[_Union[Execution, str]] = ..., verification: _Optional[_Union[Verification, str]] = ..., usage: _Optional[_Union[Usage, str]] = ..., cleanup: _Optional[_Union[Cleanup, str]] = ..., score: _Optional[float] = ..., environment_failure: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., detail: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactRef, _Mapping]]] = ..., unavailable: _Optional[_Iterable[_Union[ArtifactUnavailable, _Mapping]]] = ..., throttled: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...
