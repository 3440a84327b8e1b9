"""Commands: facts in the past tense, each carrying the time it happened (`now_ms`).

Two kinds. Durable commands change the durable state and are what the write-ahead log
records; replaying them in order through `step` rebuilds that state exactly. Soft commands
(`HeartbeatReceived`, `WorkerDisconnected`, `WorkerStreamEnded`, `ClockTicked`) carry
liveness, which is not worth a disk write; when one of them leads to a durable change, `step`
returns that change as a derived durable command (`WorkerSuspected`, `WorkerResumed`,
`WorkerExpired`, `WorkerLost`, `TimeAdvanced`), and the log records the derived command
instead of the soft one.

`RunSubmitted` is logged as resolved: the shell submits it with `order=None`, `step` resolves
the dispatch order (from the run `policy.orderFrom` names, if any) and returns the command
with that order as the one to log, so replay reads the order and never recomputes it.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.evidence import Report
from common.fastinit import fast_init_all
from common.ids import AssignmentId, AttemptId, CellId, Digest, RunId, WorkerId
from common.policy import Policy
from common.spec import ExperimentSpec

# A measured environment: (key, value) pairs sorted by key (common/identity.py names the keys).
Manifest = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class RunSubmitted:
    now_ms: int
    run_id: RunId
    spec: ExperimentSpec
    policy: Policy
    # The submitter's measurement of what the run uses (bench files, task dirs, modules): the
    # reference every worker's own measurement of these keys must equal.
    manifest: Manifest = ()
    # Keys the spec names that only a worker can measure (tools on its PATH); with the
    # worker's Hello environment they form the pin, fixed at the run's first dispatch.
    worker_keys: tuple[str, ...] = ()
    # Group indexes in dispatch order; () is spec order; None: not resolved yet (never logged).
    order: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class WorkerRegistered:
    now_ms: int
    worker_id: WorkerId
    incarnation: int  # grows with every start of the worker process
    slots: int
    environment_id: str  # computed by the worker from what is installed
    cpu_millis: int = 0  # what the VM offers; checked against the group reservation
    memory_mb: int = 0
    owned: tuple[AssignmentId, ...] = ()  # assignments the worker is still running
    buffered: tuple[AttemptId, ...] = ()  # attempts whose reports wait in its outbox
    cell_environment_id: str = ""  # common/identity.py: what subjects and verifiers see
    environment: Manifest = ()  # the Hello's measured, spec-independent components
    degraded: str = ""  # why it starts no new cell now (its disk full), as a heartbeat says


@dataclass(frozen=True, slots=True)
class RunEnvironmentMeasured:
    """A worker's own measurement of the keys a run named when it was offered the run."""

    now_ms: int
    worker_id: WorkerId
    incarnation: int
    run_id: RunId
    measured: Manifest


@dataclass(frozen=True, slots=True)
class HeartbeatReceived:
    now_ms: int
    worker_id: WorkerId
    owned: tuple[AssignmentId, ...] = ()
    degraded: str = ""  # why the worker starts no new cell now; "" when it takes work


@dataclass(frozen=True, slots=True)
class StreamsAlive:
    """The servicer's word, for many sessions at once, that their streams are still up (the
    transport answers the coordinator's keepalive pings). One command per pass instead of a
    heartbeat per session: at 10,000 idle sessions that was 5,700 commands a second."""

    now_ms: int
    # Each session's worker and what that worker last said it owns (its last heartbeat or hello).
    sessions: tuple[tuple[WorkerId, tuple[AssignmentId, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class WorkerDisconnected:
    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerStreamEnded:
    """The worker's side closed or reset its stream (a killed process's kernel closes its
    socket at once), as opposed to the coordinator cutting it or the stream going silent."""

    now_ms: int
    worker_id: WorkerId
    # How long before the end the stream's last frame arrived (measured by the servicer): a
    # stream ended by the keepalive after a silence was quiet at least its ping timeout.
    quiet_ms: int = 0


@dataclass(frozen=True, slots=True)
class CellReported:
    now_ms: int
    worker_id: WorkerId
    attempt_id: AttemptId
    assignment_id: AssignmentId
    generation: int
    report: Report


@dataclass(frozen=True, slots=True)
class ArtifactStored:
    now_ms: int
    digest: Digest
    size_bytes: int


@dataclass(frozen=True, slots=True)
class GroupFinished:
    """The worker is done with an assignment; attempts it never reported are lost."""

    now_ms: int
    worker_id: WorkerId
    assignment_id: AssignmentId
    unstarted: bool = False  # handed back before any of its cells started: they count for nothing


@dataclass(frozen=True, slots=True)
class RunPaused:
    now_ms: int
    run_id: RunId


@dataclass(frozen=True, slots=True)
class RunRecovered:
    now_ms: int
    run_id: RunId
    # A new spend cap in dollars (`fleetctl recover --max-cost`); None keeps the run's cap.
    max_observed_cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class RunRepaired:
    now_ms: int
    run_id: RunId
    reason: str


@dataclass(frozen=True, slots=True)
class CellRetryGranted:
    now_ms: int
    run_id: RunId
    cell_id: CellId


@dataclass(frozen=True, slots=True)
class WorkerDrained:
    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerGone:
    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class ClockTicked:
    now_ms: int


@dataclass(frozen=True, slots=True)
class CoordinatorRecovered:
    now_ms: int


@dataclass(frozen=True, slots=True)
class CoordinatorStalled:
    """The shell found the coordinator's own time jumped (the actor's ticks far later than due,
    or the event loop that reads the workers' frames blocked): whatever silence that caused is
    the coordinator's outage, not the workers'. Applied before anything else after the stall."""

    now_ms: int
    stalled_ms: int


# Derived durable decisions: returned by `step` from soft commands, and replayed from the log.
@dataclass(frozen=True, slots=True)
class WorkerSuspected:
    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerResumed:
    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerExpired:
    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerLost:
    """A worker's stream ended and it did not come back within `stream_end_grace_ms`: its
    assignments are superseded, as by expiry (derived from a clock tick)."""

    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerQuarantined:
    """A worker's infrastructure failures reached the policy's bound in a row while other workers'
    attempts succeeded (derived from a clock tick): it gets no new work until it is probed, and
    the attempts of its streak do not count against their cells."""

    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerProbed:
    """A quarantined worker's backoff ended (derived from a clock tick): it may take work again,
    on probation (its next infrastructure failure quarantines it again, for twice as long)."""

    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class WorkerReleased:
    """An operator lifted a worker's quarantine (`fleetctl release WORKER`)."""

    now_ms: int
    worker_id: WorkerId


@dataclass(frozen=True, slots=True)
class CoordinatorRestored:
    """The coordinator started on a backup (its data dir holds the BACKUP.json of
    `fleetctl backup` that no earlier start has taken up): the log's tail after the backup is
    lost, so every id it issues from now on carries the new `epoch` (drawn by the shell, once,
    logged here so replay issues the same ids), and dispatch waits for the workers to offer
    the results they kept (`ResultOffered`)."""

    now_ms: int
    backup_id: str
    epoch: str


@dataclass(frozen=True, slots=True)
class WorkerDegraded:
    """A worker's heartbeat says it starts no new cell (`reason`: its state dir's disk is full)
    or, with `reason` empty, that it takes work again (derived from a heartbeat)."""

    now_ms: int
    worker_id: WorkerId
    reason: str


@dataclass(frozen=True, slots=True)
class ResultOffered:
    """A worker that saw the coordinator's epoch change offers a result it kept (reported, and
    maybe acknowledged, before the restore). Known to the coordinator, it is an ordinary
    report; unknown (lost with the log's tail), it is adopted when its run, cell and
    environment match and the cell has no selected result, and kept as late evidence if not."""

    now_ms: int
    worker_id: WorkerId
    attempt_id: AttemptId
    assignment_id: AssignmentId
    generation: int
    report: Report


@dataclass(frozen=True, slots=True)
class TimeAdvanced:
    now_ms: int


@dataclass(frozen=True, slots=True)
class RunPinReleased:
    """The worker that pinned a run's worker-measured environment expired or left, and no
    selected result or running group depends on the pin (derived from a clock tick)."""

    now_ms: int
    run_id: RunId
    worker_id: WorkerId


Command = (
    RunSubmitted | WorkerRegistered | HeartbeatReceived | WorkerDisconnected | CellReported
    | ArtifactStored | GroupFinished | RunPaused | RunRecovered | RunRepaired | CellRetryGranted
    | WorkerDrained | WorkerGone | ClockTicked | CoordinatorRecovered | WorkerSuspected
    | WorkerResumed | WorkerExpired | TimeAdvanced | RunEnvironmentMeasured | RunPinReleased | WorkerStreamEnded
    | WorkerLost | StreamsAlive | CoordinatorStalled | WorkerQuarantined | WorkerProbed | WorkerReleased
    | CoordinatorRestored | ResultOffered | WorkerDegraded
)
SOFT_COMMANDS = (HeartbeatReceived, WorkerDisconnected, WorkerStreamEnded, ClockTicked, StreamsAlive)


fast_init_all(globals())  # records made once or more per cell: common/fastinit.py
