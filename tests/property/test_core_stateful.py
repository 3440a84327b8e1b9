"""The pure core keeps the contract under any order of events: a Hypothesis state machine
drives `step` with registrations, heartbeats, disconnects, clock ticks, consistent reports,
resends, wrong generations, artifacts, finished groups, pause and recover, drains, departures,
coordinator restarts (from the replayed log) and repairs; after every step it checks
`invariants.check`, the cross-step `Monitor`, that rejections and unlogged steps change no
durable state, and at the end of each case that the log replays to the same durable state."""
from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from common.evidence import is_selectable
from common.ids import AssignmentId, WorkerId, run_id_for
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core import is_soft, new_state, step, summarize
from coordinator.core.effects import OfferRun, OutcomeKind, PushAssignment, RevokeAssignment, Transition
from coordinator.core.invariants import Monitor, check
from coordinator.core.state import GroupStatus, WorkerStatus, durable_fingerprint
from tests.unit.core_helpers import (
    ENV,
    ENV_FAILURE,
    EVIDENCE,
    MANIFEST,
    OTHER_ENV,
    TOOL,
    WORKER_KEYS,
    artifact,
    make_policy,
    make_spec,
)

# What a worker may measure when offered the run: the right build mostly, sometimes an
# older subject file, another tool, or a key left out.
MEASUREMENTS = {
    "right build": tuple(sorted(MANIFEST + TOOL)),
    "older subject": tuple(sorted((("bench.file:solve.py", "digest-solve-OLD"),) + MANIFEST[1:] + TOOL)),
    "other tool": tuple(sorted(MANIFEST + (("tool:solve", "digest-tool-2"),))),
    "key left out": tuple(sorted(MANIFEST[1:] + TOOL)),
}
PY_VERSIONS = ("3.11.7", "3.11.7", "3.11.7", "3.12.1")

WORKERS = ("w1", "w2", "w3")
ARTIFACTS = [artifact(f"a{i}")[0] for i in range(3)]
EVIDENCE_NAMES = sorted(EVIDENCE)
ACCEPTED, DUPLICATE, LATE, REJECTED = (OutcomeKind.ACCEPTED, OutcomeKind.DUPLICATE, OutcomeKind.LATE,
                                       OutcomeKind.REJECTED)


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = new_state()
        self.now = 0
        self.log: list[object] = []
        self.monitor = Monitor()
        self.incarnation: dict[str, int] = {}
        # What each worker believes it runs: filled by pushes, emptied by revokes and hellos.
        self.held: dict[str, dict[AssignmentId, PushAssignment]] = {w: {} for w in WORKERS}
        self.sent: dict[str, c.CellReported] = {}  # attempt id -> the report the core took
        self.offered: dict[str, None] = {}  # workers offered the run and not yet answering
        self.run_id = None

    # --- plumbing -----------------------------------------------------------------------------
    def apply(self, command: object) -> Transition:
        fingerprint = durable_fingerprint(self.state)
        soft = copy.deepcopy(self.state.soft)
        version = self.state.version
        self.state, t = step(self.state, command)
        if t.outcome.kind == REJECTED:
            assert t.outcome.detail, t.outcome
            assert t.effects == () and t.durable == (), "a rejection has no effects and logs nothing"
            assert self.state.version == version and self.state.soft == soft
            assert durable_fingerprint(self.state) == fingerprint, f"rejected {command} changed the state"
        if t.durable:
            assert not any(is_soft(d) for d in t.durable), "soft commands are never logged"
            # A submission is logged with its dispatch order resolved; the rest as themselves.
            resolved = replace(command, order=t.durable[0].order) if isinstance(command, c.RunSubmitted) else command
            assert is_soft(command) or t.durable == (resolved,)
        else:
            assert durable_fingerprint(self.state) == fingerprint, f"{command} logged nothing but changed the state"
        self.log.extend(t.durable)
        outcome = t.outcome.rejection.name if t.outcome.kind == REJECTED else t.outcome.kind.name
        event(f"{type(command).__name__}: {outcome}")  # shown by --hypothesis-show-statistics
        for d in t.durable:
            if d is not command:
                event(f"derived {type(d).__name__}")
        for e in t.effects:
            if isinstance(e, PushAssignment):
                self.held[e.worker_id][e.assignment_id] = e
            elif isinstance(e, RevokeAssignment):
                self.held[e.worker_id].pop(e.assignment_id, None)
            elif isinstance(e, OfferRun):
                self.offered[e.worker_id] = None
        return t

    def registered(self) -> list[str]:
        return [w for w in WORKERS if w in self.state.workers]

    def pick_worker(self, data) -> str:
        """Mostly a registered worker, sometimes any (an unknown one is refused)."""
        known = self.registered()
        if known and data.draw(st.integers(0, 7), label="known worker") > 0:
            return data.draw(st.sampled_from(known), label="worker")
        return data.draw(st.sampled_from(WORKERS), label="worker")

    def unreported(self) -> list[str]:
        return sorted(t for t, a in self.state.attempts.items() if a.report is None)

    @property
    def run(self):
        return self.state.runs[self.run_id]

    # --- setup --------------------------------------------------------------------------------
    @initialize(tasks=st.integers(1, 3), subjects=st.integers(1, 2), repetitions=st.integers(1, 2),
                cap=st.integers(1, 3), max_attempts=st.integers(1, 3), backoff=st.sampled_from([0, 50, 400]),
                pinned=st.booleans())
    def submit(self, tasks, subjects, repetitions, cap, max_attempts, backoff, pinned):
        spec = make_spec(tasks=tasks, subjects=subjects, repetitions=repetitions, cap=cap)
        policy = make_policy(max_attempts_per_cell=max_attempts, retry_backoff_ms=backoff,
                             retry_backoff_max_ms=4 * backoff, required_environment_id=ENV if pinned else "",
                             group_deadline_ms=3_000)
        self.run_id = run_id_for(spec.canonical, policy.canonical())
        t = self.apply(c.RunSubmitted(self.now, self.run_id, spec, policy, MANIFEST, WORKER_KEYS))
        assert t.outcome.kind == ACCEPTED
        again = self.apply(c.RunSubmitted(self.now, self.run_id, spec, policy, MANIFEST, WORKER_KEYS))
        assert again.outcome.kind == DUPLICATE

    @initialize(slots=st.lists(st.integers(1, 3), min_size=1, max_size=2))
    def first_workers(self, slots):
        for wid, n in zip(WORKERS, slots):
            t = self.apply(c.WorkerRegistered(self.now, WorkerId(wid), 1, n, ENV,
                                              environment=(("python.version", "3.11.7"),)))
            assert t.outcome.kind == ACCEPTED
            self.incarnation[wid] = 1

    # --- workers ------------------------------------------------------------------------------
    @rule(data=st.data(), wid=st.sampled_from(WORKERS), slots=st.integers(1, 3),
          incarnation_step=st.sampled_from([0, 0, 1, -1]), env=st.sampled_from([ENV] * 7 + [OTHER_ENV]),
          python=st.sampled_from(PY_VERSIONS))
    def register(self, data, wid, slots, incarnation_step, env, python):
        known = self.incarnation.get(wid, 1)
        incarnation = max(0, known + incarnation_step)
        if data.draw(st.booleans(), label="claims exactly what it holds"):
            owned = tuple(self.held[wid])
        else:
            candidates = sorted(set(self.held[wid]) | set(self.state.assignments) | {AssignmentId("bogus")})
            owned = tuple(data.draw(st.lists(st.sampled_from(candidates), unique=True, max_size=3), label="owned"))
        mine = sorted(t for t, a in self.state.attempts.items() if a.worker_id == wid) or ["none"]
        buffered = tuple(data.draw(st.lists(st.sampled_from(mine), unique=True, max_size=2), label="buffered"))
        worker = self.state.workers.get(WorkerId(wid))
        self.held[wid] = {a: p for a, p in self.held[wid].items() if a in owned}
        t = self.apply(c.WorkerRegistered(self.now, WorkerId(wid), incarnation, slots, env,
                                          owned=owned, buffered=buffered, environment=(("python.version", python),)))
        if worker is not None and incarnation < worker.incarnation:
            assert t.outcome.rejection == Rejection.INCARNATION_STALE
        if t.outcome.ok:
            self.incarnation[wid] = incarnation
            assert self.state.workers[WorkerId(wid)].status == WorkerStatus.ACTIVE
            for aid in owned:
                a = self.state.assignments.get(aid)
                if a is not None and a.authoritative and a.worker_id == wid:
                    continue
                assert any(r.assignment_id == aid for r in t.effects if isinstance(r, RevokeAssignment)), \
                    f"{aid} is owned by the worker but not granted, and was not revoked"

    @precondition(lambda self: self.registered())
    @rule(data=st.data(), slots=st.integers(1, 3))
    def worker_restarts(self, data, slots):
        """A worker process restarts (perhaps with another --slots) and says hello owning the
        groups that survived, with its outbox's unacknowledged reports."""
        wid = data.draw(st.sampled_from(self.registered()), label="worker")
        incarnation = self.incarnation.get(wid, 1) + 1
        owned = tuple(self.held[wid])
        t = self.apply(c.WorkerRegistered(self.now, WorkerId(wid), incarnation, slots, ENV, owned=owned,
                                          environment=(("python.version", "3.11.7"),)))
        if t.outcome.ok:
            self.incarnation[wid] = incarnation
            worker = self.state.workers[WorkerId(wid)]
            assert len(worker.assignments) <= slots and not worker.draining
        else:
            assert t.outcome.rejection == Rejection.CAPACITY_INVALID, t.outcome

    @rule(data=st.data(), kind=st.sampled_from(["right build"] * 6 + sorted(MEASUREMENTS)),
          stale=st.sampled_from([False] * 7 + [True]))
    def measure(self, data, kind, stale):
        """A worker answers an offer (or, sometimes, says something unasked) with what it
        measured; a stale incarnation is refused and changes nothing."""
        if self.offered and data.draw(st.integers(0, 5), label="answers an offer") > 0:
            wid = data.draw(st.sampled_from(sorted(self.offered)), label="offered worker")
        else:
            wid = self.pick_worker(data)
        worker = self.state.workers.get(WorkerId(wid))
        incarnation = (worker.incarnation if worker is not None else 1) - (1 if stale else 0)
        t = self.apply(c.RunEnvironmentMeasured(self.now, WorkerId(wid), incarnation, self.run_id,
                                                MEASUREMENTS[kind]))
        if t.outcome.ok:
            self.offered.pop(wid, None)
            fit = self.state.workers[WorkerId(wid)].fits[self.run_id]
            assert bool(fit.differences) == (kind in ("older subject", "key left out") or
                                             bool(self.run.policy.required_environment_id
                                                  and worker.environment_id != self.run.policy.required_environment_id))
        elif worker is None:
            assert t.outcome.rejection == Rejection.UNKNOWN_WORKER
        else:
            assert t.outcome.rejection in (Rejection.INCARNATION_STALE, Rejection.WORKER_NOT_ACTIVE), t.outcome

    @rule(data=st.data())
    def heartbeat(self, data):
        wid = self.pick_worker(data)
        if data.draw(st.booleans(), label="lists exactly what it holds"):
            owned = tuple(self.held[wid])
        else:
            candidates = sorted(set(self.held[wid]) | {AssignmentId("bogus")})
            owned = tuple(data.draw(st.lists(st.sampled_from(candidates), unique=True, max_size=3), label="owned"))
        worker = self.state.workers.get(WorkerId(wid))
        before = list(worker.assignments) if worker is not None else []
        t = self.apply(c.HeartbeatReceived(self.now, WorkerId(wid), owned))
        if worker is None:
            assert t.outcome.rejection == Rejection.UNKNOWN_WORKER
            return
        if not t.outcome.ok:
            assert t.outcome.rejection == Rejection.WORKER_NOT_ACTIVE
            return
        pushed = {e.assignment_id for e in t.effects if isinstance(e, PushAssignment)}
        revoked = {e.assignment_id for e in t.effects if isinstance(e, RevokeAssignment)}
        assert {a for a in before if a not in owned} <= pushed, "an unlisted authoritative assignment is re-pushed"
        assert revoked == {a for a in owned if a not in before}, "a listed assignment not held is revoked"

    @rule(data=st.data())
    def disconnect(self, data):
        wid = self.pick_worker(data)
        self.apply(c.WorkerDisconnected(self.now, WorkerId(wid)))

    @rule(data=st.data())
    def drain(self, data):
        wid = self.pick_worker(data)
        worker = self.state.workers.get(WorkerId(wid))
        t = self.apply(c.WorkerDrained(self.now, WorkerId(wid)))
        if worker is None:
            assert t.outcome.rejection == Rejection.UNKNOWN_WORKER
        elif worker.status == WorkerStatus.GONE:
            assert t.outcome.rejection == Rejection.WORKER_NOT_ACTIVE
        else:
            assert t.outcome.ok and worker.draining and WorkerId(wid) not in self.state.free_workers

    @rule(data=st.data())
    def gone(self, data):
        wid = self.pick_worker(data)
        t = self.apply(c.WorkerGone(self.now, WorkerId(wid)))
        if t.outcome.ok:
            assert self.state.workers[WorkerId(wid)].assignments == {}

    # --- time ---------------------------------------------------------------------------------
    @rule(ms=st.sampled_from([0, 50, 100, 300, 500, 1_000, 1_600, 3_000]))
    def tick(self, ms):
        self.now += ms
        t = self.apply(c.ClockTicked(self.now))
        assert t.outcome.kind == ACCEPTED
        assert all(d.now_ms == self.now for d in t.durable)

    @rule(ms=st.sampled_from([100, 300, 1_000, 3_000]))
    def time_passes_with_heartbeats(self, ms):
        """Every worker that may heartbeat does so (listing what it holds), then the clock ticks."""
        self.now += ms
        for wid in self.registered():
            if self.state.workers[WorkerId(wid)].status in (WorkerStatus.ACTIVE, WorkerStatus.SUSPECTED):
                t = self.apply(c.HeartbeatReceived(self.now, WorkerId(wid), tuple(self.held[wid])))
                assert t.outcome.ok
        t = self.apply(c.ClockTicked(self.now))
        assert t.outcome.kind == ACCEPTED

    # --- reports ------------------------------------------------------------------------------
    @precondition(lambda self: self.run_id is not None and self.unreported())
    @rule(data=st.data())
    def report(self, data):
        tid = data.draw(st.sampled_from(self.unreported()), label="attempt")
        name = data.draw(st.sampled_from(EVIDENCE_NAMES), label="evidence")
        refs = tuple(data.draw(st.lists(st.sampled_from(ARTIFACTS), unique=True, max_size=2), label="artifacts"))
        report = replace(EVIDENCE[name][0], artifacts=refs)
        a = self.state.attempts[tid]
        authoritative = self.state.assignments[a.assignment_id].authoritative
        cell = self.run.cells[a.cell_id]
        selected_before = cell.selected
        command = c.CellReported(self.now, a.worker_id, tid, a.assignment_id, a.generation, report)
        t = self.apply(command)
        if any(r.digest not in self.state.artifacts for r in refs):
            assert t.outcome.rejection == Rejection.ARTIFACT_MISSING
            return
        assert t.outcome.kind == (ACCEPTED if authoritative else LATE), t.outcome
        self.sent[tid] = command
        if not authoritative:
            assert cell.selected == selected_before and self.state.attempts[tid].late
        elif is_selectable(report):
            assert cell.selected == tid, "a selectable authoritative report is selected at once"
        else:
            assert cell.selected is None
        if EVIDENCE[name][2] and authoritative:
            assert self.run.blocked_reason

    @precondition(lambda self: any(a.authoritative for a in self.state.assignments.values()))
    @rule(data=st.data())
    def worker_completes_a_group(self, data):
        """A worker reports every cell of one of its groups, then says the group is finished."""
        aid = data.draw(st.sampled_from(sorted(a.assignment_id for a in self.state.assignments.values()
                                               if a.authoritative)), label="assignment")
        a = self.state.assignments[aid]
        for tid in a.attempts:
            if self.state.attempts[tid].report is not None:
                continue
            name = data.draw(st.sampled_from(EVIDENCE_NAMES), label="evidence")
            command = c.CellReported(self.now, a.worker_id, tid, aid, a.generation, EVIDENCE[name][0])
            t = self.apply(command)
            assert t.outcome.kind == ACCEPTED, t.outcome
            self.sent[tid] = command
        assert not a.authoritative, "a group whose cells all reported releases its slot"
        t = self.apply(c.GroupFinished(self.now, a.worker_id, aid))
        assert t.outcome.kind == DUPLICATE

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def resend(self, data):
        tid = data.draw(st.sampled_from(sorted(self.sent)), label="attempt")
        old = self.sent[tid]
        t = self.apply(c.CellReported(self.now, old.worker_id, old.attempt_id, old.assignment_id, old.generation,
                                      old.report))
        assert t.outcome.kind == (LATE if self.state.attempts[tid].late else DUPLICATE)
        assert t.durable == () and t.effects == ()

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def conflicting_report(self, data):
        tid = data.draw(st.sampled_from(sorted(self.sent)), label="attempt")
        old = self.sent[tid]
        others = [n for n in EVIDENCE_NAMES if EVIDENCE[n][0] != old.report]
        report = EVIDENCE[data.draw(st.sampled_from(others), label="evidence")][0]
        t = self.apply(c.CellReported(self.now, old.worker_id, old.attempt_id, old.assignment_id, old.generation,
                                      report))
        assert t.outcome.rejection == Rejection.CONFLICTING_REPORT

    @precondition(lambda self: self.state.attempts)
    @rule(data=st.data(), delta=st.sampled_from([-1, 1, 2]))
    def wrong_generation(self, data, delta):
        tid = data.draw(st.sampled_from(sorted(self.state.attempts)), label="attempt")
        a = self.state.attempts[tid]
        report = EVIDENCE["completed-score-1"][0]
        t = self.apply(c.CellReported(self.now, a.worker_id, tid, a.assignment_id, a.generation + delta, report))
        assert t.outcome.rejection == Rejection.GENERATION_MISMATCH

    @rule(i=st.integers(0, len(ARTIFACTS) - 1))
    def store_artifact(self, i):
        ref = ARTIFACTS[i]
        stored = ref.digest in self.state.artifacts
        t = self.apply(c.ArtifactStored(self.now, ref.digest, ref.size_bytes))
        assert t.outcome.kind == (DUPLICATE if stored else ACCEPTED)

    @precondition(lambda self: self.state.assignments)
    @rule(data=st.data(), impostor=st.sampled_from([None, None, None, *WORKERS]))
    def finish_group(self, data, impostor):
        aid = data.draw(st.sampled_from(sorted(self.state.assignments)), label="assignment")
        a = self.state.assignments[aid]
        wid = impostor or a.worker_id
        authoritative = a.authoritative
        t = self.apply(c.GroupFinished(self.now, WorkerId(wid), aid))
        if wid not in self.state.workers:
            assert t.outcome.rejection == Rejection.UNKNOWN_WORKER
        elif wid != a.worker_id:
            assert t.outcome.rejection == Rejection.NOT_OWNER
        else:
            assert t.outcome.kind == (ACCEPTED if authoritative else DUPLICATE)
            assert not a.authoritative

    # --- operators and restarts ---------------------------------------------------------------
    @precondition(lambda self: self.run_id is not None)
    @rule()
    def pause(self):
        was = self.run.paused
        t = self.apply(c.RunPaused(self.now, self.run_id))
        assert t.outcome.kind == (DUPLICATE if was else ACCEPTED) and self.run.paused

    @precondition(lambda self: self.run_id is not None)
    @rule()
    def recover(self):
        was = self.run.paused
        t = self.apply(c.RunRecovered(self.now, self.run_id))
        if was:
            assert t.outcome.kind == ACCEPTED and not self.run.paused
        else:
            assert t.outcome.rejection == Rejection.RUN_NOT_PAUSED

    @precondition(lambda self: self.run_id is not None)
    @rule(right_reason=st.booleans())
    def repair(self, right_reason):
        blocked = self.run.blocked_reason
        t = self.apply(c.RunRepaired(self.now, self.run_id, ENV_FAILURE if right_reason else "not the reason"))
        if not blocked:
            assert t.outcome.rejection == Rejection.RUN_NOT_BLOCKED
        elif right_reason:
            assert t.outcome.kind == ACCEPTED and not self.run.blocked_reason
        else:
            assert t.outcome.rejection == Rejection.REPAIR_REASON_MISMATCH

    @precondition(lambda self: self.run_id is not None)
    @rule(data=st.data())
    def grant_retry(self, data):
        cell_id = data.draw(st.sampled_from(sorted(self.run.cells)), label="cell")
        cell = self.run.cells[cell_id]
        group = self.run.groups[cell.group_index]
        eligible = (cell.selected is None and group.status != GroupStatus.ASSIGNED
                    and len(cell.attempts) >= self.run.max_attempts(cell))
        t = self.apply(c.CellRetryGranted(self.now, self.run_id, cell_id))
        if eligible:
            assert t.outcome.kind == ACCEPTED
        else:
            assert t.outcome.rejection == Rejection.CELL_NOT_INCOMPLETE

    @rule()
    def coordinator_restarts(self):
        """The coordinator dies and comes back from its log: soft state is lost."""
        replayed = self.replayed()
        assert durable_fingerprint(replayed) == durable_fingerprint(self.state), "the log does not rebuild the state"
        self.state = replayed
        t = self.apply(c.CoordinatorRecovered(self.now))
        assert t.outcome.kind == ACCEPTED
        assert all(w.status in (WorkerStatus.RECONCILING, WorkerStatus.EXPIRED, WorkerStatus.GONE)
                   for w in self.state.workers.values())

    # --- checks -------------------------------------------------------------------------------
    def replayed(self):
        state = new_state()
        for command in self.log:
            state, t = step(state, command)
            assert t.outcome.ok, f"replay refused {command}: {t.outcome}"
        return state

    @invariant()
    def invariants_hold(self):
        assert check(self.state) == []

    @invariant()
    def monitor_sees_no_violation(self):
        assert self.monitor.observe(self.state) == []

    @invariant()
    def selected_results_are_authoritative_and_never_late(self):
        if self.run_id is None:
            return
        for cell in self.run.cells.values():
            if cell.selected is not None:
                a = self.state.attempts[cell.selected]
                assert not a.late and a.report is not None and is_selectable(a.report)

    @invariant()
    def summary_accounts_for_every_cell(self):
        if self.run_id is None:
            return
        s = summarize(self.state, self.run_id)
        assert len(s.selected) + len(s.incomplete) == s.cells_total == len(self.run.cells)
        for r in s.selected:
            assert self.run.cells[r.cell_id].selected == r.attempt_id
            a = self.state.attempts[r.attempt_id]
            assert (r.worker_id, r.assignment_id, r.generation, r.dispatch_order) == (
                a.worker_id, a.assignment_id, a.generation, a.dispatch_order)
        assert {i.reason for i in s.incomplete} <= {"exhausted", "blocked", "paused", "running", "retry_pending",
                                                    "not_yet_run"}
        assert s.observed_cost_usd >= s.selected_cost_usd - 1e-9
        assert s.late_reports == sum(1 for a in self.state.attempts.values() if a.late)
        if self.run.settled:
            assert s.state in ("complete", "incomplete")
            assert all(i.reason == "exhausted" for i in s.incomplete)

    def teardown(self):
        if self.run_id is None:
            return
        assert durable_fingerprint(self.replayed()) == durable_fingerprint(self.state), \
            "folding the durable log into a fresh state does not rebuild it"
        event(f"run ends {summarize(self.state, self.run_id).state}")


CoreMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoreStateful = CoreMachine.TestCase
