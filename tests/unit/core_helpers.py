"""Builders for the core's tests: a small spec and a fast policy, reports of every evidence
combination, and a `Core` harness that drives `step`, keeps the durable log, and checks the
invariants after every command (so every test that uses it also tests the invariants)."""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from common.evidence import (
    ArtifactRef,
    ArtifactUnavailable,
    Cleanup,
    Execution,
    Report,
    Status,
    Usage,
    Verification,
    expected_status,
)
from common.ids import AssignmentId, AttemptId, RunId, WorkerId, run_id_for, sha256_digest
from common.policy import Policy
from common.spec import ExperimentSpec, parse_spec
from coordinator.core import commands as c
from coordinator.core import new_state, step, summarize
from coordinator.core.effects import (
    Emit,
    NotifyRunState,
    OfferRun,
    OutcomeKind,
    RefuseRun,
    PushAssignment,
    RevokeAssignment,
    Transition,
)
from coordinator.core.invariants import Monitor
from coordinator.core.state import AttemptState, State, durable_fingerprint

ENV = "env-test"
OTHER_ENV = "env-other"
# The submitter's manifest of the toy spec, and the tool only workers measure.
MANIFEST = (("bench.file:solve.py", "digest-solve-1"), ("bench.taskdir:t0", "digest-t0-1"))
WORKER_KEYS = ("tool:solve",)
TOOL = (("tool:solve", "digest-tool-1"),)
ENV_FAILURE = "image registry unreachable"

# Fast timings: the relations match the defaults (suspicion after several beats, expiry after
# suspicion, a recovery grace that covers an expiry); backoff 0 so redispatch is immediate
# unless a test asks for backoff.
HEARTBEAT_MS = 100
SUSPECT_MS = 350
EXPIRE_MS = 1_500
RECOVERY_GRACE_MS = 2_000
DEADLINE_MS = 10_000


def spec_doc(tasks: int = 2, subjects: int = 2, repetitions: int = 1, cap: int = 4,
             name: str = "toy", task_prefix: str = "t") -> dict[str, Any]:
    return {
        "benchmark": {"name": name, "version": "1"},
        "executor": {"kind": "command"},
        "subjects": [{"id": f"s{i}", "command": "solve"} for i in range(subjects)],
        "tasks": [{"id": f"{task_prefix}{i}"} for i in range(tasks)],
        "repetitions": repetitions,
        "budget": {"timeoutSeconds": 10},
        "verifier": {"command": "verify", "timeoutSeconds": 5},
        "execution": {"maxConcurrentTaskGroups": cap},
    }


def make_spec(**kw: Any) -> ExperimentSpec:
    return parse_spec(spec_doc(**kw))


def make_policy(**overrides: Any) -> Policy:
    values: dict[str, Any] = dict(
        heartbeat_interval_ms=HEARTBEAT_MS, suspect_after_ms=SUSPECT_MS, expire_after_ms=EXPIRE_MS,
        recovery_grace_ms=RECOVERY_GRACE_MS, retry_backoff_ms=0, retry_backoff_max_ms=0,
        max_attempts_per_cell=3, required_environment_id=ENV, group_deadline_ms=DEADLINE_MS,
    )
    values.update(overrides)
    return Policy(**values)


# --- reports ----------------------------------------------------------------------------------

_DEFAULT = object()


def make_report(execution: Execution = Execution.COMPLETED, verification: Verification = Verification.VALID,
                usage: Usage = Usage.COMPLETE, cleanup: Cleanup = Cleanup.CONFIRMED, *,
                score: Any = _DEFAULT, cost_usd: Any = _DEFAULT, status: Status | None = None,
                **kw: Any) -> Report:
    """A report whose status is the one its evidence implies, unless `status` says otherwise.
    By default a score (1.0) comes with valid verification only, and a cost (0.01) with
    complete or partial usage only, so that callers name just what they mean to vary."""
    if score is _DEFAULT:
        score = 1.0 if verification == Verification.VALID else None
    if cost_usd is _DEFAULT:
        cost_usd = 0.01 if usage in (Usage.COMPLETE, Usage.PARTIAL) else None
    draft = Report(Status.COMPLETED, execution, verification, usage, cleanup, score=score,
                   cost_usd=cost_usd, **kw)
    return replace(draft, status=expected_status(draft) if status is None else status)


# Named evidence combinations: (report, selectable, blocks the run).
EVIDENCE: dict[str, tuple[Report, bool, bool]] = {
    "completed-score-1": (make_report(score=1.0), True, False),
    "completed-score-0": (make_report(score=0.0), True, False),
    "completed-partial-score": (make_report(score=0.25), True, False),
    "subject-failed-valid-verification": (make_report(Execution.SUBJECT_FAILED, score=0.0), True, False),
    "missing-usage-alone": (make_report(usage=Usage.MISSING), True, False),
    "unknown-usage-alone": (make_report(usage=Usage.UNKNOWN), True, False),
    "partial-usage": (make_report(usage=Usage.PARTIAL, cost_usd=0.002), True, False),
    "unknown-execution": (make_report(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN,
                                      Cleanup.UNKNOWN), False, False),
    "unknown-execution-valid-verification": (make_report(Execution.UNKNOWN, score=1.0), False, False),
    "unknown-cleanup": (make_report(cleanup=Cleanup.UNKNOWN), False, False),
    "invalid-verification": (make_report(verification=Verification.INVALID), False, False),
    "verification-not-run": (make_report(verification=Verification.NOT_RUN), False, False),
    "not-started": (make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING), False, False),
    "environment-failure": (make_report(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.MISSING,
                                        environment_failure=ENV_FAILURE), False, True),
}

OK = EVIDENCE["completed-score-1"][0]
UNKNOWN = EVIDENCE["unknown-execution"][0]


def artifact(name: str = "log", data: bytes | None = None) -> tuple[ArtifactRef, bytes]:
    data = data if data is not None else f"artifact {name}".encode()
    return ArtifactRef(name, sha256_digest(data), len(data)), data


def unavailable(name: str = "trace", reason: str = "the subject wrote none") -> ArtifactUnavailable:
    return ArtifactUnavailable(name, reason)


# --- the harness ------------------------------------------------------------------------------

class Core:
    """One coordinator core under test, at virtual time `now` (ms).

    `apply` steps one command, records its durable commands, and asserts the invariants and
    the cross-step monitor; `replay` folds the recorded log into a fresh state."""

    def __init__(self, spec: ExperimentSpec | None = None, policy: Policy | None = None, *,
                 submit: bool = True, manifest: tuple = MANIFEST, worker_keys: tuple = WORKER_KEYS) -> None:
        self.state: State = new_state()
        self.manifest = manifest
        self.worker_keys = worker_keys
        # Workers answer an offer as a worker of the right build would, unless a test gives
        # a worker its own measurement here (wid -> {key: value}, merged over the reference).
        self.auto_measure = True
        self.measurements: dict[str, dict[str, str]] = {}
        self.now = 0
        self.log: list[object] = []
        self.monitor = Monitor()
        self.spec = spec if spec is not None else make_spec()
        self.policy = policy if policy is not None else make_policy()
        self.run_id: RunId = run_id_for(self.spec.canonical, self.policy.canonical())
        if submit:
            t = self.submit()
            assert t.outcome.kind == OutcomeKind.ACCEPTED, t.outcome

    # plumbing
    def apply(self, command: object) -> Transition:
        self.state, t = step(self.state, command)
        self.log.extend(t.durable)
        bad = self.monitor.observe(self.state)
        assert bad == [], f"after {type(command).__name__}: {bad}"
        offers = [e for e in t.effects if isinstance(e, OfferRun)] if self.auto_measure else []
        if offers:
            # The workers measure and answer at once; their effects (pushes, refusals) are
            # returned with the command's own, as a real worker would see them follow.
            effects = list(t.effects)
            for offer in offers:
                effects.extend(self.measure(offer.worker_id, offer.run_id).effects)
            t = Transition(t.outcome, tuple(effects), t.durable)
        return t

    def measurement(self, wid: str, run_id: RunId) -> tuple:
        run = self.state.runs[run_id]
        values = dict(run.manifest)
        values.update({k: v for k, v in TOOL if k in run.worker_keys})
        values.update(self.measurements.get(wid, {}))
        return tuple(sorted(values.items()))

    def measure(self, wid: str, run_id: RunId | None = None, measured: tuple | None = None,
                incarnation: int | None = None) -> Transition:
        run_id = run_id or self.run_id
        worker = self.state.workers[WorkerId(wid)]
        return self.apply(c.RunEnvironmentMeasured(
            self.now, WorkerId(wid), worker.incarnation if incarnation is None else incarnation, run_id,
            self.measurement(wid, run_id) if measured is None else measured))

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now

    def fingerprint(self) -> str:
        return durable_fingerprint(self.state)

    def snapshot(self) -> tuple[str, Any, int]:
        return self.fingerprint(), copy.deepcopy(self.state.soft), self.state.version

    def replay(self) -> State:
        state = new_state()
        for command in self.log:
            state, t = step(state, command)
            assert t.outcome.ok, f"replay refused {command}: {t.outcome}"
        return state

    def assert_replays(self) -> None:
        assert durable_fingerprint(self.replay()) == self.fingerprint(), "the log does not rebuild the state"

    # views
    @property
    def run(self):
        return self.state.runs[self.run_id]

    def summary(self):
        return summarize(self.state, self.run_id)

    def worker(self, wid: str):
        return self.state.workers[WorkerId(wid)]

    def held(self, wid: str) -> list[AssignmentId]:
        return list(self.state.workers[WorkerId(wid)].assignments)

    def attempt(self, tid: AttemptId) -> AttemptState:
        return self.state.attempts[tid]

    def attempts_of(self, aid: AssignmentId) -> tuple[AttemptId, ...]:
        return self.state.assignments[aid].attempts

    def group_of(self, aid: AssignmentId):
        a = self.state.assignments[aid]
        return self.run.groups[a.group_index]

    def cell(self, cell_id: str):
        return self.run.cells[cell_id]

    # commands
    def submit(self, spec: ExperimentSpec | None = None, policy: Policy | None = None,
               run_id: RunId | None = None) -> Transition:
        return self.apply(c.RunSubmitted(self.now, run_id or self.run_id, spec or self.spec, policy or self.policy,
                                         self.manifest, self.worker_keys))

    def register(self, wid: str, slots: int = 1, incarnation: int = 1, env: str = ENV, *,
                 cpu_millis: int = 0, memory_mb: int = 0, owned: tuple = (), buffered: tuple = (),
                 environment: tuple = (("python.version", "3.11.7"),), degraded: str = "") -> Transition:
        return self.apply(c.WorkerRegistered(self.now, WorkerId(wid), incarnation, slots, env,
                                             cpu_millis=cpu_millis, memory_mb=memory_mb, owned=tuple(owned),
                                             buffered=tuple(buffered), environment=environment, degraded=degraded))

    def heartbeat(self, wid: str, owned: tuple | None = None) -> Transition:
        """A heartbeat listing what the worker holds, unless `owned` says otherwise."""
        if owned is None:
            owned = tuple(self.state.workers[WorkerId(wid)].assignments)
        return self.apply(c.HeartbeatReceived(self.now, WorkerId(wid), tuple(owned)))

    def tick(self, advance_ms: int = 0) -> Transition:
        self.advance(advance_ms)
        return self.apply(c.ClockTicked(self.now))

    def clock(self, until_ms: int, alive: tuple[str, ...] = (), every_ms: int = HEARTBEAT_MS) -> list[Transition]:
        """Move time to `until_ms` in steps of `every_ms`; at each step the `alive` workers
        heartbeat (listing what they hold) and the clock ticks. Returns the ticks' transitions."""
        ticks = []
        while self.now < until_ms:
            self.now = min(self.now + every_ms, until_ms)
            for wid in alive:
                self.heartbeat(wid)
            ticks.append(self.apply(c.ClockTicked(self.now)))
        return ticks

    def report(self, tid: AttemptId, report: Report = OK, *, worker: str | None = None,
               assignment: AssignmentId | None = None, generation: int | None = None) -> Transition:
        """Report an attempt from its own worker, assignment and generation unless told otherwise."""
        a = self.state.attempts.get(tid)
        return self.apply(c.CellReported(
            self.now,
            WorkerId(worker) if worker is not None else a.worker_id,
            tid,
            assignment if assignment is not None else a.assignment_id,
            generation if generation is not None else a.generation,
            report))

    def report_all(self, aid: AssignmentId, report: Report = OK) -> list[Transition]:
        return [self.report(tid, report) for tid in self.attempts_of(aid)]

    def store(self, ref: ArtifactRef) -> Transition:
        return self.apply(c.ArtifactStored(self.now, ref.digest, ref.size_bytes))

    def finish(self, aid: AssignmentId, worker: str | None = None) -> Transition:
        wid = WorkerId(worker) if worker is not None else self.state.assignments[aid].worker_id
        return self.apply(c.GroupFinished(self.now, wid, aid))

    def pause(self) -> Transition:
        return self.apply(c.RunPaused(self.now, self.run_id))

    def recover(self) -> Transition:
        return self.apply(c.RunRecovered(self.now, self.run_id))

    def repair(self, reason: str = ENV_FAILURE) -> Transition:
        return self.apply(c.RunRepaired(self.now, self.run_id, reason))

    def grant(self, cell_id: str) -> Transition:
        return self.apply(c.CellRetryGranted(self.now, self.run_id, cell_id))

    def drain(self, wid: str) -> Transition:
        return self.apply(c.WorkerDrained(self.now, WorkerId(wid)))

    def gone(self, wid: str) -> Transition:
        return self.apply(c.WorkerGone(self.now, WorkerId(wid)))

    def disconnect(self, wid: str) -> Transition:
        return self.apply(c.WorkerDisconnected(self.now, WorkerId(wid)))

    def coordinator_recovered(self) -> Transition:
        return self.apply(c.CoordinatorRecovered(self.now))

    def drive_to_completion(self, report: Report = OK, rounds_max: int = 1_000) -> None:
        """Report every authoritative attempt with `report` until the run settles. Needs a
        worker that can take work; each round the clock moves past any backoff."""
        for _ in range(rounds_max):
            if self.run.settled:
                return
            held = [a for a in self.state.assignments.values() if a.authoritative]
            if not held:
                self.tick(max(self.policy.retry_backoff_max_ms, 1))
                continue
            for a in held:
                for tid in a.attempts:
                    if self.state.attempts[tid].report is None:
                        self.report(tid, report)
        raise AssertionError("the run did not settle")


# --- effect filters ---------------------------------------------------------------------------

def pushes(t: Transition, worker: str | None = None) -> list[PushAssignment]:
    return [e for e in t.effects if isinstance(e, PushAssignment) and (worker is None or e.worker_id == worker)]


def revokes(t: Transition, worker: str | None = None) -> list[RevokeAssignment]:
    return [e for e in t.effects if isinstance(e, RevokeAssignment) and (worker is None or e.worker_id == worker)]


def refusals(t: Transition, worker: str | None = None) -> list[RefuseRun]:
    return [e for e in t.effects if isinstance(e, RefuseRun) and (worker is None or e.worker_id == worker)]


def offers(t: Transition, worker: str | None = None) -> list[OfferRun]:
    return [e for e in t.effects if isinstance(e, OfferRun) and (worker is None or e.worker_id == worker)]


def emits(t: Transition, event: str | None = None) -> list[Emit]:
    return [e for e in t.effects if isinstance(e, Emit) and (event is None or e.event == event)]


def notifies(t: Transition) -> list[NotifyRunState]:
    return [e for e in t.effects if isinstance(e, NotifyRunState)]


def durable_types(t: Transition) -> list[str]:
    return [type(d).__name__ for d in t.durable]
