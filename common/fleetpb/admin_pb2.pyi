# Written by tools/gen_protos.py from protos/fleet/v1/admin.proto; do not edit, rerun the tool.
from common.fleetpb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_RUNNING: _ClassVar[RunState]
    RUN_STATE_PAUSED: _ClassVar[RunState]
    RUN_STATE_BLOCKED: _ClassVar[RunState]
    RUN_STATE_COMPLETE: _ClassVar[RunState]
    RUN_STATE_INCOMPLETE: _ClassVar[RunState]

class WorkersView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKERS_VIEW_UNSPECIFIED: _ClassVar[WorkersView]
    WORKERS_VIEW_ALL: _ClassVar[WorkersView]
    WORKERS_VIEW_SUMMARY: _ClassVar[WorkersView]
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_PAUSED: RunState
RUN_STATE_BLOCKED: RunState
RUN_STATE_COMPLETE: RunState
RUN_STATE_INCOMPLETE: RunState
WORKERS_VIEW_UNSPECIFIED: WorkersView
WORKERS_VIEW_ALL: WorkersView
WORKERS_VIEW_SUMMARY: WorkersView

class SubmitRunRequest(_message.Message):
    __slots__ = ("spec_json", "policy_json", "run_id", "manifest", "worker_keys", "bench_root")
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    WORKER_KEYS_FIELD_NUMBER: _ClassVar[int]
    BENCH_ROOT_FIELD_NUMBER: _ClassVar[int]
    spec_json: str
    policy_json: str
    run_id: str
    manifest: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentComponent]
    worker_keys: _containers.RepeatedScalarFieldContainer[str]
    bench_root: str
    def __init__(self, spec_json: _Optional[str] = ..., policy_json: _Optional[str] = ..., run_id: _Optional[str] = ..., manifest: _Optional[_Iterable[_Union[_common_pb2.EnvironmentComponent, _Mapping]]] = ..., worker_keys: _Optional[_Iterable[str]] = ..., bench_root: _Optional[str] = ...) -> None: ...

class SubmitRunResponse(_message.Message):
    __slots__ = ("run_id", "created")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    created: bool
    def __init__(self, run_id: _Optional[str] = ..., created: _Optional[bool] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ("run_id", "workers_view", "workers_shown", "workers_listed_max")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKERS_VIEW_FIELD_NUMBER: _ClassVar[int]
    WORKERS_SHOWN_FIELD_NUMBER: _ClassVar[int]
    WORKERS_LISTED_MAX_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    workers_view: WorkersView
    workers_shown: int
    workers_listed_max: int
    def __init__(self, run_id: _Optional[str] = ..., workers_view: _Optional[_Union[WorkersView, str]] = ..., workers_shown: _Optional[int] = ..., workers_listed_max: _Optional[int] = ...) -> None: ...

class WorkerCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: str
    count: int
    def __init__(self, state: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class WorkerSummary(_message.Message):
    __slots__ = ("total", "counts", "slots", "busy_slots", "slowest", "refused", "refused_total", "quarantined", "quarantined_total")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    BUSY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOWEST_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    total: int
    counts: _containers.RepeatedCompositeFieldContainer[WorkerCount]
    slots: int
    busy_slots: int
    slowest: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    refused: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    refused_total: int
    quarantined: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    quarantined_total: int
    def __init__(self, total: _Optional[int] = ..., counts: _Optional[_Iterable[_Union[WorkerCount, _Mapping]]] = ..., slots: _Optional[int] = ..., busy_slots: _Optional[int] = ..., slowest: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., refused: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., refused_total: _Optional[int] = ..., quarantined: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., quarantined_total: _Optional[int] = ...) -> None: ...

class GroupCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: str
    count: int
    def __init__(self, state: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class RunStatus(_message.Message):
    __slots__ = ("run_id", "state", "blocked_reason", "group_counts", "cells_selected", "cells_incomplete", "cells_running", "peak_concurrent_groups", "slots_offered", "max_concurrent_groups", "cells_total", "retries", "cells_exhausted", "environment_id", "reference_keys", "pin_environment_id", "pinned_by", "pinned_age_ms", "order_from", "observed_cost_usd", "cost_cap_usd", "pause_reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_REASON_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNTS_FIELD_NUMBER: _ClassVar[int]
    CELLS_SELECTED_FIELD_NUMBER: _ClassVar[int]
    CELLS_INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    CELLS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    PEAK_CONCURRENT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_OFFERED_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    CELLS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    CELLS_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_KEYS_FIELD_NUMBER: _ClassVar[int]
    PIN_ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PINNED_BY_FIELD_NUMBER: _ClassVar[int]
    PINNED_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FROM_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    COST_CAP_USD_FIELD_NUMBER: _ClassVar[int]
    PAUSE_REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state: RunState
    blocked_reason: str
    group_counts: _containers.RepeatedCompositeFieldContainer[GroupCount]
    cells_selected: int
    cells_incomplete: int
    cells_running: int
    peak_concurrent_groups: int
    slots_offered: int
    max_concurrent_groups: int
    cells_total: int
    retries: int
    cells_exhausted: int
    environment_id: str
    reference_keys: int
    pin_environment_id: str
    pinned_by: str
    pinned_age_ms: int
    order_from: str
    observed_cost_usd: float
    cost_cap_usd: float
    pause_reason: str
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., blocked_reason: _Optional[str] = ..., group_counts: _Optional[_Iterable[_Union[GroupCount, _Mapping]]] = ..., cells_selected: _Optional[int] = ..., cells_incomplete: _Optional[int] = ..., cells_running: _Optional[int] = ..., peak_concurrent_groups: _Optional[int] = ..., slots_offered: _Optional[int] = ..., max_concurrent_groups: _Optional[int] = ..., cells_total: _Optional[int] = ..., retries: _Optional[int] = ..., cells_exhausted: _Optional[int] = ..., environment_id: _Optional[str] = ..., reference_keys: _Optional[int] = ..., pin_environment_id: _Optional[str] = ..., pinned_by: _Optional[str] = ..., pinned_age_ms: _Optional[int] = ..., order_from: _Optional[str] = ..., observed_cost_usd: _Optional[float] = ..., cost_cap_usd: _Optional[float] = ..., pause_reason: _Optional[str] = ...) -> None: ...

class ProviderStatus(_message.Message):
    __slots__ = ("name", "running", "peak_running", "effective", "declared", "throttled", "retry_after_ms_total", "slow_start", "last_throttled", "last_throttled_age_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PEAK_RUNNING_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    DECLARED_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOW_START_FIELD_NUMBER: _ClassVar[int]
    LAST_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    LAST_THROTTLED_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    running: int
    peak_running: int
    effective: int
    declared: int
    throttled: int
    retry_after_ms_total: int
    slow_start: bool
    last_throttled: str
    last_throttled_age_ms: int
    def __init__(self, name: _Optional[str] = ..., running: _Optional[int] = ..., peak_running: _Optional[int] = ..., effective: _Optional[int] = ..., declared: _Optional[int] = ..., throttled: _Optional[int] = ..., retry_after_ms_total: _Optional[int] = ..., slow_start: _Optional[bool] = ..., last_throttled: _Optional[str] = ..., last_throttled_age_ms: _Optional[int] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "status", "incarnation", "slots", "busy_slots", "last_heartbeat_age_ms", "environment_id", "refused_run_id", "refused_reason", "refused_differences", "refused_age_ms", "serves_runs", "quarantined_until_ms", "quarantine_left_ms", "quarantine_reason", "probation", "quarantines", "streak", "degraded")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    BUSY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REFUSED_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REFUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    REFUSED_DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    SERVES_RUNS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINE_LEFT_MS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINE_REASON_FIELD_NUMBER: _ClassVar[int]
    PROBATION_FIELD_NUMBER: _ClassVar[int]
    QUARANTINES_FIELD_NUMBER: _ClassVar[int]
    STREAK_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    status: str
    incarnation: int
    slots: int
    busy_slots: int
    last_heartbeat_age_ms: int
    environment_id: str
    refused_run_id: str
    refused_reason: str
    refused_differences: _containers.RepeatedCompositeFieldContainer[_common_pb2.EnvironmentDifference]
    refused_age_ms: int
    serves_runs: _containers.RepeatedScalarFieldContainer[str]
    quarantined_until_ms: int
    quarantine_left_ms: int
    quarantine_reason: str
    probation: bool
    quarantines: int
    streak: int
    degraded: str
    def __init__(self, worker_id: _Optional[str] = ..., status: _Optional[str] = ..., incarnation: _Optional[int] = ..., slots: _Optional[int] = ..., busy_slots: _Optional[int] = ..., last_heartbeat_age_ms: _Optional[int] = ..., environment_id: _Optional[str] = ..., refused_run_id: _Optional[str] = ..., refused_reason: _Optional[str] = ..., refused_differences: _Optional[_Iterable[_Union[_common_pb2.EnvironmentDifference, _Mapping]]] = ..., refused_age_ms: _Optional[int] = ..., serves_runs: _Optional[_Iterable[str]] = ..., quarantined_until_ms: _Optional[int] = ..., quarantine_left_ms: _Optional[int] = ..., quarantine_reason: _Optional[str] = ..., probation: _Optional[bool] = ..., quarantines: _Optional[int] = ..., streak: _Optional[int] = ..., degraded: _Optional[str] = ...) -> None: ...

class DeadLetterStatus(_message.Message):
    __slots__ = ("worker_id", "attempt_id", "reason")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    attempt_id: str
    reason: str
    def __init__(self, worker_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("runs", "workers", "dead_letters", "worker_summary", "providers")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    WORKER_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunStatus]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetterStatus]
    worker_summary: WorkerSummary
    providers: _containers.RepeatedCompositeFieldContainer[ProviderStatus]
    def __init__(self, runs: _Optional[_Iterable[_Union[RunStatus, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., dead_letters: _Optional[_Iterable[_Union[DeadLetterStatus, _Mapping]]] = ..., worker_summary: _Optional[_Union[WorkerSummary, _Mapping]] = ..., providers: _Optional[_Iterable[_Union[ProviderStatus, _Mapping]]] = ...) -> None: ...

class GetResultsRequest(_message.Message):
    __slots__ = ("run_id", "page_size", "page_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class CellResult(_message.Message):
    __slots__ = ("cell_id", "task_id", "repetition", "subject_id", "state", "score", "status", "attempt_id", "worker_id", "assignment_id", "generation", "dispatch_order", "cost_usd", "usage", "incomplete_reason", "attempts", "artifacts", "unavailable", "input_tokens", "output_tokens", "cached_tokens", "started_ms", "finished_ms", "incomplete_detail", "throttled", "executions", "extra_execution_cost_usd", "recovered")
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPETITION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_ORDER_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_DETAIL_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_EXECUTION_COST_USD_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FIELD_NUMBER: _ClassVar[int]
    cell_id: str
    task_id: str
    repetition: int
    subject_id: str
    state: str
    score: float
    status: _common_pb2.Status
    attempt_id: str
    worker_id: str
    assignment_id: str
    generation: int
    dispatch_order: int
    cost_usd: float
    usage: _common_pb2.Usage
    incomplete_reason: str
    attempts: int
    artifacts: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArtifactRef]
    unavailable: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArtifactUnavailable]
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    started_ms: int
    finished_ms: int
    incomplete_detail: str
    throttled: int
    executions: int
    extra_execution_cost_usd: float
    recovered: bool
    def __init__(self, cell_id: _Optional[str] = ..., task_id: _Optional[str] = ..., repetition: _Optional[int] = ..., subject_id: _Optional[str] = ..., state: _Optional[str] = ..., score: _Optional[float] = ..., status: _Optional[_Union[_common_pb2.Status, str]] = ..., attempt_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., generation: _Optional[int] = ..., dispatch_order: _Optional[int] = ..., cost_usd: _Optional[float] = ..., usage: _Optional[_Union[_common_pb2.Usage, str]] = ..., incomplete_reason: _Optional[str] = ..., attempts: _Optional[int] = ..., artifacts: _Optional[_Iterable[_Union[_common_pb2.ArtifactRef, _Mapping]]] = ..., unavailable: _Optional[_Iterable[_Union[_common_pb2.ArtifactUnavailable, _Mapping]]] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., incomplete_detail: _Optional[str] = ..., throttled: _Optional[int] = ..., executions: _Optional[int] = ..., extra_execution_cost_usd: _Optional[float] = ..., recovered: _Optional[bool] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("selected", "incomplete", "observed_cost_usd", "usage_complete", "state", "blocked_reason", "peak_concurrent_groups", "slots_offered", "late_reports", "selected_cost_usd", "run_observed_cost_usd", "cost_cap_usd", "score_range_low", "score_range_high")
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    USAGE_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_REASON_FIELD_NUMBER: _ClassVar[int]
    PEAK_CONCURRENT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_OFFERED_FIELD_NUMBER: _ClassVar[int]
    LATE_REPORTS_FIELD_NUMBER: _ClassVar[int]
    SELECTED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    RUN_OBSERVED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    COST_CAP_USD_FIELD_NUMBER: _ClassVar[int]
    SCORE_RANGE_LOW_FIELD_NUMBER: _ClassVar[int]
    SCORE_RANGE_HIGH_FIELD_NUMBER: _ClassVar[int]
    selected: int
    incomplete: int
    observed_cost_usd: float
    usage_complete: bool
    state: RunState
    blocked_reason: str
    peak_concurrent_groups: int
    slots_offered: int
    late_reports: int
    selected_cost_usd: float
    run_observed_cost_usd: float
    cost_cap_usd: float
    score_range_low: float
    score_range_high: float
    def __init__(self, selected: _Optional[int] = ..., incomplete: _Optional[int] = ..., observed_cost_usd: _Optional[float] = ..., usage_complete: _Optional[bool] = ..., state: _Optional[_Union[RunState, str]] = ..., blocked_reason: _Optional[str] = ..., peak_concurrent_groups: _Optional[int] = ..., slots_offered: _Optional[int] = ..., late_reports: _Optional[int] = ..., selected_cost_usd: _Optional[float] = ..., run_observed_cost_usd: _Optional[float] = ..., cost_cap_usd: _Optional[float] = ..., score_range_low: _Optional[float] = ..., score_range_high: _Optional[float] = ...) -> None: ...

class GetResultsResponse(_message.Message):
    __slots__ = ("cells", "summary", "next_page_token", "total_size")
    CELLS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    cells: _containers.RepeatedCompositeFieldContainer[CellResult]
    summary: Summary
    next_page_token: str
    total_size: int
    def __init__(self, cells: _Optional[_Iterable[_Union[CellResult, _Mapping]]] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ...) -> None: ...

class PauseRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class RecoverRunRequest(_message.Message):
    __slots__ = ("run_id", "max_observed_cost_usd")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_OBSERVED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    max_observed_cost_usd: float
    def __init__(self, run_id: _Optional[str] = ..., max_observed_cost_usd: _Optional[float] = ...) -> None: ...

class RepairRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RetryCellRequest(_message.Message):
    __slots__ = ("run_id", "cell_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    cell_id: str
    def __init__(self, run_id: _Optional[str] = ..., cell_id: _Optional[str] = ...) -> None: ...

class DrainWorkerRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class ReleaseWorkerRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class ActionResponse(_message.Message):
    __slots__ = ("outcome", "rejection", "detail")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REJECTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    outcome: _common_pb2.AckOutcome
    rejection: _common_pb2.RejectionReason
    detail: str
    def __init__(self, outcome: _Optional[_Union[_common_pb2.AckOutcome, str]] = ..., rejection: _Optional[_Union[_common_pb2.RejectionReason, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("at_ms", "event", "run_id", "subject", "detail")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    event: str
    run_id: str
    subject: str
    detail: str
    def __init__(self, at_ms: _Optional[int] = ..., event: _Optional[str] = ..., run_id: _Optional[str] = ..., subject: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ("digest",)
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    def __init__(self, digest: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ("offset", "data", "total_length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    total_length: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., total_length: _Optional[int] = ...) -> None: ...

class ListAttemptsRequest(_message.Message):
    __slots__ = ("run_id", "page_size", "page_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AttemptRecord(_message.Message):
    __slots__ = ("attempt_id", "cell_id", "task_id", "repetition", "subject_id", "worker_id", "assignment_id", "generation", "dispatch_order", "kind", "status", "started_ms", "finished_ms", "score", "cost_usd", "usage", "detail", "dispatched_ms")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CELL_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPETITION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_ORDER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_MS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    cell_id: str
    task_id: str
    repetition: int
    subject_id: str
    worker_id: str
    assignment_id: str
    generation: int
    dispatch_order: int
    kind: str
    status: _common_pb2.Status
    started_ms: int
    finished_ms: int
    score: float
    cost_usd: float
    usage: _common_pb2.Usage
    detail: str
    dispatched_ms: int
    def __init__(self, attempt_id: _Optional[str] = ..., cell_id: _Optional[str] = ..., task_id: _Optional[str] = ..., repetition: _Optional[int] = ..., subject_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., assignment_id: _Optional[str] = ..., generation: _Optional[int] = ..., dispatch_order: _Optional[int] = ..., kind: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.Status, str]] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., score: _Optional[float] = ..., cost_usd: _Optional[float] = ..., usage: _Optional[_Union[_common_pb2.Usage, str]] = ..., detail: _Optional[str] = ..., dispatched_ms: _Optional[int] = ...) -> None: ...

class ListAttemptsResponse(_message.Message):
    __slots__ = ("attempts", "next_page_token")
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    next_page_token: str
    def __init__(self, attempts: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ("dest_dir",)
    DEST_DIR_FIELD_NUMBER: _ClassVar[int]
    dest_dir: str
    def __init__(self, dest_dir: _Optional[str] = ...) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ("dest_dir", "last_index", "runs", "artifacts", "artifact_bytes", "wal_bytes", "copy_ms", "total_ms")
    DEST_DIR_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_BYTES_FIELD_NUMBER: _ClassVar[int]
    WAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    COPY_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    dest_dir: str
    last_index: int
    runs: int
    artifacts: int
    artifact_bytes: int
    wal_bytes: int
    copy_ms: int
    total_ms: int
    def __init__(self, dest_dir: _Optional[str] = ..., last_index: _Optional[int] = ..., runs: _Optional[int] = ..., artifacts: _Optional[int] = ..., artifact_bytes: _Optional[int] = ..., wal_bytes: _Optional[int] = ..., copy_ms: _Optional[int] = ..., total_ms: _Optional[int] = ...) -> None: ...
