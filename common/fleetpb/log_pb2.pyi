# Written by tools/gen_protos.py from protos/fleet/v1/log.proto; do not edit, rerun the tool.
from common.fleetpb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogRecord(_message.Message):
    __slots__ = ("index", "now_ms", "run_submitted", "worker_registered", "cell_reported", "artifact_stored", "group_finished", "run_paused", "run_recovered", "run_repaired", "cell_retry_granted", "worker_drained", "worker_gone", "coordinator_recovered", "worker_suspected", "worker_resumed", "worker_expired", "time_advanced", "run_environment_measured", "run_pin_released", "worker_lost", "coordinator_stalled", "worker_quarantined", "worker_probed", "worker_released", "coordinator_restored", "result_offered", "worker_degraded")
    class RunSubmitted(_message.Message):
        __slots__ = ("run_id", "spec", "policy", "manifest", "worker_keys", "order")
        class ManifestEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        SPEC_FIELD_NUMBER: _ClassVar[int]
        POLICY_FIELD_NUMBER: _ClassVar[int]
        MANIFEST_FIELD_NUMBER: _ClassVar[int]
        WORKER_KEYS_FIELD_NUMBER: _ClassVar[int]
        ORDER_FIELD_NUMBER: _ClassVar[int]
        run_id: str
        spec: str
        policy: str
        manifest: _containers.ScalarMap[str, str]
        worker_keys: _containers.RepeatedScalarFieldContainer[str]
        order: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, run_id: _Optional[str] = ..., spec: _Optional[str] = ..., policy: _Optional[str] = ..., manifest: _Optional[_Mapping[str, str]] = ..., worker_keys: _Optional[_Iterable[str]] = ..., order: _Optional[_Iterable[int]] = ...) -> None: ...
    class WorkerRegistered(_message.Message):
        __slots__ = ("worker_id", "incarnation", "slots", "environment_id", "cpu_millis", "memory_mb", "owned", "buffered", "cell_environment_id", "environment", "degraded")
        class EnvironmentEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        INCARNATION_FIELD_NUMBER: _ClassVar[int]
        SLOTS_FIELD_NUMBER: _ClassVar[int]
        ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
        CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
        MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
        OWNED_FIELD_NUMBER: _ClassVar[int]
        BUFFERED_FIELD_NUMBER: _ClassVar[int]
        CELL_ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
        ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
        DEGRADED_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        incarnation: int
        slots: int
        environment_id: str
        cpu_millis: int
        memory_mb: int
        owned: _containers.RepeatedScalarFieldContainer[str]
        buffered: _containers.RepeatedScalarFieldContainer[str]
        cell_environment_id: str
        environment: _containers.ScalarMap[str, str]
        degraded: str
        def __init__(self, worker_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., slots: _Optional[int] = ..., environment_id: _Optional[str] = ..., cpu_millis: _Optional[int] = ..., memory_mb: _Optional[int] = ..., owned: _Optional[_Iterable[str]] = ..., buffered: _Optional[_Iterable[str]] = ..., cell_environment_id: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., degraded: _Optional[str] = ...) -> None: ...
    class CellReported(_message.Message):
        __slots__ = ("worker_id", "attempt_id", "assignment_id", "generation", "report")
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
        GENERATION_FIELD_NUMBER: _ClassVar[int]
        REPORT_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        attempt_id: str
        assignment_id: str
        generation: int
        report: _common_pb2.Report
        def __init__(self, worker_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., generation: _Optional[int] = ..., report: _Optional[_Union[_common_pb2.Report, _Mapping]] = ...) -> None: ...
    class ArtifactStored(_message.Message):
        __slots__ = ("digest", "size_bytes")
        DIGEST_FIELD_NUMBER: _ClassVar[int]
        SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
        digest: str
        size_bytes: int
        def __init__(self, digest: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...
    class GroupFinished(_message.Message):
        __slots__ = ("worker_id", "assignment_id", "unstarted")
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
        UNSTARTED_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        assignment_id: str
        unstarted: bool
        def __init__(self, worker_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., unstarted: _Optional[bool] = ...) -> None: ...
    class RunPaused(_message.Message):
        __slots__ = ("run_id",)
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        run_id: str
        def __init__(self, run_id: _Optional[str] = ...) -> None: ...
    class RunRecovered(_message.Message):
        __slots__ = ("run_id", "max_observed_cost_usd")
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        MAX_OBSERVED_COST_USD_FIELD_NUMBER: _ClassVar[int]
        run_id: str
        max_observed_cost_usd: float
        def __init__(self, run_id: _Optional[str] = ..., max_observed_cost_usd: _Optional[float] = ...) -> None: ...
    class RunRepaired(_message.Message):
        __slots__ = ("run_id", "reason")
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        run_id: str
        reason: str
        def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
    class CellRetryGranted(_message.Message):
        __slots__ = ("run_id", "cell_id")
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        CELL_ID_FIELD_NUMBER: _ClassVar[int]
        run_id: str
        cell_id: str
        def __init__(self, run_id: _Optional[str] = ..., cell_id: _Optional[str] = ...) -> None: ...
    class WorkerDrained(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class WorkerGone(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class CoordinatorRecovered(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class WorkerQuarantined(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class WorkerProbed(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class WorkerReleased(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class CoordinatorStalled(_message.Message):
        __slots__ = ("stalled_ms",)
        STALLED_MS_FIELD_NUMBER: _ClassVar[int]
        stalled_ms: int
        def __init__(self, stalled_ms: _Optional[int] = ...) -> None: ...
    class WorkerSuspected(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class WorkerResumed(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class WorkerExpired(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class WorkerLost(_message.Message):
        __slots__ = ("worker_id",)
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        def __init__(self, worker_id: _Optional[str] = ...) -> None: ...
    class TimeAdvanced(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class RunEnvironmentMeasured(_message.Message):
        __slots__ = ("worker_id", "incarnation", "run_id", "measured")
        class MeasuredEntry(_message.Message):
            __slots__ = ("key", "value")
            KEY_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            key: str
            value: str
            def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        INCARNATION_FIELD_NUMBER: _ClassVar[int]
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        MEASURED_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        incarnation: int
        run_id: str
        measured: _containers.ScalarMap[str, str]
        def __init__(self, worker_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., run_id: _Optional[str] = ..., measured: _Optional[_Mapping[str, str]] = ...) -> None: ...
    class RunPinReleased(_message.Message):
        __slots__ = ("run_id", "worker_id")
        RUN_ID_FIELD_NUMBER: _ClassVar[int]
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        run_id: str
        worker_id: str
        def __init__(self, run_id: _Optional[str] = ..., worker_id: _Optional[str] = ...) -> None: ...
    class CoordinatorRestored(_message.Message):
        __slots__ = ("backup_id", "epoch")
        BACKUP_ID_FIELD_NUMBER: _ClassVar[int]
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        backup_id: str
        epoch: str
        def __init__(self, backup_id: _Optional[str] = ..., epoch: _Optional[str] = ...) -> None: ...
    class WorkerDegraded(_message.Message):
        __slots__ = ("worker_id", "reason")
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        reason: str
        def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
    class ResultOffered(_message.Message):
        __slots__ = ("worker_id", "attempt_id", "assignment_id", "generation", "report")
        WORKER_ID_FIELD_NUMBER: _ClassVar[int]
        ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
        GENERATION_FIELD_NUMBER: _ClassVar[int]
        REPORT_FIELD_NUMBER: _ClassVar[int]
        worker_id: str
        attempt_id: str
        assignment_id: str
        generation: int
        report: _common_pb2.Report
        def __init__(self, worker_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., generation: _Optional[int] = ..., report: _Optional[_Union[_common_pb2.Report, _Mapping]] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    WORKER_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    CELL_REPORTED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_STORED_FIELD_NUMBER: _ClassVar[int]
    GROUP_FINISHED_FIELD_NUMBER: _ClassVar[int]
    RUN_PAUSED_FIELD_NUMBER: _ClassVar[int]
    RUN_RECOVERED_FIELD_NUMBER: _ClassVar[int]
    RUN_REPAIRED_FIELD_NUMBER: _ClassVar[int]
    CELL_RETRY_GRANTED_FIELD_NUMBER: _ClassVar[int]
    WORKER_DRAINED_FIELD_NUMBER: _ClassVar[int]
    WORKER_GONE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_RECOVERED_FIELD_NUMBER: _ClassVar[int]
    WORKER_SUSPECTED_FIELD_NUMBER: _ClassVar[int]
    WORKER_RESUMED_FIELD_NUMBER: _ClassVar[int]
    WORKER_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    TIME_ADVANCED_FIELD_NUMBER: _ClassVar[int]
    RUN_ENVIRONMENT_MEASURED_FIELD_NUMBER: _ClassVar[int]
    RUN_PIN_RELEASED_FIELD_NUMBER: _ClassVar[int]
    WORKER_LOST_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_STALLED_FIELD_NUMBER: _ClassVar[int]
    WORKER_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    WORKER_PROBED_FIELD_NUMBER: _ClassVar[int]
    WORKER_RELEASED_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_RESTORED_FIELD_NUMBER: _ClassVar[int]
    RESULT_OFFERED_FIELD_NUMBER: _ClassVar[int]
    WORKER_DEGRADED_FIELD_NUMBER: _ClassVar[int]
    index: int
    now_ms: int
    run_submitted: LogRecord.RunSubmitted
    worker_registered: LogRecord.WorkerRegistered
    cell_reported: LogRecord.CellReported
    artifact_stored: LogRecord.ArtifactStored
    group_finished: LogRecord.GroupFinished
    run_paused: LogRecord.RunPaused
    run_recovered: LogRecord.RunRecovered
    run_repaired: LogRecord.RunRepaired
    cell_retry_granted: LogRecord.CellRetryGranted
    worker_drained: LogRecord.WorkerDrained
    worker_gone: LogRecord.WorkerGone
    coordinator_recovered: LogRecord.CoordinatorRecovered
    worker_suspected: LogRecord.WorkerSuspected
    worker_resumed: LogRecord.WorkerResumed
    worker_expired: LogRecord.WorkerExpired
    time_advanced: LogRecord.TimeAdvanced
    run_environment_measured: LogRecord.RunEnvironmentMeasured
    run_pin_released: LogRecord.RunPinReleased
    worker_lost: LogRecord.WorkerLost
    coordinator_stalled: LogRecord.CoordinatorStalled
    worker_quarantined: LogRecord.WorkerQuarantined
    worker_probed: LogRecord.WorkerProbed
    worker_released: LogRecord.WorkerReleased
    coordinator_restored: LogRecord.CoordinatorRestored
    result_offered: LogRecord.ResultOffered
    worker_degraded: LogRecord.WorkerDegraded
    def __init__(self, index: _Optional[int] = ..., now_ms: _Optional[int] = ..., run_submitted: _Optional[_Union[LogRecord.RunSubmitted, _Mapping]] = ..., worker_registered: _Optional[_Union[LogRecord.WorkerRegistered, _Mapping]] = ..., cell_reported: _Optional[_Union[LogRecord.CellReported, _Mapping]] = ..., artifact_stored: _Optional[_Union[LogRecord.ArtifactStored, _Mapping]] = ..., group_finished: _Optional[_Union[LogRecord.GroupFinished, _Mapping]] = ..., run_paused: _Optional[_Union[LogRecord.RunPaused, _Mapping]] = ..., run_recovered: _Optional[_Union[LogRecord.RunRecovered, _Mapping]] = ..., run_repaired: _Optional[_Union[LogRecord.RunRepaired, _Mapping]] = ..., cell_retry_granted: _Optional[_Union[LogRecord.CellRetryGranted, _Mapping]] = ..., worker_drained: _Optional[_Union[LogRecord.WorkerDrained, _Mapping]] = ..., worker_gone: _Optional[_Union[LogRecord.WorkerGone, _Mapping]] = ..., coordinator_recovered: _Optional[_Union[LogRecord.CoordinatorRecovered, _Mapping]] = ..., worker_suspected: _Optional[_Union[LogRecord.WorkerSuspected, _Mapping]] = ..., worker_resumed: _Optional[_Union[LogRecord.WorkerResumed, _Mapping]] = ..., worker_expired: _Optional[_Union[LogRecord.WorkerExpired, _Mapping]] = ..., time_advanced: _Optional[_Union[LogRecord.TimeAdvanced, _Mapping]] = ..., run_environment_measured: _Optional[_Union[LogRecord.RunEnvironmentMeasured, _Mapping]] = ..., run_pin_released: _Optional[_Union[LogRecord.RunPinReleased, _Mapping]] = ..., worker_lost: _Optional[_Union[LogRecord.WorkerLost, _Mapping]] = ..., coordinator_stalled: _Optional[_Union[LogRecord.CoordinatorStalled, _Mapping]] = ..., worker_quarantined: _Optional[_Union[LogRecord.WorkerQuarantined, _Mapping]] = ..., worker_probed: _Optional[_Union[LogRecord.WorkerProbed, _Mapping]] = ..., worker_released: _Optional[_Union[LogRecord.WorkerReleased, _Mapping]] = ..., coordinator_restored: _Optional[_Union[LogRecord.CoordinatorRestored, _Mapping]] = ..., result_offered: _Optional[_Union[LogRecord.ResultOffered, _Mapping]] = ..., worker_degraded: _Optional[_Union[LogRecord.WorkerDegraded, _Mapping]] = ...) -> None: ...

class LogEntry(_message.Message):
    __slots__ = ("record", "crc32")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    crc32: int
    def __init__(self, record: _Optional[bytes] = ..., crc32: _Optional[int] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("last_index", "state", "crc32")
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    last_index: int
    state: bytes
    crc32: int
    def __init__(self, last_index: _Optional[int] = ..., state: _Optional[bytes] = ..., crc32: _Optional[int] = ...) -> None: ...
