"""Seeded simulation of a fleet run: the real core, virtual time, a faulty in-memory network.
Run it with `python -m tools.sim` (tools/sim/cli.py says how).

A seed fixes everything: the scenario, the fault rates, every drop and every outcome, so the
same seed prints byte-identical output and a failure replays exactly. Both sides are the real
code: the coordinator is the real `step` with a log of durable commands, restarted by replaying
that log through the core; each worker is the real worker protocol (worker/protocol.py: its held
groups, what each may do next, its hello and heartbeats), a new one per process, driven here as
worker/session.py drives it, around a model of the shell's I/O (an outbox whose commits are
immediate, cells that run for a drawn time, uploads as one frame). After each of its steps the
worker's rules are checked (`worker_problems`): an assignment finished while a report of it waits
unacknowledged is a failure of the seed, as any of the core's invariants is. So is a hello
that releases a group its worker's process is running (`check_reconciled`): the servicer's
check of a hello of an older stream (coordinator/hellos.py) runs here too, as it does there.

The network loses frames on a live stream, which a gRPC stream never does (there a loss is a
broken stream, and the next stream replays): the shell's model sends an unacknowledged report or
GroupFinished again after RESEND_MS instead, and every ack that comes reaches the protocol (a
resent report is acknowledged twice: the protocol must count it once).

Two ways a worker goes away are told apart, as the real servicer tells them apart: a crashed
process's kernel closes its socket at once (the coordinator sees the stream end, and the core's
short grace starts), while a partition is silence, and the transport notices it only after its
keepalive timeout (a stream end the core treats as silence, since nothing came through the
stream for that long). A stream reset with the worker alive (a middlebox) is a third fault: it reconnects.

Workers speak protocol 4 as fleet-worker does: one that holds a group heartbeats every interval,
an idle one only when what it would say changed or the idle interval passed; meanwhile the
coordinator's side says which sessions are still up (StreamsAlive every half suspicion window, as
the servicer does), including a partitioned worker's until the keepalive ends its stream.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, NoReturn

from common import limits
from common.limits import IDLE_HEARTBEAT_INTERVAL_MS, SERVER_KEEPALIVE_TIMEOUT_MS, TRANSPORT_DEAD_AFTER_MS
from common.evidence import (ArtifactRef, Cleanup, Execution, Report, Status, Usage, Verification, expected_status,
                             is_selectable)
from common.ids import RunId, WorkerId, run_id_for, sha256_digest
from common.policy import Policy, ProviderLimit
from common.spec import parse_spec
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core import new_state, step, summarize
from coordinator.core.effects import Emit, EndSession, OfferRun, OutcomeKind, PushAssignment, RefuseRun, RevokeAssignment
from coordinator.core.invariants import Monitor
from coordinator.core.machine import ANSWERED_BY_OFFERS
from coordinator.core.state import WorkerStatus, counted_attempts, durable_fingerprint
from coordinator.hellos import HelloStreams
from tools.sim.invariants import provider_step_problems
from worker import protocol as wp

TICK_MS = 250
HEARTBEAT_MS = 1_000
RESEND_MS = 3_000  # a worker resends an unacknowledged frame after this long
RECONNECT_MS = 1_000
WELCOME_TIMEOUT_MS = 10_000  # a worker gives up a stream whose welcome does not come (restore scenario)
LIVENESS_MS = 1_750  # the servicer's pass: half the policy's suspicion window below
# A partition ends the stream only when the coordinator's keepalive notices: a ping left
# unanswered for its timeout, sent up to its interval after the partition began.
PARTITION_NOTICE_MS_MIN = SERVER_KEEPALIVE_TIMEOUT_MS
PARTITION_NOTICE_MS_MAX = TRANSPORT_DEAD_AFTER_MS
FAULT_WINDOW_MS = 150_000  # faults stop after this; the run must then settle
SETTLE_LIMIT_MS = 3_600_000
TRACE_ENTRIES_MAX = 5_000
ENV_ID = "env-sim"
# What the submitter measured of the benchmark and what workers measure (common/identity.py).
MANIFEST = (("bench.file:solve.py", "digest-solve"), ("bench.taskdir:tasks", "digest-tasks"))
WORKER_KEYS = ("tool:verify",)
WORKER_ENVIRONMENT = (("platform.system", "Linux"), ("python.version", "3.11.7"))
ENV_FAILURE = "image registry unreachable: pull of task image failed"


# The providers scenario (--providers). Groups have one cell per subject and at most
# max_concurrent_groups (4) run at once, so the fleet could put 4 cells on a provider that one
# subject uses: the simulated providers admit fewer (1 to 3), so that limits matter.
PROVIDER_CAPACITY_CHOICES = (1, 2, 2, 3)
THROTTLE_ANSWER_MS_MIN, THROTTLE_ANSWER_MS_MAX = 20, 300  # a 429 comes back fast
PROVIDER_RETRY_AFTER_MS_MAX = 5_000  # the Retry-After a simulated provider names, at most
OUTAGE_START_MS_MAX = 60_000  # a provider that refuses everything, from up to this after submission
OUTAGE_MS_MIN, OUTAGE_MS_MAX = 5_000, 30_000


@dataclass
class SimProvider:
    """A simulated model provider: admits `capacity` cells at once (0: any number), answers one
    more with a 429 (a throttled report), and refuses every cell during its outage (ms after the
    run's submission; (0, 0): none). `inflight`: the attempts it admitted that still run."""

    name: str
    capacity: int
    declared: int = 0  # what the policy declares (maxConcurrentCells); 0: nothing
    outage: tuple[int, int] = (0, 0)
    inflight: dict[str, None] = field(default_factory=dict)
    admitted: int = 0
    refused: int = 0
    peak_inflight: int = 0


def draw_providers(seed: int) -> tuple[dict[str, SimProvider], dict[str, str], int]:
    """The providers scenario of a seed, from its own stream (the seed's main one is left as the
    default scenario draws it): subject s0 on "alpha", declared in the policy at its capacity or
    above it (declared too high: the core learns from throttling); s1 on "beta", named in the spec
    with no declared limit (slow start from limits.PROVIDER_INITIAL_CELLS), and an outage on some
    seeds; s2 on the unnamed "default" provider, which never throttles, or mapped to "alpha" by the
    policy (two cells of a group on one provider). Returns the providers, each subject's provider,
    and maxThrottledAttemptsPerCell (small on some seeds, so that cells end provider_throttled)."""
    rng = random.Random(f"{seed}:providers")
    alpha_k = rng.choice(PROVIDER_CAPACITY_CHOICES)
    alpha = SimProvider("alpha", alpha_k, declared=alpha_k + rng.choice([0, 0, 1, 2]))
    beta = SimProvider("beta", rng.choice(PROVIDER_CAPACITY_CHOICES))
    if rng.random() < 0.5:
        start = rng.randint(5_000, OUTAGE_START_MS_MAX)
        beta.outage = (start, start + rng.randint(OUTAGE_MS_MIN, OUTAGE_MS_MAX))
    subject_provider = {"s0": "alpha", "s1": "beta", "s2": rng.choice(["default", "alpha"])}
    max_throttled = rng.choice([20, 20, 20, 4])
    return {"alpha": alpha, "beta": beta}, subject_provider, max_throttled


# The extra faults (--faults stall,blackhole), drawn from their own stream (`draw_extra_faults`).
# A stall outlasts the expiry (policy expire_after_ms 15 s) and may outlast the recovery grace
# (20 s): without the CoordinatorStalled every worker it froze out would be expired.
STALL_MS_MIN, STALL_MS_MAX = 16_000, 45_000
STALL_START_MS_MIN, STALL_START_MS_MAX = 10_000, 120_000
BLACKHOLE_START_MS_MAX = 60_000
BLACKHOLE_RECOVERY_MS_MIN, BLACKHOLE_RECOVERY_MS_MAX = 30_000, 120_000
BLACKHOLE_CELL_MS_MIN, BLACKHOLE_CELL_MS_MAX = 20, 300  # failing fast: nothing runs
BLACKHOLE_DETAIL = "no space left on device"
EXTRA_FAULTS = ("stall", "blackhole", "restore", "ops")
# The restore (--faults restore): a backup this long after submission, and the coordinator
# restored from it (its log's tail lost) this long after the backup.
BACKUP_MS_MIN, BACKUP_MS_MAX = 8_000, 40_000
DEGRADED_REASON = "state dir's disk is full"  # what the ops fault's worker says while its disk is full
RESTORE_AFTER_MS_MIN, RESTORE_AFTER_MS_MAX = 8_000, 40_000


@dataclass
class ExtraFaults:
    """The coordinator's stalls ((start, length) in ms after submission) and the black-hole
    worker (its index, and when it starts and stops failing; stop 0: never)."""

    stalls: tuple[tuple[int, int], ...] = ()
    blackhole: int = -1
    blackhole_ms: tuple[int, int] = (0, 0)
    restore_ms: tuple[int, int] = (0, 0)  # (the backup, the restore from it); (0, 0): none
    # The operator and the hosts (--faults ops): a worker's disk full for a while (its index,
    # from, until); a worker drained, which exits once it holds nothing and comes back as a
    # new process (its index, when; -1: none); the run's spend cap, raised by the operator each
    # time the run pauses on it (0: none); when the operator grants a retry to a cell out of
    # attempts.
    degraded: tuple[int, int, int] = (-1, 0, 0)
    drain: tuple[int, int] = (-1, 0)
    cap_usd: float = 0.0
    grants_ms: tuple[int, ...] = ()


def draw_extra_faults(seed: int, names: tuple[str, ...], workers: int) -> ExtraFaults:
    """The extra faults of a seed, from their own stream, so that the seed's main stream (and
    so the default scenario) is drawn as without them: one or two stalls of the coordinator;
    one black-hole worker, recovering on half the seeds."""
    rng = random.Random(f"{seed}:faults")
    out = ExtraFaults()
    if "stall" in names:
        out.stalls = tuple(sorted((rng.randint(STALL_START_MS_MIN, STALL_START_MS_MAX),
                                   rng.randint(STALL_MS_MIN, STALL_MS_MAX)) for _ in range(rng.choice([1, 2]))))
    if "blackhole" in names:
        out.blackhole = rng.randrange(workers)
        start = rng.randint(5_000, BLACKHOLE_START_MS_MAX)
        stop = start + rng.randint(BLACKHOLE_RECOVERY_MS_MIN, BLACKHOLE_RECOVERY_MS_MAX) if rng.random() < 0.5 else 0
        out.blackhole_ms = (start, stop)
    if "restore" in names:
        backup = rng.randint(BACKUP_MS_MIN, BACKUP_MS_MAX)
        out.restore_ms = (backup, backup + rng.randint(RESTORE_AFTER_MS_MIN, RESTORE_AFTER_MS_MAX))
    if "ops" in names:
        start = rng.randint(5_000, 90_000)
        out.degraded = (rng.randrange(workers), start, start + rng.randint(1_000, 30_000))
        out.drain = (rng.randrange(workers), rng.randint(5_000, 120_000)) if rng.random() < 0.6 else (-1, 0)
        out.cap_usd = round(rng.uniform(0.2, 2.5), 4) if rng.random() < 0.7 else 0.0
        out.grants_ms = tuple(sorted(rng.randint(20_000, 145_000) for _ in range(rng.choice([1, 2, 3]))))
    return out


# What a stalled coordinator does not do until it runs again (Simulation.run).
_FROZEN_KINDS = ("tick", "liveness", "to_coord", "stream_dead", "coord_crash", "pause", "recover", "repair",
                 "backup", "restore", "drain", "grant", "raise_cap")


class SimFailure(Exception):
    def __init__(self, seed: int, index: int, now: int, what: str) -> None:
        super().__init__(f"seed {seed}: command #{index} at t={now}ms: {what}")
        self.seed, self.index, self.now, self.what = seed, index, now, what


@dataclass
class Faults:
    loss_before: float
    loss_after: float
    duplicate: float
    jitter_ms: int
    partition: bool
    worker_crash: bool
    coordinator_restarts: int
    pause: bool
    slow_cells: float
    missing_usage: float
    env_failure: bool
    straggler: bool
    infra_failure: float
    subject_failure: float
    verifier_invalid: float
    stream_reset: bool = False

    @staticmethod
    def quiet(rng: random.Random) -> Faults:
        """Faults that lose no attempt to timing, so that which attempt of a cell is selected
        does not depend on when groups run: lost and late frames (not a welcome:
        `send_to_worker`), a pause, and every kind of outcome (retries included). No process
        dies, nothing expires, and no frame arrives twice (a repeated hello used to reconcile away a group pushed in between, a lost
        attempt; the edge's check, `HelloStreams`, now refuses it, but the quiet draw is kept
        as it was so that its seeds stay comparable)."""
        f = Faults.draw(rng)
        f.duplicate = 0.0
        f.partition = f.worker_crash = f.env_failure = f.straggler = f.stream_reset = False
        f.coordinator_restarts = 0
        return f

    @staticmethod
    def draw(rng: random.Random) -> Faults:
        return Faults(
            loss_before=rng.choice([0.0, rng.uniform(0, 0.1)]),
            loss_after=rng.choice([0.0, rng.uniform(0, 0.1)]),
            duplicate=rng.choice([0.0, rng.uniform(0, 0.05)]),
            jitter_ms=rng.choice([5, rng.randint(5, 400)]),
            partition=rng.random() < 0.5,
            worker_crash=rng.random() < 0.5,
            coordinator_restarts=rng.choice([0, 0, 1, 2]),
            pause=rng.random() < 0.3,
            slow_cells=rng.uniform(0, 0.1),
            missing_usage=rng.uniform(0, 0.2),
            env_failure=rng.random() < 0.3,
            straggler=rng.random() < 0.3,
            infra_failure=rng.uniform(0, 0.12),
            subject_failure=rng.uniform(0, 0.1),
            verifier_invalid=rng.uniform(0, 0.04),
            stream_reset=rng.random() < 0.3,
        )


_ACK_KINDS = {OutcomeKind.ACCEPTED: wp.AckKind.ACCEPTED, OutcomeKind.DUPLICATE: wp.AckKind.DUPLICATE,
              OutcomeKind.LATE: wp.AckKind.LATE}


@dataclass
class SimWorker:
    """One simulated worker: its process (`proto`, the real worker protocol, new at every start),
    its state dir (what survives a crash) and its stream."""

    worker_id: WorkerId
    slots: int
    incarnation: int = 1
    alive: bool = True
    connected: bool = False
    partitioned: bool = False
    proto: wp.WorkerProtocol = field(default_factory=wp.WorkerProtocol)
    # The state dir: recorded assignments not yet finished, finished ones, the outbox.
    records: dict[str, PushAssignment] = field(default_factory=dict)
    finished: dict[str, None] = field(default_factory=dict)  # assignment ids done for good
    outbox: dict[str, tuple[str, int, Report]] = field(default_factory=dict)  # attempt -> (asg, gen, report)
    # Acknowledged reports kept for a restore (durable, as the outbox), the coordinator epoch
    # last seen, and the outbox entries that are offers (put back when the epoch changed).
    kept: dict[str, tuple[str, int, Report]] = field(default_factory=dict)
    seen_epoch: str = ""
    offered: dict[str, None] = field(default_factory=dict)
    uploaded: dict[str, None] = field(default_factory=dict)  # digests acknowledged as stored
    # The process: cells running per assignment (attempt id -> event token), reports computed
    # and not yet stored, pushes being recorded.
    cells: dict[str, dict[str, int]] = field(default_factory=dict)
    outcomes: dict[str, Report] = field(default_factory=dict)
    pushes: dict[str, PushAssignment] = field(default_factory=dict)
    # The stream: which stream's welcome came (the outbox goes out only after it), GroupFinished
    # frames awaiting their answer, when each unacknowledged frame was last sent.
    welcomed: int = 0
    finishing: dict[str, str] = field(default_factory=dict)  # assignment id -> reason
    sent_at: dict[str, int] = field(default_factory=dict)  # outbox key -> last send time
    epoch: int = 0  # bumps on crash: stale timers of the dead process are ignored
    conn: int = 0  # bumps on every connect: which stream a hello came on


class Simulation:
    def __init__(self, seed: int, *, check: bool, groups_tasks: int = 20, repetitions: int = 2,
                 subjects: int = 3, workers: int = 3, quiet: bool = False, max_concurrent_groups: int = 4,
                 slots: int | None = None, providers: bool = False, faults: tuple[str, ...] = (),
                 policy_overrides: dict[str, Any] | None = None, stall_command: bool = True,
                 keep_acknowledged: bool = True) -> None:
        """`quiet`: only faults that lose no attempt to timing, and each attempt's outcome and
        duration drawn from the attempt itself (its cell and number), not from the order of
        events. `next_run` goes on with a second run of the spec on the same fleet. `slots`:
        every worker's slots (None: drawn per worker from the seed). `providers`: the subjects'
        requests go to simulated model providers (`draw_providers`); quiet, an attempt's number
        is then its cell's count of attempts that were not throttled, so that what a cell does
        on its k-th real attempt does not depend on how often it was throttled before.
        `faults`: extra faults (EXTRA_FAULTS, `draw_extra_faults`); `policy_overrides`: policy
        fields set over the simulation's (quarantine_after_failures=0, say); `stall_command`:
        False applies a plain tick after a stall (a shell that forgot it: the check's teeth);
        `keep_acknowledged`: False, the workers drop what was acknowledged (as before the restore
        work: the restore check's teeth)."""
        self.seed = seed
        self.rng = random.Random(seed)
        self.check = check
        self.quiet = quiet
        self.faults = Faults.quiet(self.rng) if quiet else Faults.draw(self.rng)
        self.start_ms = 0  # when the current run was submitted
        self.now = 0
        self.fault_window_ms = FAULT_WINDOW_MS
        self.events: list[tuple[int, int, str, tuple]] = []
        self.seq = 0
        self.trace: list[str] = []
        self.trace_dropped = 0
        self.commands = 0
        self.log: list[object] = []
        self.monitor = Monitor()
        self.acked_selectable: dict[str, str] = {}
        self.last_frame_ms: dict[WorkerId, int] = {}  # attempt id -> cell id, acknowledged ACCEPTED
        self.coordinator_up = True
        self.restarts = 0
        # The coordinator's side of each session: the stream (worker conn) whose hello it accepted.
        self.attached: dict[WorkerId, int] = {}
        self.stream_due: dict[tuple, int] = {}  # a stream's last frame's arrival (`in_order`)
        self.hellos = HelloStreams()  # the edge's check of a hello delayed past a newer stream
        self.said: dict[WorkerId, tuple] = {}  # what each worker's last heartbeat or hello said it owns
        self.beat_at: dict[WorkerId, int] = {}  # when that was (a StreamsAlive pass counts too)
        self.stats = {"frames_dropped": 0, "frames_duplicated": 0, "late_reports": 0, "rejected": 0,
                      "pushes": 0, "revokes": 0, "worker_crashes": 0, "partitions": 0, "stale_hellos": 0,
                      "frames_on_old_streams": 0, "frames_of_cut_sessions": 0}
        spec_doc = {
            "benchmark": {"name": "sim", "version": "1"},
            "executor": {"kind": "command"},
            "subjects": [{"id": f"s{i}", "command": "solve"} for i in range(subjects)],
            "tasks": [{"id": f"t{i:02d}"} for i in range(groups_tasks)],
            "repetitions": repetitions,
            "budget": {"timeoutSeconds": 20},
            "verifier": {"command": "verify", "timeoutSeconds": 5},
            "execution": {"maxConcurrentTaskGroups": max_concurrent_groups},
        }
        self.providers = providers
        self.sim_providers: dict[str, SimProvider] = {}
        self.subject_provider: dict[str, str] = {}
        self.throttle_answers: dict[str, int] = {}  # attempt id -> the retry-after of its 429
        self.throttled_numbers: dict[str, dict[int, None]] = {}  # cell -> numbers of its throttled attempts
        self.attempts_checked = 0  # the state's attempts that provider_step_problems has seen
        policy_extra: dict[str, Any] = {}
        if providers:
            self.sim_providers, self.subject_provider, max_throttled = draw_providers(seed)
            by_policy: dict[str, list[str]] = {}
            for subject in spec_doc["subjects"]:
                name = self.subject_provider.get(subject["id"], "default")
                if name == "alpha" and subject["id"] != "s0":
                    by_policy.setdefault(name, []).append(subject["id"])  # mapped by the policy
                elif name != "default":
                    subject["provider"] = name  # named by the spec
            limits_ = [ProviderLimit(p.name, p.declared, tuple(by_policy.get(p.name, ())))
                       for p in self.sim_providers.values() if p.declared or p.name in by_policy]
            policy_extra = {"providers": tuple(sorted(limits_, key=lambda p: p.name)),
                            "max_throttled_attempts_per_cell": max_throttled}
        self.spec = parse_spec(spec_doc)
        for name in faults:
            if name not in EXTRA_FAULTS:
                raise ValueError(f"unknown fault {name!r}: not one of {', '.join(EXTRA_FAULTS)}")
        extra = draw_extra_faults(seed, tuple(faults), workers)  # from its own stream: no main draw moves
        policy_extra = {"max_attempts_per_cell": 4} | policy_extra
        if "ops" in faults:  # cells run out of attempts, for the operator's grants to have work
            policy_extra["max_attempts_per_cell"] = 2
            if extra.cap_usd:
                policy_extra["max_observed_cost_usd"] = extra.cap_usd
        policy_extra |= policy_overrides or {}
        self.policy = Policy(heartbeat_interval_ms=HEARTBEAT_MS, suspect_after_ms=3_500, expire_after_ms=15_000,
                             recovery_grace_ms=20_000, retry_backoff_ms=500, retry_backoff_max_ms=8_000,
                             required_environment_id=ENV_ID, group_deadline_ms=60_000, **policy_extra)
        self.run_id: RunId = run_id_for(self.spec.canonical, self.policy.canonical())
        self.state = new_state()
        self.workers: dict[WorkerId, SimWorker] = {}
        for i in range(workers):
            wid = WorkerId(f"w{i + 1}")
            self.workers[wid] = SimWorker(wid, slots=self.rng.choice([1, 1, 2, 3]) if slots is None else slots)
        self.skill = {s.id: self.rng.uniform(0.3, 0.9) for s in self.spec.subjects}
        self.env_failure_pending = self.faults.env_failure
        self.straggler_pending = self.faults.straggler
        # The extra faults. Nothing below draws from the main stream, and none of it acts
        # unless a fault is named: the default scenario runs exactly as without it.
        self.extra_names = tuple(faults)
        self.extra = extra
        self.extra_rng = random.Random(f"{seed}:faults:events")
        self.stall_command = stall_command
        self.keep_acknowledged = keep_acknowledged
        self.frozen = False  # the coordinator process is stalled: it reads and decides nothing
        self.frozen_since = 0
        self.frozen_inbox: list[tuple] = []  # what reached its sockets meanwhile, in order
        self.frozen_deferred: list[tuple[str, tuple]] = []  # its own events, run after the stall
        self.frozen_through: dict[WorkerId, tuple[int, int]] = {}  # alive and connected: (epoch, conn)
        self.protected: dict[WorkerId, tuple[int, int, int]] = {}  # wid -> (until ms, epoch, conn)
        self.stall_problems: list[str] = []
        self.straggled: dict[str, None] = {}  # attempts the straggler fault holds past the deadline
        self.blackhole_wid = (list(self.workers)[self.extra.blackhole] if self.extra.blackhole >= 0 else None)
        self.blackhole_attempts: dict[str, None] = {}  # attempts the black hole failed
        self.blackhole_first_ms = -1  # when the core first accepted one of them
        # The black hole's failures accepted since its last selectable report (a streak, as the
        # core counts one); whether a tick found it due (`blackhole_due_at_tick`); when another
        # worker last had a selectable report of each subject accepted; and the failures of
        # streaks that ended without being due: no rule gives those back, so they count against
        # their cells (`blackhole_problems`).
        self.blackhole_streak: list[str] = []
        self.blackhole_streak_ms = 0
        self.blackhole_streak_due = False
        self.other_subject_selectable_ms: dict[str, int] = {}
        self.blackhole_never_due: set[str] = set()
        self.extra_stats = {"stalls": 0, "stall_ms": 0, "stall_frames": 0, "blackhole_failures": 0,
                            "quarantines": 0, "probes": 0, "forgiven": 0}
        # The restore: the log's length at the backup, every attempt id issued before the restore,
        # the acknowledged selected results the restore lost (attempt -> (cell, worker)), and the
        # workers no fault of their own (a crash, a partition, a reset, a dropped frame) touched
        # from the restore until its hold ended: their lost results must be adopted, not run again.
        self.backup_len = -1
        self.restore_checked = 0
        self.issued_before_restore: dict[str, None] = {}
        self.lost_acked: dict[str, tuple[str, WorkerId]] = {}
        self.restore_undisturbed: dict[WorkerId, None] = {}
        # The operator and the hosts: the reason each worker's heartbeat gives for starting no
        # cell (its disk is full), the drained workers waiting to exit, a raise of the spend cap due.
        self.degraded_reason: dict[WorkerId, str] = {}
        self.said_degraded: dict[WorkerId, str] = {}  # as its last heartbeat the core took said
        self.ops_dispatched: set[str] = set()  # assignments seen pushed
        self.drained: dict[WorkerId, int] = {}  # wid -> the incarnation that was drained
        self.cap_raise_due = False
        if "ops" in self.extra_names:
            self.extra_stats |= {"degraded": 0, "drains": 0, "goodbyes": 0, "grants": 0, "grants_refused": 0,
                                 "cap_pauses": 0, "cap_raises": 0, "releases": 0, "unstarted": 0}
        if "restore" in self.extra_names:
            self.extra_stats |= {"restores": 0, "lost_records": 0, "lost_acked": 0, "adopted": 0,
                                 "offers_late": 0, "run_again": 0, "answered_revokes": 0}

    # --- plumbing ---------------------------------------------------------------------------
    def at(self, when: int, kind: str, *args: Any) -> int:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, args))
        return self.seq

    def note(self, text: str) -> None:
        if len(self.trace) < TRACE_ENTRIES_MAX:
            self.trace.append(f"{self.now} {text}")
        else:
            self.trace_dropped += 1

    def faulty(self) -> bool:
        return self.now < self.start_ms + self.fault_window_ms

    def attempt_rng(self, attempt_id: str, what: str) -> random.Random:
        """In a quiet simulation, what happens to an attempt is drawn from the attempt (its
        cell and dispatch number, not its run), so two runs of one spec see the same."""
        if not self.quiet:
            return self.rng
        _, cell, number = attempt_id.rsplit(":", 2)
        if self.providers:
            n = int(number[1:])
            number = f"a{n - sum(1 for k in self.throttled_numbers.get(cell, ()) if k < n)}"
        return random.Random(f"{self.seed}:{cell}:{number}:{what}")

    def send_to_coordinator(self, w: SimWorker, frame: tuple) -> None:
        if not (w.alive and w.connected and not w.partitioned and self.coordinator_up):
            return
        if self.faulty() and self.rng.random() < self.faults.loss_before:
            self.stats["frames_dropped"] += 1
            self.restore_disturbed(w.worker_id)
            return
        copies = 2 if self.faulty() and self.rng.random() < self.faults.duplicate else 1
        self.stats["frames_duplicated"] += copies - 1
        for _ in range(copies):
            delay = 1 + self.rng.randint(0, self.faults.jitter_ms if self.faulty() else 5)
            self.at(self.in_order(("up", w.worker_id, w.conn), delay), "to_coord", w.worker_id, w.epoch,
                    self.restarts, frame, w.conn)

    def in_order(self, stream: tuple, delay: int) -> int:
        """When a frame sent now with `delay` arrives: never before one sent earlier on the same
        stream (a gRPC stream keeps its order; streams do not keep theirs between them). The
        jitter reordered a worker's offers, which come in the order it finished them, and a
        success offered after its failures ended the black hole's rebuilt streak first (seed
        6233 with ops,stall,blackhole,restore)."""
        when = max(self.now + delay, self.stream_due.get(stream, 0))
        self.stream_due[stream] = when
        return when

    def send_to_worker(self, wid: WorkerId, frame: tuple, conn: int | None = None) -> None:
        """A frame on the stream the coordinator has for `wid` (`conn`: the hello's, for its
        welcome): a worker that has given that stream up for a newer one never reads it (seed
        2458 with providers and ops,restore: a push sent on a stream whose welcome was lost ran
        on the next stream, whose hello, sent before the push, released it)."""
        w = self.workers[wid]
        if not (w.alive and w.connected and not w.partitioned):
            return
        # Quiet, a welcome is never lost (the draw is made all the same, so that the seeds stay
        # comparable): its loss reconnects the worker, and a group pushed in between is lost to
        # timing (seed 4176 of the provider check).
        if (self.faulty() and self.rng.random() < self.faults.loss_after
                and not (self.quiet and frame[0] == "welcome")):
            self.stats["frames_dropped"] += 1
            self.restore_disturbed(wid)
            return
        delay = 1 + self.rng.randint(0, self.faults.jitter_ms if self.faulty() else 5)
        conn = self.attached.get(wid) if conn is None else conn
        self.at(self.in_order(("down", wid, conn, self.restarts), delay), "to_worker", wid, w.epoch, frame,
                self.restarts, conn)

    # --- coordinator ------------------------------------------------------------------------
    def apply(self, cmd: object) -> Any:
        self.commands += 1
        self.state, t = step(self.state, cmd)
        self.log.extend(t.durable)
        if self.check and t.durable:
            bad = self.monitor.observe(self.state)
            if self.providers and not bad:
                bad = provider_step_problems(self.state, self.new_attempts())
            if bad:
                raise SimFailure(self.seed, self.commands, self.now, f"{type(cmd).__name__}: {bad[0]}")
        if self.issued_before_restore and t.durable:
            self.restore_step_check()
        if self.blackhole_streak and isinstance(cmd, c.ClockTicked):
            self.blackhole_due_at_tick()
        if self.extra_names and (t.durable or t.effects):
            self.observe_extra(cmd, t)
        if self.check and isinstance(cmd, c.WorkerRegistered):
            self.check_reconciled(cmd, t)
        return self.deliver(t)

    def check_reconciled(self, cmd: c.WorkerRegistered, t: Any) -> None:
        """A hello releases the groups it does not list; none of them may be running in the
        process that said it (its cells would run twice). The hello of an older stream, late
        or repeated, would say too little: the edge refuses it (`HelloStreams`)."""
        for e in t.effects:
            if (isinstance(e, Emit) and e.event == "assignment_superseded"
                    and e.detail == "not held by the worker when it reconnected"):
                w = self.workers[cmd.worker_id]
                if w.alive and w.incarnation == cmd.incarnation and w.cells.get(e.subject):
                    self.fail(f"{cmd.worker_id}'s hello released {e.subject}, which its process runs: "
                              "its cells run twice")

    # --- the extra faults' checks -------------------------------------------------------------
    def protected_worker(self, wid: WorkerId) -> bool:
        """Whether `wid` was alive and connected throughout a stall and has met no fault since
        (the same process, the same stream, no partition), within the time the stall's silence
        could still cost it (the recovery grace plus the expiry after the stall)."""
        entry = self.protected.get(wid)
        if entry is None:
            return False
        until, epoch, conn = entry
        w = self.workers[wid]
        if self.now >= until or not w.alive or w.epoch != epoch or w.conn != conn or w.partitioned:
            del self.protected[wid]
            return False
        return True

    def observe_extra(self, cmd: object, t: Any) -> None:
        """After a step with the extra faults on: what a stall must not cause (an expiry, a loss
        or a superseded assignment of a worker that was alive and connected throughout it: its
        cells would run twice), and what the black hole's quarantine did."""
        for d in t.durable:
            if isinstance(d, (c.WorkerExpired, c.WorkerLost)) and self.protected_worker(d.worker_id):
                self.stall_failure(f"{type(d).__name__} of {d.worker_id}, alive and connected throughout "
                                   f"a stall (after {type(cmd).__name__})")
            elif isinstance(d, c.WorkerQuarantined):
                self.extra_stats["quarantines"] += 1
                if "ops" in self.extra_names and self.extra_rng.random() < 0.5:  # an operator lifts it
                    self.at(self.now + self.extra_rng.randint(2_000, 30_000), "release", d.worker_id)
            elif isinstance(d, c.WorkerProbed):
                self.extra_stats["probes"] += 1
        for e in t.effects:
            if not (isinstance(e, Emit) and e.event == "assignment_superseded"):
                continue
            a = self.state.assignments.get(e.subject)
            if a is None or not self.protected_worker(a.worker_id):
                continue
            running = self.workers[a.worker_id].cells.get(e.subject)
            if e.detail == "group deadline exceeded" and (running or any(t in self.straggled for t in a.attempts)):
                continue  # its cells really ran past the deadline (the straggler fault): not the stall's doing
            if e.detail == ANSWERED_BY_OFFERS:
                continue  # every cell it ran has a result: none runs again
            if e.detail == "worker gone" and not running:
                continue  # it said goodbye: a group pushed since was handed back unstarted
            self.stall_failure(f"assignment {e.subject} of {a.worker_id}, alive and connected throughout a "
                               f"stall, superseded ({e.detail}) after {type(cmd).__name__}: its cells run twice")

    def stall_failure(self, what: str) -> None:
        self.stall_problems.append(f"t={self.now}ms: {what}")
        if self.check:
            self.fail(what)

    def new_attempts(self) -> list:
        """Attempts dispatched since the last call (the state's attempts keep their insertion
        order, and a restart's replay rebuilds them in it)."""
        seen, total = self.attempts_checked, len(self.state.attempts)
        self.attempts_checked = total
        ids = list(itertools.islice(reversed(self.state.attempts), max(0, total - seen)))
        return [self.state.attempts[tid] for tid in reversed(ids)]

    def deliver(self, t: Any) -> Any:
        """Carry out a transition's effects (pushes and revokes travel the faulty network)."""
        for e in t.effects:
            if isinstance(e, PushAssignment):
                self.stats["pushes"] += 1
                if "ops" in self.extra_names:
                    self.ops_dispatch_check(e)
                self.send_to_worker(e.worker_id, ("push", e))
            elif isinstance(e, RevokeAssignment):
                self.stats["revokes"] += 1
                if e.reason == ANSWERED_BY_OFFERS:  # running cells that offers answered: stopped, not paid for
                    self.extra_stats["answered_revokes"] += 1
                self.send_to_worker(e.worker_id, ("revoke", e.assignment_id))
            elif isinstance(e, OfferRun):
                self.send_to_worker(e.worker_id, ("offer", e.run_id, e.keys))
            elif isinstance(e, RefuseRun):
                raise SimFailure(self.seed, self.commands, self.now,
                                 f"worker {e.worker_id} of the right build refused: {e.reason} {e.differences}")
            elif isinstance(e, EndSession):
                w = self.workers[e.worker_id]
                if w.connected:  # as the servicer cuts it: the worker reconnects and says hello
                    self.note(f"coord cut {e.worker_id}'s session: {e.reason}")
                    self.disconnect(w)
                    self.at(self.now + RECONNECT_MS, "reconnect", e.worker_id, w.epoch)
            elif isinstance(e, Emit):
                if e.event in ("cell_retryable",):
                    continue
                self.note(f"coord {e.event} {e.subject} {e.detail}".rstrip())
                if e.event == "run_blocked":
                    self.at(self.now + self.rng.randint(5_000, 20_000), "repair", e.detail)
        return t.outcome

    def coordinator_frame(self, wid: WorkerId, frame: tuple) -> None:
        self.last_frame_ms[wid] = self.now  # what the servicer's quiet time counts from
        kind = frame[0]
        w = self.workers[wid]
        if kind == "hello":
            _, incarnation, owned, buffered, conn, degraded = frame
            newer = self.hellos.stale(wid, incarnation, conn)
            if newer:
                # The servicer refuses it (SESSION_STALE) before the core hears of it, and
                # that stream is over: no welcome (a duplicated hello is one too).
                self.note(f"edge refused {wid}'s hello of stream {conn}: stream {newer} came first")
                self.stats["stale_hellos"] += 1
                return
            # The servicer's session on this stream exists before the core hears of the hello:
            # what the registration sends (a run to measure, a group) goes on it.
            self.attached[wid] = conn
            before = self.said_degraded.get(wid, "")
            self.said_degraded[wid] = degraded  # what the registration's dispatch must heed
            out = self.apply(c.WorkerRegistered(self.now, wid, incarnation, w.slots, ENV_ID, owned=owned,
                                                buffered=buffered, environment=WORKER_ENVIRONMENT, degraded=degraded))
            if not out.ok:
                self.note(f"coord refused hello {wid}: {out.detail}")
                self.said_degraded[wid] = before
            else:
                self.said[wid], self.beat_at[wid] = owned, self.now
            self.send_to_worker(wid, ("welcome", incarnation, self.state.epoch), conn)
        elif kind == "heartbeat":
            self.said[wid], self.beat_at[wid] = frame[1], self.now
            before = self.said_degraded.get(wid, "")
            if len(frame) > 2:  # what the core knows of its disk, from this step on (if it takes it)
                self.said_degraded[wid] = frame[2]
            out = self.apply(c.HeartbeatReceived(self.now, wid, frame[1], frame[2] if len(frame) > 2 else ""))
            if not out.ok:
                self.said_degraded[wid] = before
            elif len(frame) > 2 and frame[2]:
                self.extra_stats["degraded"] += 1
            if out.rejection in (Rejection.UNKNOWN_WORKER, Rejection.WORKER_NOT_ACTIVE) and w.connected:
                # The servicer cuts a session whose worker must register again (its hello
                # was lost, or it expired meanwhile): the worker reconnects and says hello.
                self.note(f"coord cut {wid}'s session: {out.rejection.name}")
                self.disconnect(w)
                self.at(self.now + RECONNECT_MS, "reconnect", wid, w.epoch)
        elif kind == "measured":
            _, incarnation, run_id, measured = frame
            self.apply(c.RunEnvironmentMeasured(self.now, wid, incarnation, run_id, measured))
        elif kind == "upload":
            digest, size = frame[1], frame[2]
            self.apply(c.ArtifactStored(self.now, digest, size))
            self.send_to_worker(wid, ("upload_ack", digest))
        elif kind == "report":
            _, attempt_id, assignment_id, generation, report, offered = frame
            if offered:
                out = self.apply(c.ResultOffered(self.now, wid, attempt_id, assignment_id, generation, report))
                if out.rejection == Rejection.NOT_YET_MEASURED:
                    return  # asked again: the worker resends it
                self.offer_answered(wid, attempt_id, out)
            else:
                out = self.apply(c.CellReported(self.now, wid, attempt_id, assignment_id, generation, report))
                if out.rejection == Rejection.NOT_YET_MEASURED:
                    return  # of an attempt the restore lost, before the worker measured: resent
                self.offer_answered(wid, attempt_id, out)
            if out.kind == OutcomeKind.REJECTED:
                self.stats["rejected"] += 1
                raise SimFailure(self.seed, self.commands, self.now,
                                 f"report {attempt_id} rejected: {out.rejection.name} {out.detail}")
            if out.kind == OutcomeKind.LATE:
                self.stats["late_reports"] += 1
            attempt = self.state.attempts.get(attempt_id)
            if out.kind == OutcomeKind.ACCEPTED and self.state.runs[attempt.run_id].cells[
                    attempt.cell_id].selected == attempt_id:
                self.acked_selectable[attempt_id] = attempt.cell_id
            if self.blackhole_wid is not None and out.kind == OutcomeKind.ACCEPTED:
                if attempt_id in self.blackhole_attempts:
                    if not self.blackhole_streak:
                        self.blackhole_streak_ms = self.now
                    self.blackhole_streak.append(attempt_id)
                    if self.blackhole_first_ms < 0:
                        self.blackhole_first_ms = self.now
                elif wid == self.blackhole_wid and is_selectable(report):
                    self.blackhole_streak_ended()
                elif wid != self.blackhole_wid and is_selectable(report):
                    run = self.state.runs[attempt.run_id]
                    self.other_subject_selectable_ms[run.cells[attempt.cell_id].subject_id] = self.now
            self.send_to_worker(wid, ("report_ack", attempt_id, out.kind))
        elif kind == "drain_notice":
            out = self.apply(c.WorkerDrained(self.now, wid))
            if out.kind != OutcomeKind.DUPLICATE:
                self.note(f"coord hears {wid} drains: {out.kind.name}")
        elif kind == "goodbye":
            out = self.apply(c.WorkerGone(self.now, wid))
            self.note(f"coord hears {wid}'s goodbye: {out.kind.name}")
            if out.ok:
                self.extra_stats["goodbyes"] += 1
        elif kind == "finished":
            out = self.apply(c.GroupFinished(self.now, wid, frame[1], frame[2] == "not_started"))
            if out.ok and frame[2] == "not_started":
                self.extra_stats["unstarted"] += 1  # pushed during a drain: counted for nothing
            if out.rejection == Rejection.UNKNOWN_ASSIGNMENT and self.state.epoch:
                pass  # issued before a restore that lost it: the worker finishes it locally
            elif out.kind == OutcomeKind.REJECTED:
                raise SimFailure(self.seed, self.commands, self.now, f"group finished rejected: {out.detail}")
            self.send_to_worker(wid, ("finished_ack", frame[1]))
        else:
            raise AssertionError(kind)

    def quiet_ms(self, wid: WorkerId) -> int:
        return self.now - self.last_frame_ms.get(wid, 0)

    def restart_coordinator(self) -> None:
        """Crash: lose memory and in-flight frames; come back by replaying the log."""
        before = durable_fingerprint(self.state)
        self.coordinator_up = False
        self.restarts += 1
        self.hellos = HelloStreams()  # the new coordinator process remembers no stream
        for w in self.workers.values():
            self.disconnect(w)
        self.note("coord crashed")
        state = new_state()
        for cmd in self.log:
            state, t = step(state, cmd)
            assert t.outcome.ok, f"replay of {cmd} was refused: {t.outcome}"
        if self.check and durable_fingerprint(state) != before:
            raise SimFailure(self.seed, self.commands, self.now, "replaying the log did not rebuild the state")
        self.state = state
        self.at(self.now + self.rng.randint(1_000, 5_000), "coord_up")

    # --- workers ----------------------------------------------------------------------------
    def worker_step(self, w: SimWorker, event: wp.Event) -> None:
        """Feed one fact to the worker's protocol and carry out its actions in order, as
        worker/session.py does (`_handle`, `_act`), with the outbox's commits immediate."""
        for action in w.proto.handle(event):
            if isinstance(action, wp.RecordAssignment):
                aid = action.assignment_id
                push = w.pushes.pop(aid)
                fresh = aid not in w.records and aid not in w.finished
                if fresh:
                    w.records[aid] = push
                self.worker_step(w, wp.AssignmentRecorded(aid, fresh))
            elif isinstance(action, wp.StartGroup):
                self.start_group(w, w.records[action.assignment_id])
            elif isinstance(action, wp.CancelGroup):
                cells = w.cells.pop(action.assignment_id, None)
                if cells is not None:  # the executors kill the cells at once
                    self.provider_release(cells)
                    self.note(f"{w.worker_id} stops {action.assignment_id}")
                    self.worker_step(w, wp.GroupRan(action.assignment_id))
            elif isinstance(action, wp.StoreReport):
                push = w.records[action.assignment_id]
                report = w.outcomes.pop(action.attempt_id)
                w.outbox[action.attempt_id] = (action.assignment_id, push.generation, report)
                self.worker_step(w, wp.ReportStored(action.assignment_id, action.attempt_id))
            elif isinstance(action, wp.DeliverReport):
                self.flush(w, force=True)
            elif isinstance(action, wp.CommitAck):
                entry = w.outbox.pop(action.attempt_id, None)
                if entry is not None:
                    if self.keep_acknowledged:
                        w.kept[action.attempt_id] = entry
                    w.offered.pop(action.attempt_id, None)
                    w.sent_at.pop(action.attempt_id, None)
                self.worker_step(w, wp.AckCommitted(action.assignment_id, action.attempt_id))
            elif isinstance(action, wp.SendGroupFinished):
                w.finishing[action.assignment_id] = action.reason
                w.sent_at["finish:" + action.assignment_id] = self.now
                self.send_to_coordinator(w, ("finished", action.assignment_id, action.reason))
            elif isinstance(action, wp.FinishAssignment):
                if self.check:
                    bad = self.worker_problems(w, action)
                    if bad:
                        self.fail(bad)
                w.records.pop(action.assignment_id, None)
                w.finished[action.assignment_id] = None
                self.worker_step(w, wp.AssignmentFinished(action.assignment_id))
            elif isinstance(action, wp.SendHeartbeat):
                self.send_to_coordinator(w, ("heartbeat", action.owned, self.degraded_reason.get(w.worker_id, "")))
            else:
                raise AssertionError(action)

    def worker_problems(self, w: SimWorker, finish: wp.FinishAssignment) -> str:
        """The worker's rule 5 (worker/session.py): an assignment is finished, other than by a
        revoke, only once every report of it was acknowledged."""
        if finish.by is wp.FinishBy.REVOKE:
            return ""
        waiting = [t for t, (asg, _, _) in w.outbox.items() if asg == finish.assignment_id]
        if waiting:
            return (f"worker {w.worker_id} finished {finish.assignment_id} ({finish.by.value}) while the report "
                    f"of {waiting[0]} waits unacknowledged in its outbox")
        return ""

    def adopt_orphans(self, w: SimWorker) -> None:
        """A new process: what the state dir recorded and never finished is handed back."""
        for aid, push in w.records.items():
            buffered = tuple(t for t, (asg, _, _) in w.outbox.items() if asg == aid)
            self.worker_step(w, wp.OrphanAdopted(aid, push.run_id, buffered))

    def disconnect(self, w: SimWorker) -> None:
        """The worker's stream ends (whoever noticed): what was on it dies with it."""
        if w.connected:
            w.connected = False
            w.finishing.clear()
            self.worker_step(w, wp.StreamClosed())

    def connect(self, w: SimWorker) -> None:
        if not w.alive or w.connected:
            return
        if w.partitioned or not self.coordinator_up or self.frozen:
            self.at(self.now + RECONNECT_MS, "reconnect", w.worker_id, w.epoch)
            return
        w.connected = True
        w.conn += 1
        owned = w.proto.hello_owned()
        buffered = tuple(w.outbox)
        self.send_to_coordinator(w, ("hello", w.incarnation, owned, buffered, w.conn,
                                     self.degraded_reason.get(w.worker_id, "")))
        # As the real worker: the outbox goes out after the welcome (its epoch decides what is an
        # offer), and a stream whose welcome does not come is given up for another.
        self.at(self.now + WELCOME_TIMEOUT_MS, "welcome_due", w.worker_id, w.epoch, w.conn)

    def flush(self, w: SimWorker, *, force: bool = False) -> None:
        """Send what waits in the outbox: uploads first, then their reports; then GroupFinished
        frames not yet answered. `force` false: only what was sent RESEND_MS ago or more."""
        if w.welcomed != w.conn:
            return  # as the real worker: nothing before the welcome (its epoch decides what is an offer)
        for attempt_id, (asg, gen, report) in list(w.outbox.items()):
            if not force and self.now - w.sent_at.get(attempt_id, -RESEND_MS) < RESEND_MS:
                continue
            w.sent_at[attempt_id] = self.now
            missing = [a for a in report.artifacts if a.digest not in w.uploaded]
            if missing:
                for a in missing:
                    self.send_to_coordinator(w, ("upload", a.digest, a.size_bytes))
            else:
                self.send_to_coordinator(w, ("report", attempt_id, asg, gen, report, attempt_id in w.offered))
        for aid in list(w.finishing):
            key = "finish:" + aid
            if force or self.now - w.sent_at.get(key, -RESEND_MS) >= RESEND_MS:
                w.sent_at[key] = self.now
                self.send_to_coordinator(w, ("finished", aid, w.finishing[aid]))

    def start_group(self, w: SimWorker, push: PushAssignment) -> None:
        """The executors start every cell of the push; each ends at its drawn time (`cell_done`)."""
        cells = w.cells[push.assignment_id] = {}
        self.note(f"{w.worker_id} runs {push.assignment_id} ({len(push.cells)} cells)")
        for cd in push.cells:
            if self.providers and not self.admit(cd.attempt_id, cd.subject_id):
                answer_ms = random.Random(f"{self.seed}:{cd.attempt_id}:answer").randint(
                    THROTTLE_ANSWER_MS_MIN, THROTTLE_ANSWER_MS_MAX)
                cells[cd.attempt_id] = self.at(self.now + answer_ms, "cell_done", w.worker_id, w.epoch,
                                               push.assignment_id, cd.attempt_id)
                continue
            duration = (self.extra_rng.randint(BLACKHOLE_CELL_MS_MIN, BLACKHOLE_CELL_MS_MAX)
                        if self.blackholed(w) else self.duration(cd.attempt_id))
            cells[cd.attempt_id] = self.at(self.now + duration, "cell_done",
                                           w.worker_id, w.epoch, push.assignment_id, cd.attempt_id)

    def worker_frame(self, w: SimWorker, frame: tuple) -> None:
        kind = frame[0]
        if kind == "push":
            push: PushAssignment = frame[1]
            w.pushes[push.assignment_id] = push
            self.worker_step(w, wp.PushReceived(push.assignment_id, push.run_id,
                                                tuple(cd.attempt_id for cd in push.cells)))
            w.pushes.pop(push.assignment_id, None)  # ignored: held, or being recorded
        elif kind == "revoke":
            if frame[1] in w.proto.held:
                self.worker_step(w, wp.RevokeReceived(frame[1]))
                self.flush(w, force=True)
        elif kind == "upload_ack":
            if frame[1] not in w.uploaded:
                w.uploaded[frame[1]] = None
                self.flush(w, force=True)
        elif kind == "report_ack":
            # Every ack reaches the protocol, a second one of a resent report too.
            attempt_id, outcome = frame[1], frame[2]
            entry = w.outbox.get(attempt_id) or w.kept.get(attempt_id)
            if entry is None:
                return  # acknowledged before and not kept: nothing names its assignment
            pending = attempt_id in w.outbox
            self.worker_step(w, wp.ReportAcked(entry[0], attempt_id, _ACK_KINDS[outcome]))
            if pending:
                self.flush(w, force=True)
        elif kind == "finished_ack":
            aid = frame[1]
            if w.finishing.pop(aid, None) is not None:
                self.worker_step(w, wp.GroupFinishedAnswered(aid))
        elif kind == "offer":
            # A worker of the right build: the submitter's values, and its own tool digest.
            _, run_id, keys = frame
            values = dict(MANIFEST) | {k: "digest-verify" for k in WORKER_KEYS}
            measured = tuple(sorted((k, values.get(k, "(missing)")) for k in keys))
            self.send_to_coordinator(w, ("measured", w.incarnation, run_id, measured))
        elif kind == "welcome":
            epoch = frame[2]
            w.welcomed = w.conn
            if epoch != w.seen_epoch:
                # Restored from a backup: every kept report goes back to the outbox, and all of
                # it is offered; what the coordinator holds of the uploads is known no more.
                w.seen_epoch = epoch
                w.outbox.update(w.kept)
                w.kept = {}
                w.offered = dict.fromkeys(w.outbox)
                w.uploaded = {}
                self.note(f"{w.worker_id} sees epoch {epoch}: offers {len(w.offered)} reports again")
                self.worker_step(w, wp.ReportsOffered(tuple((w.outbox[t][0], t) for t in w.offered)))
            # The coordinator speaks protocol 5: a group acknowledged in full needs no GroupFinished.
            self.worker_step(w, wp.StreamOpened(self.now, completion_by_reports=True,
                                                heartbeat_interval_ms=HEARTBEAT_MS,
                                                idle_heartbeat_ms=IDLE_HEARTBEAT_INTERVAL_MS))
            self.flush(w, force=True)

    def duration(self, attempt_id: str) -> int:
        rng = self.attempt_rng(attempt_id, "duration")
        base = rng.randint(1_000, 8_000)
        if self.quiet:  # slow, never past the group deadline: nothing may expire
            return base * (rng.randint(2, 3) if rng.random() < self.faults.slow_cells else 1)
        if self.faulty() and rng.random() < self.faults.slow_cells:
            base *= rng.randint(3, 6)
        return base

    def cell_done(self, w: SimWorker, assignment_id: str, attempt_id: str) -> None:
        cells = w.cells.get(assignment_id)
        if cells is None or attempt_id not in cells:
            return
        del cells[attempt_id]
        if attempt_id in self.throttle_answers:
            report = self.throttled_report(attempt_id)
        elif self.blackholed(w):
            self.provider_release((attempt_id,))
            self.blackhole_attempts[attempt_id] = None
            self.extra_stats["blackhole_failures"] += 1
            report = self.blackhole_report(attempt_id)
        elif self.straggler_pending and self.faulty():
            # This cell hangs past the group deadline while the worker keeps heartbeating.
            self.straggler_pending = False
            self.straggled[attempt_id] = None
            self.note(f"{w.worker_id} straggles on {attempt_id}")
            cells[attempt_id] = self.at(self.now + 90_000, "cell_done", w.worker_id, w.epoch,
                                        assignment_id, attempt_id)
            return
        else:
            self.provider_release((attempt_id,))
            report = self.outcome(attempt_id)
        w.outcomes[attempt_id] = report
        self.worker_step(w, wp.CellFinished(assignment_id, attempt_id))
        if not cells:
            del w.cells[assignment_id]
            self.worker_step(w, wp.GroupRan(assignment_id))

    def outcome(self, attempt_id: str) -> Report:
        f, rng = self.faults, self.attempt_rng(attempt_id, "outcome")
        attempt = self.state.attempts.get(attempt_id)
        subject = attempt_id.split("/")[-1].split(":")[0]
        artifact = f"{attempt_id}:log".encode()
        ref = ArtifactRef("log", sha256_digest(artifact), len(artifact))
        usage_missing = rng.random() < f.missing_usage
        usage = Usage.MISSING if usage_missing else Usage.COMPLETE
        cost = None if usage_missing else round(rng.uniform(0.001, 0.05), 6)
        roll = rng.random()
        del attempt
        if self.env_failure_pending and self.faulty() and roll < 0.2:
            self.env_failure_pending = False
            kw = dict(execution=Execution.NOT_STARTED, verification=Verification.NOT_RUN,
                      cleanup=Cleanup.CONFIRMED, environment_failure=ENV_FAILURE, usage=Usage.MISSING)
            cost = None
        elif roll < f.infra_failure:
            kw = dict(execution=Execution.UNKNOWN, verification=Verification.NOT_RUN,
                      cleanup=Cleanup.UNKNOWN, usage=Usage.UNKNOWN)
            cost = None
        elif roll < f.infra_failure + f.verifier_invalid:
            kw = dict(execution=Execution.COMPLETED, verification=Verification.INVALID,
                      cleanup=Cleanup.CONFIRMED, usage=usage)
        elif roll < f.infra_failure + f.verifier_invalid + f.subject_failure:
            kw = dict(execution=Execution.SUBJECT_FAILED, verification=Verification.VALID,
                      cleanup=Cleanup.CONFIRMED, usage=usage, score=0.0)
        else:
            score = 1.0 if rng.random() < self.skill.get(subject, 0.5) else 0.0
            kw = dict(execution=Execution.COMPLETED, verification=Verification.VALID,
                      cleanup=Cleanup.CONFIRMED, usage=usage, score=score)
        draft = Report(status=Status.COMPLETED, cost_usd=cost, artifacts=(ref,), **kw)
        from dataclasses import replace
        return replace(draft, status=expected_status(draft))

    def blackholed(self, w: SimWorker) -> bool:
        """The black-hole worker in its failing time: every cell that ends then fails."""
        if w.worker_id != self.blackhole_wid:
            return False
        start, stop = self.extra.blackhole_ms
        return self.start_ms + start <= self.now and (not stop or self.now < self.start_ms + stop)

    def blackhole_report(self, attempt_id: str) -> Report:
        """What a worker with a full disk reports: an infrastructure failure, nothing started."""
        artifact = f"{attempt_id}:log".encode()
        draft = Report(status=Status.COMPLETED, execution=Execution.NOT_STARTED, verification=Verification.NOT_RUN,
                       usage=Usage.MISSING, cleanup=Cleanup.CONFIRMED, detail=BLACKHOLE_DETAIL,
                       artifacts=(ArtifactRef("log", sha256_digest(artifact), len(artifact)),))
        from dataclasses import replace
        return replace(draft, status=expected_status(draft))

    # --- model providers (the providers scenario) --------------------------------------------
    def admit(self, attempt_id: str, subject_id: str) -> bool:
        """A cell starts: its provider admits it (it counts in flight until it ends), or refuses
        it with a 429 because `capacity` cells are already in flight or it is in its outage."""
        p = self.sim_providers.get(self.subject_provider.get(subject_id, "default"))
        if p is None:
            return True  # the unnamed provider admits any number
        start, end = p.outage
        in_outage = self.start_ms + start <= self.now < self.start_ms + end
        if in_outage or (p.capacity and len(p.inflight) >= p.capacity):
            p.refused += 1
            rng = random.Random(f"{self.seed}:{attempt_id}:retry_after")
            self.throttle_answers[attempt_id] = rng.choice([0, rng.randint(200, PROVIDER_RETRY_AFTER_MS_MAX)])
            self.note(f"provider {p.name} refuses {attempt_id}: {len(p.inflight)} in flight")
            return False
        p.admitted += 1
        p.inflight[attempt_id] = None
        p.peak_inflight = max(p.peak_inflight, len(p.inflight))
        return True

    def provider_release(self, attempt_ids: Any) -> None:
        """Cells that ended (done, or their process died, or revoked) leave their provider."""
        for p in self.sim_providers.values():
            for tid in attempt_ids:
                p.inflight.pop(tid, None)

    def throttled_report(self, attempt_id: str) -> Report:
        """What a subject refused by its provider reports: throttled, not run, never scored."""
        _, cell, number = attempt_id.rsplit(":", 2)
        self.throttled_numbers.setdefault(cell, {})[int(number[1:])] = None
        subject = attempt_id.split("/")[-1].split(":")[0]
        artifact = f"{attempt_id}:log".encode()
        draft = Report(status=Status.COMPLETED, execution=Execution.SUBJECT_FAILED, verification=Verification.NOT_RUN,
                       usage=Usage.MISSING, cleanup=Cleanup.CONFIRMED,
                       artifacts=(ArtifactRef("log", sha256_digest(artifact), len(artifact)),),
                       throttled=f"provider {self.subject_provider.get(subject, 'default')} throttled: 429",
                       retry_after_ms=self.throttle_answers[attempt_id])
        from dataclasses import replace
        return replace(draft, status=expected_status(draft))

    def crash_worker(self, w: SimWorker) -> None:
        """Process death: running cells die; the durable outbox and assignment records stay."""
        self.stats["worker_crashes"] += 1
        w.alive = False
        self.disconnect(w)
        w.epoch += 1
        for cells in w.cells.values():
            self.provider_release(cells)
        # What lived in the process dies with it; the state dir stays.
        w.proto, w.cells, w.outcomes, w.pushes, w.sent_at = wp.WorkerProtocol(), {}, {}, {}, {}
        self.note(f"{w.worker_id} crashed")
        self.at(self.now + self.rng.randint(2_000, 10_000), "worker_up", w.worker_id)

    # --- the operator and the hosts (--faults ops) ---------------------------------------------
    def operate(self, kind: str, *args: Any) -> None:
        """A worker's disk fills and frees (its heartbeats say so), an operator drains a worker
        (it exits once it holds nothing, and its host starts it again), grants a retry to a cell
        out of attempts (or, with none, to a selected cell: refused), and raises the spend cap
        each time the run pauses on it. What the coordinator cannot take now (it is down) is
        tried again a second later."""
        run = self.state.runs[self.run_id]
        if kind == "degrade":
            self.degraded_reason[args[0]] = args[1]
            self.note(f"{args[0]} disk {'full' if args[1] else 'has room again'}")
        elif not self.coordinator_up and kind != "drain_exit":
            self.at(self.now + 1_000, kind, *args)
        elif kind == "drain" and self.extra_rng.random() < 0.5:
            # Its host stops it (SIGTERM): the worker drains itself (a group pushed from now on is
            # handed back unstarted) and says so in a DrainNotice; the rest is an admin drain's.
            w = self.workers[args[0]]
            if w.alive:
                self.note(f"{w.worker_id} stopped by its host: drains")
                self.worker_step(w, wp.DrainStarted())
                self.send_to_coordinator(w, ("drain_notice",))
                self.drain_until_idle(w)
        elif kind == "drain":
            w = self.workers[args[0]]
            out = self.apply(c.WorkerDrained(self.now, w.worker_id))
            self.note(f"operator drains {w.worker_id}: {out.kind.name}")
            if out.ok:
                self.drain_until_idle(w)
        elif kind == "drain_exit":
            w = self.workers[args[0]]
            if not w.alive or w.incarnation != self.drained.get(w.worker_id):
                self.drained.pop(w.worker_id, None)  # it crashed meanwhile: the new process takes work
            elif w.cells or w.proto.held or w.outbox:
                self.at(self.now + 500, "drain_exit", w.worker_id)
            else:
                # Its host stops it (SIGTERM): as the real worker, it drains (a group pushed now
                # is handed back unstarted: a restore may have lost the drain), says goodbye, and
                # exits once that is acknowledged or its wait is over (the frame may be lost:
                # the stream's end says it then).
                self.note(f"{w.worker_id} holds nothing: says goodbye and exits, drained")
                del self.drained[w.worker_id]
                self.worker_step(w, wp.DrainStarted())
                self.send_to_coordinator(w, ("goodbye",))
                self.at(self.now + self.extra_rng.randint(5, 200), "crash", w.worker_id)  # its host starts it again
        elif kind == "grant":
            exhausted = [cid for cid, cell in run.cells.items()
                         if cell.selected is None and not run.attempts_left(cell)]
            if exhausted:
                cid = self.extra_rng.choice(exhausted)
                out = self.apply(c.CellRetryGranted(self.now, self.run_id, cid))
                self.note(f"operator grants {cid} a retry: {out.kind.name}")
                self.extra_stats["grants" if out.ok else "grants_refused"] += 1
            else:
                selected = [cid for cid, cell in run.cells.items() if cell.selected is not None]
                if selected:
                    cid = self.extra_rng.choice(selected)
                    out = self.apply(c.CellRetryGranted(self.now, self.run_id, cid))
                    if out.ok:
                        self.fail(f"a retry of {cid}, which has a selected result, was granted")
                    self.extra_stats["grants_refused"] += 1
        elif kind == "release":
            # `fleetctl release`: the worker takes work at once, its streak and backoff forgotten;
            # the black-hole check's own streak starts over with the core's.
            out = self.apply(c.WorkerReleased(self.now, args[0]))
            self.note(f"operator releases {args[0]}: {out.kind.name}")
            if out.ok:
                self.extra_stats["releases"] += 1
                if args[0] == self.blackhole_wid:
                    self.blackhole_streak_ended()
        elif kind == "cap_watch":
            if run.paused and run.pause_reason.startswith("spend cap") and not self.cap_raise_due:
                self.extra_stats["cap_pauses"] += 1
                self.cap_raise_due = True
                self.at(self.now + self.extra_rng.randint(1_000, 10_000), "raise_cap")
            if not run.settled or self.faulty():
                self.at(self.now + 1_000, "cap_watch")
        elif kind == "raise_cap":
            self.cap_raise_due = False
            if run.paused and run.cost_cap_usd and run.observed_cost_usd >= run.cost_cap_usd:
                # Twice the cap, and over what it observed (a restore brings back an older cap).
                cap = round(max(run.cost_cap_usd * 2, run.observed_cost_usd * 1.25), 4)
                out = self.apply(c.RunRecovered(self.now, self.run_id, cap))
                self.note(f"operator raises the spend cap to ${cap}: {out.kind.name}")
                self.extra_stats["cap_raises"] += out.ok

    def drain_until_idle(self, w: SimWorker) -> None:
        """A drain begun (by the operator or the worker's host): the process exits once it
        holds nothing (`drain_exit`)."""
        self.extra_stats["drains"] += 1
        self.drained[w.worker_id] = w.incarnation
        self.at(self.now + 500, "drain_exit", w.worker_id)

    def ops_dispatch_check(self, e: PushAssignment) -> None:
        """A group is dispatched only to a worker that takes work: not one whose last heartbeat
        said its disk is full (nor one the core marked so), nor one being drained."""
        if e.assignment_id in self.ops_dispatched:
            return  # sent again (a heartbeat that did not list it): not a dispatch
        self.ops_dispatched.add(e.assignment_id)
        w = self.state.workers[e.worker_id]
        if w.degraded or self.said_degraded.get(e.worker_id):
            self.fail(f"{e.assignment_id} dispatched to {e.worker_id}, whose disk is full")
        if w.draining:
            self.fail(f"{e.assignment_id} dispatched to {e.worker_id}, which is being drained")

    # --- the run ----------------------------------------------------------------------------
    def schedule_faults(self) -> None:
        f, rng = self.faults, self.rng
        wids = list(self.workers)
        if f.partition:
            self.at(self.start_ms + rng.randint(5_000, 60_000), "partition", rng.choice(wids),
                    rng.randint(20_000, 40_000))
        t0 = self.start_ms
        if f.worker_crash:
            self.at(t0 + rng.randint(5_000, 100_000), "crash", rng.choice(wids))
        if f.stream_reset:
            self.at(t0 + rng.randint(5_000, 100_000), "stream_reset", rng.choice(wids))
        for _ in range(f.coordinator_restarts):
            self.at(t0 + rng.randint(5_000, 120_000), "coord_crash")
        if f.pause:
            start = t0 + rng.randint(5_000, 100_000)
            self.at(start, "pause")
            self.at(start + rng.randint(5_000, 30_000), "recover")
        for start, length in self.extra.stalls:
            self.at(t0 + start, "freeze", length)
        if self.extra.restore_ms != (0, 0):
            self.at(t0 + self.extra.restore_ms[0], "backup")
            self.at(t0 + self.extra.restore_ms[1], "restore")
        if self.blackhole_wid is not None:
            start, stop = self.extra.blackhole_ms
            self.at(t0 + start, "blackhole", "starts")
            if stop:
                self.at(t0 + stop, "blackhole", "recovers")
        index, start, stop = self.extra.degraded
        if index >= 0:
            self.at(t0 + start, "degrade", wids[index], DEGRADED_REASON)
            self.at(t0 + stop, "degrade", wids[index], "")
        if self.extra.drain[0] >= 0:
            self.at(t0 + self.extra.drain[1], "drain", wids[self.extra.drain[0]])
        for at in self.extra.grants_ms:
            self.at(t0 + at, "grant")
        if self.extra.cap_usd:
            self.at(t0 + 1_000, "cap_watch")

    def next_run(self, order_from: str = "") -> dict:
        """After `run`: the same spec again, on the same coordinator and fleet (the workers keep
        their sessions), with a policy that orders it from `order_from`; faults drawn anew."""
        from dataclasses import replace
        self.start_ms = self.now
        self.policy = replace(self.policy, order_from=order_from)
        self.run_id = run_id_for(self.spec.canonical, self.policy.canonical())
        self.env_failure_pending = self.faults.env_failure
        self.straggler_pending = self.faults.straggler
        return self.run(connect=False)

    def run(self, connect: bool = True) -> dict:
        t0 = self.start_ms
        out = self.apply(c.RunSubmitted(t0, self.run_id, self.spec, self.policy, MANIFEST, WORKER_KEYS))
        if not out.ok:
            raise SimFailure(self.seed, self.commands, self.now, f"submission refused: {out.detail}")
        for w in self.workers.values() if connect else ():
            self.at(t0 + self.rng.randint(0, 500), "reconnect", w.worker_id, w.epoch)
            self.at(t0 + HEARTBEAT_MS + self.rng.randint(0, 300), "heartbeat", w.worker_id, w.epoch)
        self.at(t0 + TICK_MS, "tick")
        self.at(t0 + LIVENESS_MS, "liveness")
        self.schedule_faults()
        self.op_paused = False
        self.pause_due = False  # a "pause" retried while the coordinator is down
        while self.events:
            when, _, kind, args = heapq.heappop(self.events)
            self.now = when
            if self.now > self.start_ms + SETTLE_LIMIT_MS:
                raise SimFailure(self.seed, self.commands, self.now, "the run did not settle after the faults stopped")
            if self.frozen and kind in _FROZEN_KINDS:
                # The coordinator is stalled: its clock's ticks and its own passes do not run
                # (they go on after it), and what reaches its sockets waits there.
                if kind == "tick":
                    self.at(self.now + TICK_MS, "tick")
                elif kind == "liveness":
                    self.at(self.now + LIVENESS_MS, "liveness")
                elif kind == "to_coord":
                    self.frozen_inbox.append(("frame", args))
                else:
                    self.frozen_deferred.append((kind, args))
                continue
            if kind == "tick":
                if self.coordinator_up:
                    self.apply(c.ClockTicked(self.now))
                    run = self.state.runs[self.run_id]
                    if run.settled and not self.faulty():
                        break
                self.at(self.now + TICK_MS, "tick")
            elif kind == "liveness":
                # The servicer: every session still up (a partitioned one too, until the
                # keepalive ends it) in one StreamsAlive.
                if self.coordinator_up:
                    up = tuple((wid, self.said.get(wid, ())) for wid, w in self.workers.items()
                               if w.connected and self.attached.get(wid) == w.conn
                               and self.now - self.beat_at.get(wid, 0) >= LIVENESS_MS * 9 // 10)
                    for wid, _ in up:
                        self.beat_at[wid] = self.now
                    if up:
                        self.apply(c.StreamsAlive(self.now, up))
                self.at(self.now + LIVENESS_MS, "liveness")
            elif kind == "to_coord":
                self.to_coord(*args)
            elif kind == "to_worker":
                wid, epoch, frame, restarts, conn = args
                w = self.workers[wid]
                if self.extra.restore_ms != (0, 0) and restarts != self.restarts:
                    continue  # sent on a stream of a coordinator process that is gone
                if conn is not None and conn != w.conn:
                    self.stats["frames_on_old_streams"] += 1
                    continue
                if w.alive and w.connected and epoch == w.epoch:
                    self.worker_frame(w, frame)
            elif kind == "heartbeat":
                wid, epoch = args
                w = self.workers[wid]
                if epoch != w.epoch:
                    continue
                if w.connected:
                    running = sum(len(cells) for cells in w.cells.values())
                    self.worker_step(w, wp.HeartbeatDue(self.now, running, self.degraded_reason.get(wid, "")))
                    self.flush(w)
                    if w.proto.draining and w.welcomed == w.conn:
                        # A live stream does not lose its DrainNotice; this network drops frames,
                        # so it goes again with each heartbeat (the core takes the second as a
                        # duplicate). Lost for good, the core pushed on to a draining worker,
                        # each group handed back unstarted, 14 a seed in `--faults ops`.
                        self.send_to_coordinator(w, ("drain_notice",))
                self.at(self.now + HEARTBEAT_MS, "heartbeat", wid, epoch)
            elif kind == "cell_done":
                wid, epoch, aid, tid = args
                w = self.workers[wid]
                if epoch == w.epoch and w.alive:
                    self.cell_done(w, aid, tid)
            elif kind == "reconnect":
                wid, epoch = args
                w = self.workers[wid]
                if epoch == w.epoch:
                    self.connect(w)
            elif kind == "partition":
                wid, length = args
                w = self.workers[wid]
                self.stats["partitions"] += 1
                self.unprotect(wid)
                self.restore_disturbed(wid)
                w.partitioned = True
                self.note(f"{wid} partitioned for {length}ms")
                self.at(self.now + self.rng.randint(PARTITION_NOTICE_MS_MIN, PARTITION_NOTICE_MS_MAX),
                        "stream_dead", wid)
                self.at(self.now + length, "heal", wid)
            elif kind == "stream_dead":
                # The keepalive noticed the silence: to the servicer, a stream that ended.
                w = self.workers[args[0]]
                if w.connected and w.partitioned:
                    self.disconnect(w)
                    if self.coordinator_up:
                        self.apply(c.WorkerStreamEnded(self.now, w.worker_id, self.quiet_ms(w.worker_id)))
                    self.at(self.now + RECONNECT_MS, "reconnect", w.worker_id, w.epoch)
            elif kind == "stream_reset":
                w = self.workers[args[0]]
                if w.alive and w.connected and not w.partitioned:
                    self.note(f"{w.worker_id} stream reset")
                    self.disconnect(w)  # frames in flight on the reset stream are dropped
                    self.unprotect(w.worker_id)
                    self.restore_disturbed(w.worker_id)
                    if self.frozen:
                        self.frozen_inbox.append(("ended", (w.worker_id,)))
                    elif self.coordinator_up:
                        self.apply(c.WorkerStreamEnded(self.now, w.worker_id, self.quiet_ms(w.worker_id)))
                    self.at(self.now + RECONNECT_MS, "reconnect", w.worker_id, w.epoch)
            elif kind == "heal":
                self.workers[args[0]].partitioned = False
                self.note(f"{args[0]} healed")
            elif kind == "crash":
                w = self.workers[args[0]]
                if w.alive:
                    self.unprotect(w.worker_id)
                    self.restore_disturbed(w.worker_id)
                    if w.connected and self.frozen:
                        self.frozen_inbox.append(("ended", (w.worker_id,)))  # read after the stall
                    elif w.connected and self.coordinator_up:
                        # Its kernel closes the socket: the servicer sees the stream end at once.
                        self.apply(c.WorkerStreamEnded(self.now, w.worker_id, self.quiet_ms(w.worker_id)))
                    self.crash_worker(w)
            elif kind == "worker_up":
                w = self.workers[args[0]]
                w.alive = True
                w.incarnation += 1
                self.note(f"{w.worker_id} restarted as incarnation {w.incarnation}")
                self.adopt_orphans(w)
                self.connect(w)
                self.at(self.now + HEARTBEAT_MS, "heartbeat", w.worker_id, w.epoch)
            elif kind == "coord_crash":
                if self.coordinator_up:
                    self.restart_coordinator()
            elif kind == "coord_up":
                self.coordinator_up = True
                self.apply(c.CoordinatorRecovered(self.now))
                if self.op_paused:
                    pass
                self.note("coord recovered from its log")
                for w in self.workers.values():
                    self.at(self.now + self.rng.randint(100, 2_000), "reconnect", w.worker_id, w.epoch)
            elif kind == "pause":
                if self.coordinator_up:
                    self.op_paused = True
                    self.pause_due = False
                    self.apply(c.RunPaused(self.now, self.run_id))
                else:
                    self.pause_due = True
                    self.at(self.now + 1_000, "pause")
            elif kind == "recover":
                if self.pause_due:
                    # The operator's pause waits for a coordinator that is down (a restore's
                    # downtime can outlast the pause's length): the recover comes after it
                    # (seed 1034 with every extra fault: the recover came first and was lost).
                    self.at(self.now + 1_000, "recover")
                elif self.coordinator_up and self.op_paused:
                    self.op_paused = False
                    out = self.apply(c.RunRecovered(self.now, self.run_id))
                    if out.rejection == Rejection.SPEND_CAP_REACHED:  # reached while paused: the
                        self.cap_raise_due = True  # operator reads why, and recovers with a higher cap
                        self.at(self.now + self.extra_rng.randint(1_000, 10_000), "raise_cap")
                elif self.op_paused:
                    self.at(self.now + 1_000, "recover")
            elif kind == "repair":
                if self.coordinator_up:
                    out = self.apply(c.RunRepaired(self.now, self.run_id, args[0]))
                    self.note(f"operator repair: {out.kind.name}")
                else:
                    self.at(self.now + 1_000, "repair", args[0])
            elif kind == "freeze":
                if self.frozen or not self.coordinator_up:
                    self.at(self.now + 1_000, "freeze", *args)
                else:
                    self.freeze(args[0])
            elif kind == "thaw":
                self.thaw()
            elif kind == "blackhole":
                self.note(f"{self.blackhole_wid} black hole {args[0]}")
            elif kind in ("degrade", "drain", "drain_exit", "grant", "cap_watch", "raise_cap", "release"):
                self.operate(kind, *args)
            elif kind == "welcome_due":
                w = self.workers[args[0]]
                if w.epoch == args[1] and w.conn == args[2] and w.connected and w.welcomed != w.conn:
                    self.note(f"{w.worker_id} got no welcome: reconnects")
                    self.disconnect(w)
                    self.restore_disturbed(w.worker_id)
                    self.at(self.now + RECONNECT_MS, "reconnect", w.worker_id, w.epoch)
            elif kind == "backup":
                if self.coordinator_up:
                    self.backup_len = len(self.log)  # what a backup holds: the log as committed
                    self.note(f"backup of {self.backup_len} log records")
                else:
                    self.at(self.now + 1_000, "backup")
            elif kind == "restore":
                if self.coordinator_up and self.backup_len >= 0:
                    self.restore_from_backup()
                else:
                    self.at(self.now + 1_000, "restore")
            elif kind == "coord_up_restored":
                self.coordinator_up = True
                # The backup's word of a disk may be older than a worker's full disk: its hello
                # says it, before the registration can dispatch to it (so said_degraded stands).
                self.apply(c.CoordinatorRecovered(self.now))
                self.apply(c.CoordinatorRestored(self.now, f"backup-{self.seed}",
                                                 f"r{self.extra_stats['restores']}"))
                self.note(f"coord restored from its backup: epoch {self.state.epoch}")
                run = self.state.runs.get(self.run_id)
                if run is not None and run.paused and not run.pause_reason and not self.op_paused:
                    # The operator's recover was acknowledged after the backup: lost with the
                    # tail. The operator sees the run paused again and recovers it again.
                    self.op_paused = True
                    self.at(self.now + self.rng.randint(5_000, 20_000), "recover")
                if run is not None and run.blocked_reason:
                    self.at(self.now + self.rng.randint(5_000, 20_000), "repair", run.blocked_reason)  # so is a repair
                for w in self.workers.values():
                    self.at(self.now + self.rng.randint(100, 2_000), "reconnect", w.worker_id, w.epoch)
            else:
                raise AssertionError(kind)
        return self.finish()

    # --- the restore from a backup (--faults restore) ---------------------------------------
    def restore_from_backup(self) -> None:
        """The coordinator dies and an operator starts one on the backup: the log's tail after the
        backup is lost (what it dispatched, what it acknowledged). The workers live on with their
        outboxes and what they kept; the new coordinator starts a new epoch."""
        self.extra_stats["restores"] += 1
        self.coordinator_up = False
        self.restarts += 1
        self.hellos = HelloStreams()  # the new coordinator process remembers no stream
        for w in self.workers.values():
            self.disconnect(w)
        if self.blackhole_wid is not None:
            # The black-hole check's streak ends here, as one no tick found due: the evidence
            # that found it due (its quarantine, the other workers' successes) may be in the lost
            # tail, and the core rebuilds the streak from the offers, to judge again from what
            # comes back (seed 1598 with stall,blackhole,restore: the 5th failure's subject
            # succeeded again only on the black hole itself, which ended the rebuilt streak).
            self.blackhole_never_due.update(self.blackhole_streak)
            self.blackhole_streak, self.blackhole_streak_due = [], False
        self.issued_before_restore.update(dict.fromkeys(self.state.attempts))
        lost = self.log[self.backup_len:]
        self.log = self.log[:self.backup_len]
        self.extra_stats["lost_records"] += len(lost)
        state = new_state()
        for cmd in self.log:
            state, t = step(state, cmd)
            assert t.outcome.ok, f"replay of {cmd} was refused: {t.outcome}"
        for attempt_id, cell_id in list(self.acked_selectable.items()):
            run = state.runs.get(self.state.attempts[attempt_id].run_id)
            if run is None or run.cells[cell_id].selected != attempt_id:
                # Acknowledged after the backup: the restored coordinator does not have it.
                del self.acked_selectable[attempt_id]
                self.lost_acked[attempt_id] = (cell_id, self.state.attempts[attempt_id].worker_id)
        self.extra_stats["lost_acked"] = len(self.lost_acked)
        self.restore_undisturbed = {wid: None for wid, w in self.workers.items() if w.alive and not w.partitioned
                                    and wid in state.workers
                                    and state.workers[wid].status not in (WorkerStatus.EXPIRED, WorkerStatus.GONE)}
        self.state = state
        # Selections of the lost tail vanish (a coordinator that never made them): the checks
        # across steps start again from the restored state, checked when it was first reached.
        self.monitor = Monitor()
        self.monitor.observe(state)
        self.attempts_checked = self.restore_checked = len(state.attempts)
        self.note(f"coord restored from the backup: {len(lost)} log records lost, "
                  f"{len(self.lost_acked)} acknowledged results with them")
        self.at(self.now + self.rng.randint(1_000, 5_000), "coord_up_restored")

    def restore_step_check(self) -> None:
        """No attempt dispatched after the restore has an id issued before it (an adopted one,
        offered by the worker that ran it, is that very attempt)."""
        total = len(self.state.attempts)
        ids = list(itertools.islice(reversed(self.state.attempts), max(0, total - self.restore_checked)))
        self.restore_checked = total
        for tid in ids:
            if tid in self.issued_before_restore and not self.state.attempts[tid].recovered:
                self.fail(f"attempt id {tid}, issued before the restore, issued again")

    def restore_disturbed(self, wid: WorkerId) -> None:
        """A fault of the worker's own (a crash, a partition, a reset, a dropped frame) before
        every result it offers after the restore is answered: they may come late."""
        w = self.workers[wid]
        if wid in self.restore_undisturbed and (not self.state.epoch or w.seen_epoch != self.state.epoch
                                                or w.offered):
            del self.restore_undisturbed[wid]

    def offer_answered(self, wid: WorkerId, attempt_id: str, out: Any) -> None:
        if attempt_id not in self.lost_acked:
            return
        if out.kind == OutcomeKind.ACCEPTED:
            self.extra_stats["adopted"] += 1
        elif out.kind == OutcomeKind.LATE:
            self.extra_stats["offers_late"] += 1

    def restore_problems(self) -> list[str]:
        """Every cell whose acknowledged result the restore lost ends selected; one whose worker
        no fault of its own touched until its offers were answered is selected with a result of
        the old epoch (adopted, that one or another worker's: its cell was not paid for again)."""
        bad = []
        run = self.state.runs[self.run_id]
        for attempt_id, (cell_id, wid) in self.lost_acked.items():
            cell = run.cells[cell_id]
            if cell.selected is None:
                bad.append(f"cell {cell_id}, whose result {attempt_id} the restore lost, ended without one")
            elif cell.selected not in self.issued_before_restore:  # a result of the old epoch is no new cost
                self.extra_stats["run_again"] += 1
                if wid in self.restore_undisturbed:
                    bad.append(f"cell {cell_id} ran again after the restore although {wid} kept {attempt_id} "
                               "and no fault of its own delayed its offer")
        return bad

    def to_coord(self, wid: WorkerId, epoch: int, restarts: int, frame: tuple, conn: int) -> None:
        """A frame from `wid`'s stream `conn`. One of a stream older than the one whose hello the
        coordinator took is not read: the newer session cut the old one (`Hub.attach`). A hello
        is, and refused by the edge's own check when stale (`HelloStreams`)."""
        if not (self.coordinator_up and restarts == self.restarts and self.workers[wid].connected):
            return
        if frame[0] != "hello" and conn < self.attached.get(wid, 0):
            self.stats["frames_of_cut_sessions"] += 1
            return
        self.coordinator_frame(wid, frame)

    # --- the coordinator's stall (--faults stall) ----------------------------------------------
    def freeze(self, length_ms: int) -> None:
        """The coordinator process stops (a frozen VM, SIGSTOP, a loop blocked) for `length_ms`:
        workers run on and finish their cells, their frames wait in its sockets, and it decides
        nothing. The workers alive and connected now (their hello accepted on this stream) are
        the ones the stall must cost nothing if they stay so throughout."""
        self.frozen, self.frozen_since = True, self.now
        self.frozen_through = {}
        for wid, w in self.workers.items():
            cw = self.state.workers.get(wid)
            if (w.alive and w.connected and not w.partitioned and self.attached.get(wid) == w.conn
                    and cw is not None and cw.status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED)):
                self.frozen_through[wid] = (w.epoch, w.conn)
        self.note(f"coord stalls for {length_ms}ms")
        self.at(self.now + length_ms, "thaw")

    def thaw(self) -> None:
        """The coordinator runs again, as the real actor does: its first tick finds the gap and
        is a CoordinatorStalled instead (`stall_command` False: a plain tick), then what waited
        in its sockets is read in order, then its own deferred events run."""
        stalled_ms = self.now - self.frozen_since
        self.frozen = False
        self.extra_stats["stalls"] += 1
        self.extra_stats["stall_ms"] += stalled_ms
        until = self.now + self.policy.recovery_grace_ms + self.policy.expire_after_ms
        for wid, (epoch, conn) in self.frozen_through.items():
            w = self.workers[wid]
            if w.alive and w.connected and not w.partitioned and w.epoch == epoch and w.conn == conn:
                self.protected[wid] = (until, epoch, conn)
        self.frozen_through = {}
        self.note(f"coord runs again after {stalled_ms}ms; {len(self.frozen_inbox)} frames waited")
        self.apply(c.CoordinatorStalled(self.now, stalled_ms) if self.stall_command else c.ClockTicked(self.now))
        inbox, self.frozen_inbox = self.frozen_inbox, []
        self.extra_stats["stall_frames"] += len(inbox)
        for what, args in inbox:
            if what == "frame":
                self.to_coord(*args)
            elif self.coordinator_up:
                self.apply(c.WorkerStreamEnded(self.now, args[0], self.quiet_ms(args[0])))
        deferred, self.frozen_deferred = self.frozen_deferred, []
        for kind, args in deferred:
            self.at(self.now + 1, kind, *args)

    def unprotect(self, wid: WorkerId) -> None:
        """A fault of its own: what happens to the worker from now is not the stall's doing."""
        self.frozen_through.pop(wid, None)
        self.protected.pop(wid, None)

    def finish(self) -> dict:
        summary = summarize(self.state, self.run_id)
        if self.check:
            self.final_checks(summary)
        results = [{"cell_id": r.cell_id, "score": r.score, "status": r.status, "attempt_id": r.attempt_id,
                    "worker_id": r.worker_id, "assignment_id": r.assignment_id, "generation": r.generation,
                    "dispatch_order": r.dispatch_order} for r in summary.selected]
        return {
            "seed": self.seed,
            "elapsed_ticks": self.now // TICK_MS,
            "elapsed_virtual_ms": self.now,
            "run_id": self.run_id,
            "faults": vars(self.faults),
            "summary": {
                "state": summary.state,
                "selected": len(summary.selected),
                "incomplete": len(summary.incomplete),
                "incomplete_reasons": sorted({i.reason for i in summary.incomplete}),
                "observed_cost_usd": summary.observed_cost_usd,
                "selected_cost_usd": summary.selected_cost_usd,
                "usage_complete": summary.usage_complete,
                "attempts_dispatched": summary.attempts_dispatched,
                "late_reports": summary.late_reports,
                "peak_concurrent_groups": summary.peak_concurrent_groups,
                "slots_offered": summary.slots_offered,
            },
            "stats": dict(self.stats, commands=self.commands, log_records=len(self.log),
                          coordinator_restarts=self.restarts),
            "results": results,
            "incomplete": [{"cell_id": i.cell_id, "reason": i.reason, "attempts": i.attempts}
                           for i in summary.incomplete],
            "trace": self.trace + ([f"... {self.trace_dropped} more"] if self.trace_dropped else []),
        } | ({"providers": self.provider_report()} if self.providers else {}) | (
            {"extra_faults": self.extra_report()} if self.extra_names else {})

    def extra_report(self) -> dict:
        self.extra_stats["forgiven"] = sum(cell.forgiven for cell in self.state.runs[self.run_id].cells.values())
        return {"names": list(self.extra_names), "stalls_ms": [list(x) for x in self.extra.stalls],
                "blackhole": self.blackhole_wid, "blackhole_ms": list(self.extra.blackhole_ms),
                "stall_command": self.stall_command, "stall_problems": self.stall_problems[:20],
                "blackhole_problems": self.blackhole_problems(summarize(self.state, self.run_id))[:20],
                **({"restore_ms": list(self.extra.restore_ms)} if "restore" in self.extra_names else {}),
                **self.extra_stats}

    def provider_report(self) -> dict:
        """Per provider: the simulated one (capacity, outage, what it admitted and refused) and
        the core's record of it (limits, peak, throttled attempts)."""
        out = {}
        for name, p in self.state.providers.items():
            sp = self.sim_providers.get(name)
            out[name] = {"declared": p.declared, "effective": p.effective, "peak_running": p.peak_running,
                         "throttled": p.throttled, "retry_after_ms_total": p.retry_after_ms_total}
            if sp is not None:
                out[name] |= {"sim_capacity": sp.capacity, "sim_outage_ms": list(sp.outage),
                              "sim_admitted": sp.admitted, "sim_refused": sp.refused,
                              "sim_peak_inflight": sp.peak_inflight}
        return out

    def fail(self, what: str) -> NoReturn:
        raise SimFailure(self.seed, self.commands, self.now, what)

    def settled_checks(self, summary: Any) -> None:
        """The run settled, and a cell is incomplete only for running out of attempts (or, in the
        providers scenario, of throttled attempts)."""
        if summary.state not in ("complete", "incomplete"):
            self.fail(f"run ended {summary.state}, not settled")
        allowed = ("exhausted", "provider_throttled") if self.providers else ("exhausted",)
        for inc in summary.incomplete:
            if inc.reason not in allowed:
                self.fail(f"cell {inc.cell_id} ended incomplete as {inc.reason}")

    def final_checks(self, summary) -> None:
        fail = self.fail
        self.settled_checks(summary)
        for attempt_id, cell_id in self.acked_selectable.items():
            run = self.state.runs[self.state.attempts[attempt_id].run_id]
            if run.cells[cell_id].selected != attempt_id:
                fail(f"acknowledged result {attempt_id} is not the selected result of {cell_id}")
        replayed = new_state()
        for cmd in self.log:
            replayed, _ = step(replayed, cmd)
        if durable_fingerprint(replayed) != durable_fingerprint(self.state):
            fail("replaying the whole log does not rebuild the final state")
        if self.providers:
            self.provider_final_checks(summary)
        if self.blackhole_wid is not None:
            bad = self.blackhole_problems(summary)
            if bad:
                fail(bad[0])
        if self.extra.restore_ms != (0, 0):
            bad = self.restore_problems()
            if bad:
                fail(bad[0])

    def blackhole_due_at_tick(self) -> None:
        """The core's rule, recounted for the black hole's streak at a tick: at the bound in
        failures of subjects another worker has succeeded on since the streak began. With
        quarantine off (a bound of 0) the default bound judges: the check then says what the
        rule would have saved. A failure a restore lost, not offered back yet, is not counted."""
        bound = self.policy.quarantine_after_failures or limits.QUARANTINE_AFTER_FAILURES_DEFAULT
        if self.blackhole_streak_due or len(self.blackhole_streak) < bound:
            return
        run = self.state.runs[self.run_id]
        since = self.other_subject_selectable_ms
        own = sum(1 for tid in self.blackhole_streak if (t := self.state.attempts.get(tid)) is not None
                  and since.get(run.cells[t.cell_id].subject_id, -1) >= self.blackhole_streak_ms)
        self.blackhole_streak_due = own >= bound

    def blackhole_streak_ended(self) -> None:
        if not self.blackhole_streak_due:
            self.blackhole_never_due.update(self.blackhole_streak)
        self.blackhole_streak, self.blackhole_streak_due = [], False

    def blackhole_problems(self, summary: Any) -> list[str]:
        """No cell ends exhausted because of the black hole. Per cell that ended exhausted: its
        counted attempts (recounted: all, less the throttled reports, less the forgiven) reach
        maxAttemptsPerCell, or it had attempts given back that would have let it run; and its
        attempts that the black hole did not fail in a streak a tick found due (at
        quarantineAfterFailures in failures of subjects another worker succeeded on since the
        streak began: `blackhole_due_at_tick`) reach maxAttemptsPerCell on their own: otherwise
        those failures, counted against it, are what exhausted it. A streak that ended (a
        selectable report of its own, or the run's end) before any tick found it due is the
        run's problem by the core's rule, and its failures count as the cell's own (seed 6953:
        32 failures in 1.4 s, no other worker's cell done in them)."""
        bad: list[str] = []
        run = self.state.runs[self.run_id]
        self.blackhole_streak_ended()  # the run is over: so is the streak
        for inc in summary.incomplete:
            if inc.reason != "exhausted":
                continue
            cell = run.cells[inc.cell_id]
            # A late report's throttle counts for nothing: its attempt was counted lost (seed
            # 3150 with providers and ops,stall,blackhole, before the sim's streams were fixed).
            throttled = sum(1 for tid in cell.attempts if (t := self.state.attempts[tid]).report is not None
                            and not t.late and t.report.throttled)
            counted = len(cell.attempts) - throttled - cell.forgiven
            limit = run.max_attempts(cell)
            if counted < limit and throttled < run.max_throttled(cell):
                bad.append(f"cell {inc.cell_id} ended exhausted with {counted} counted attempts of {limit}: "
                           f"{cell.forgiven} given back would have let it run")
                continue
            # Not burned either: one whose report came late, its assignment already ended (the
            # worker lost, a deadline): the core counted it at that end, a fault of its own, and
            # heard its failure as evidence only (seed 6397 with ops,stall,blackhole,restore).
            burned = sum(1 for tid in cell.attempts
                         if tid in self.blackhole_attempts and tid not in self.blackhole_never_due
                         and not ((t := self.state.attempts[tid]).late and not t.recovered))
            own = len(cell.attempts) - throttled - burned
            if burned and own < limit:  # burned: of streaks due, so another worker succeeded
                bad.append(f"cell {inc.cell_id} ended exhausted: {burned} of its {len(cell.attempts)} attempts failed "
                           f"on black-hole worker {self.blackhole_wid} ({cell.forgiven} given back) while another "
                           f"worker succeeded; only {own} of its own")
        return bad

    def provider_final_checks(self, summary: Any) -> None:
        """The core heard of no more 429s than the simulated providers gave; a cell that ended
        provider_throttled used up its throttled attempts on a provider that throttles."""
        run = self.state.runs[self.run_id]
        for name, p in self.state.providers.items():
            sp = self.sim_providers.get(name)
            if p.throttled > (sp.refused if sp else 0):
                self.fail(f"provider {name} counts {p.throttled} throttled attempts, it refused "
                          f"{sp.refused if sp else 0}")
        for inc in summary.incomplete:
            cell = run.cells[inc.cell_id]
            if inc.reason == "provider_throttled" and (
                    cell.throttled < run.max_throttled(cell)
                    or self.subject_provider.get(cell.subject_id, "default") not in self.sim_providers):
                self.fail(f"cell {inc.cell_id} ended provider_throttled after {cell.throttled} throttled attempts")


def run_seed(seed: int, check: bool, providers: bool = False, faults: tuple[str, ...] = (),
             **kw: Any) -> dict:
    """One seed; an assertion inside the core (an invariant violation) becomes a SimFailure.
    `faults`: the extra faults (EXTRA_FAULTS); `kw` goes to Simulation (policy_overrides,
    stall_command)."""
    sim = Simulation(seed, check=check, providers=providers, faults=faults, **kw)
    try:
        return sim.run()
    except AssertionError as e:
        raise SimFailure(seed, sim.commands, sim.now, f"assertion failed: {e}") from e


def selection_view(sim: Simulation) -> dict:
    """What a run selected and what it counted, keyed by cell (not by run): per cell its
    dispatches and its selected attempt's number, status and score; then the accounting."""
    run = sim.state.runs[sim.run_id]
    cells = {}
    for cid, cell in run.cells.items():
        chosen = sim.state.attempts[cell.selected] if cell.selected else None
        report = chosen.report if chosen else None
        cells[cid] = [len(cell.attempts), chosen.attempt_id.rsplit(":", 1)[1] if chosen else None,
                      report.status.name if report else None, report.score if report else None]
    s = summarize(sim.state, sim.run_id)
    return {"cells": cells, "state": s.state, "attempts_dispatched": s.attempts_dispatched,
            "observed_cost_usd": round(s.observed_cost_usd, 6), "selected_cost_usd": round(s.selected_cost_usd, 6),
            "usage_complete": s.usage_complete, "late_reports": s.late_reports,
            "incomplete": sorted((i.cell_id, i.reason) for i in s.incomplete)}


def run_order_check(seed: int) -> dict:
    """A quiet run, then the same spec ordered from it on the same coordinator (its log goes
    on): the second must dispatch in another order and select and count exactly the same."""
    sim = Simulation(seed, check=True, quiet=True)
    try:
        sim.run()
        a = selection_view(sim)
        first_run, first_ms = sim.run_id, sim.now
        sim.next_run(order_from=first_run)
    except AssertionError as e:
        raise SimFailure(seed, sim.commands, sim.now, f"assertion failed: {e}") from e
    ordered = sim.state.runs[sim.run_id]
    if not ordered.order:
        raise SimFailure(seed, sim.commands, sim.now, "the second run was not ordered")
    b = selection_view(sim)
    if a != b:
        diff = sorted(k for k in a["cells"] if a["cells"][k] != b["cells"].get(k))
        what = f"cells {diff[:5]}" if diff else ", ".join(k for k in a if a[k] != b[k])
        raise SimFailure(seed, sim.commands, sim.now, f"the ordered run selected differently: {what}")
    spec_order = list(range(sim.spec.group_count))
    return {"seed": seed, "reordered": list(ordered.order) != spec_order, "cells": len(a["cells"]),
            "first_ms": first_ms, "second_ms": sim.now - sim.start_ms}


def provider_view(sim: Simulation) -> dict:
    """Per cell what can be compared between a run with providers and one without: its counted
    attempts (all, less the throttled and the forgiven), its tried attempts (all, less the
    throttled), the number of its selected attempt among those tried, and that
    attempt's status and score, and how it ended (selected, or the summary's incomplete reason)."""
    run = sim.state.runs[sim.run_id]
    reasons = {i.cell_id: i.reason for i in summarize(sim.state, sim.run_id).incomplete}
    cells = {}
    for cid, cell in run.cells.items():
        tried = [t for t in cell.attempts  # not throttled; forgiven ones included
                 if not ((r := sim.state.attempts[t].report) and r.throttled)]
        report = sim.state.attempts[cell.selected].report if cell.selected else None
        cells[cid] = {"counted": counted_attempts(cell), "tried": len(tried), "throttled": cell.throttled,
                      "selected": tried.index(cell.selected) + 1 if cell.selected else None,
                      "status": report.status.name if report else None, "score": report.score if report else None,
                      "ended": "selected" if cell.selected else reasons.get(cid, "?")}
    return cells


def run_provider_check(seed: int) -> dict:
    """A limited run selects exactly what an unlimited one selects. The seed runs quiet (no fault
    that loses an attempt to timing; an attempt's outcome and duration drawn from its cell and its
    counted number) twice: with the providers scenario (limits, simulated providers that throttle,
    invariants after every command), and without providers (no limits, no throttling). Compared
    per cell: a cell selected with providers is selected without, on the same attempt (of those
    not throttled, forgiven ones included: a quarantine forgives by worker), with the same status
    and score; a cell exhausted with providers is exhausted without, after
    the same counted attempts; a cell that ended provider_throttled (its throttled attempts used
    up, which the unlimited run cannot do) had made counted attempts that the unlimited run also
    made without selecting, that is fewer than it made or than its selected attempt's number. A
    cell never has counted attempts over maxAttemptsPerCell in either run."""
    limited = Simulation(seed, check=True, quiet=True, providers=True)
    unlimited = Simulation(seed, check=True, quiet=True)
    for sim in (limited, unlimited):
        try:
            sim.run()
        except AssertionError as e:
            raise SimFailure(seed, sim.commands, sim.now, f"assertion failed: {e}") from e
    a, b = provider_view(limited), provider_view(unlimited)
    fail = limited.fail
    ended: dict[str, int] = {}
    for cid, x in a.items():
        y = b[cid]
        ended[x["ended"]] = ended.get(x["ended"], 0) + 1
        if x["ended"] == "provider_throttled":
            if y["throttled"] or not (x["counted"] < (y["selected"] or y["counted"] + 1)):
                fail(f"cell {cid} ended provider_throttled after {x['counted']} counted attempts, "
                     f"the unlimited run {y}")
        elif x["ended"] == "selected":
            # `tried`, not `counted`: a quarantine forgives the attempts of its worker's streak,
            # and which worker ran an attempt differs between the two runs (seed 4070).
            if {k: x[k] for k in ("tried", "selected", "status", "score", "ended")} != \
                    {k: y[k] for k in ("tried", "selected", "status", "score", "ended")}:
                fail(f"cell {cid} selected with providers {x}, without {y}")
        elif x["ended"] != y["ended"] or x["counted"] != y["counted"]:
            fail(f"cell {cid} ended {x['ended']} with providers ({x['counted']} counted), "
                 f"{y['ended']} without ({y['counted']})")
    refused = sum(p.refused for p in limited.sim_providers.values())
    return {"seed": seed, "cells": len(a), "ended": ended, "throttled": refused,
            "peak_over_capacity": any(p.peak_inflight > p.capacity for p in limited.sim_providers.values()
                                      if p.capacity)}
