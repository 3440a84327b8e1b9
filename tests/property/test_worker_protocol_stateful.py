"""The worker's protocol against the real core under any order of events: a Hypothesis state
machine runs two real `WorkerProtocol`s (worker/protocol.py), each with a model of its outbox
and its ordered stream, against the real `step`, with cells finishing in any order, frames held
back and delivered in any interleaving, reports replayed (their acks come twice), streams cut,
worker processes restarted and the clock moved; after every step it checks the core's
invariants and the worker's rules (an assignment is finished, other than by a revoke, only once every
report of it was acknowledged: checked when its finish commits, behind the acks queued before
it; the protocol's held groups agree with the outbox), and at the end that the log replays."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import event as tally
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from common.ids import AssignmentId, AttemptId, WorkerId, run_id_for
from coordinator.core import commands as c
from coordinator.core import new_state, step
from coordinator.core.effects import EndSession, OfferRun, OutcomeKind, PushAssignment, RevokeAssignment
from coordinator.core.invariants import Monitor, check
from coordinator.core.state import durable_fingerprint
from tests.unit.core_helpers import ENV, EVIDENCE, MANIFEST, TOOL, WORKER_KEYS, make_policy, make_spec
from worker import protocol as wp

WORKERS = ("w1", "w2")
EVIDENCE_NAMES = sorted(EVIDENCE)
ACK_KINDS = {OutcomeKind.ACCEPTED: wp.AckKind.ACCEPTED, OutcomeKind.DUPLICATE: wp.AckKind.DUPLICATE,
             OutcomeKind.LATE: wp.AckKind.LATE}


@dataclass
class Worker:
    wid: WorkerId
    proto: wp.WorkerProtocol = field(default_factory=wp.WorkerProtocol)
    incarnation: int = 1
    connected: bool = False
    records: dict[str, PushAssignment] = field(default_factory=dict)  # the state dir
    finished: dict[str, None] = field(default_factory=dict)
    outbox: dict[str, tuple[str, int, object]] = field(default_factory=dict)  # attempt -> (asg, gen, report)
    running: dict[str, dict[str, None]] = field(default_factory=dict)  # the process: cells running
    outcomes: dict[str, object] = field(default_factory=dict)
    pushes: dict[str, PushAssignment] = field(default_factory=dict)
    commits: deque[wp.Action] = field(default_factory=deque)  # acks and finishes queued for the outbox writer
    up: deque[tuple] = field(default_factory=deque)  # frames on the stream to the coordinator, in order
    down: deque[tuple] = field(default_factory=deque)  # and back


class WorkerProtocolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = new_state()
        self.now = 0
        self.log: list[object] = []
        self.monitor = Monitor()
        self.workers = {w: Worker(WorkerId(w)) for w in WORKERS}
        self.run_id = None

    # --- the coordinator ----------------------------------------------------------------------
    def apply(self, command: object):
        self.state, t = step(self.state, command)
        self.log.extend(t.durable)
        if t.durable:
            bad = check(self.state) + self.monitor.observe(self.state)
            assert not bad, f"{type(command).__name__}: {bad[0]}"
        for e in t.effects:
            if isinstance(e, PushAssignment):
                self.to_worker(e.worker_id, ("push", e))
            elif isinstance(e, RevokeAssignment):
                self.to_worker(e.worker_id, ("revoke", e.assignment_id))
            elif isinstance(e, OfferRun):
                self.to_worker(e.worker_id, ("offer", e.run_id, e.keys))
            elif isinstance(e, EndSession):
                self.cut(self.workers[e.worker_id])
        return t.outcome

    def to_worker(self, wid: str, frame: tuple) -> None:
        w = self.workers[wid]
        if w.connected:
            w.down.append(frame)

    def coordinator_reads(self, w: Worker, frame: tuple) -> None:
        kind = frame[0]
        if kind == "hello":
            _, owned, buffered = frame
            self.apply(c.WorkerRegistered(self.now, w.wid, w.incarnation, 2, ENV, owned=owned, buffered=buffered,
                                          environment=(("python.version", "3.11.7"),)))
            self.to_worker(w.wid, ("welcome",))
        elif kind == "heartbeat":
            self.apply(c.HeartbeatReceived(self.now, w.wid, frame[1]))
        elif kind == "measured":
            self.apply(c.RunEnvironmentMeasured(self.now, w.wid, w.incarnation, frame[1],
                                                tuple(sorted(MANIFEST + TOOL))))
        elif kind == "report":
            _, tid, aid, gen, report = frame
            out = self.apply(c.CellReported(self.now, w.wid, tid, aid, gen, report))
            self.to_worker(w.wid, ("report_ack", tid, out.kind))
        elif kind == "finished":
            self.apply(c.GroupFinished(self.now, w.wid, frame[1]))
            self.to_worker(w.wid, ("finished_ack", frame[1]))

    # --- a worker, as worker/session.py drives its protocol -----------------------------------
    def worker_step(self, w: Worker, event: wp.Event) -> None:
        for action in w.proto.handle(event):
            if isinstance(action, wp.RecordAssignment):
                aid = action.assignment_id
                fresh = aid not in w.records and aid not in w.finished
                if fresh:
                    w.records[aid] = w.pushes[aid]
                self.worker_step(w, wp.AssignmentRecorded(aid, fresh))
            elif isinstance(action, wp.StartGroup):
                w.running[action.assignment_id] = dict.fromkeys(
                    cd.attempt_id for cd in w.records[action.assignment_id].cells)
            elif isinstance(action, wp.CancelGroup):
                if w.running.pop(action.assignment_id, None) is not None:
                    self.worker_step(w, wp.GroupRan(action.assignment_id))
            elif isinstance(action, wp.StoreReport):
                gen = w.records[action.assignment_id].generation
                w.outbox[action.attempt_id] = (action.assignment_id, gen, w.outcomes.pop(action.attempt_id))
                self.worker_step(w, wp.ReportStored(action.assignment_id, action.attempt_id))
            elif isinstance(action, wp.DeliverReport):
                self.send_report(w, action.attempt_id)
            elif isinstance(action, (wp.CommitAck, wp.FinishAssignment)):
                w.commits.append(action)  # committed in order by `the_outbox_commits`
            elif isinstance(action, wp.SendGroupFinished):
                assert w.connected, "a GroupFinished only on an open stream"
                w.up.append(("finished", action.assignment_id))
            elif isinstance(action, wp.SendHeartbeat):
                w.up.append(("heartbeat", action.owned))

    def commit(self, w: Worker) -> None:
        """The outbox writer commits the oldest queued operation."""
        action = w.commits.popleft()
        if isinstance(action, wp.CommitAck):
            w.outbox.pop(action.attempt_id, None)
            self.worker_step(w, wp.AckCommitted(action.assignment_id, action.attempt_id))
            return
        aid = action.assignment_id
        assert aid not in w.running, f"{aid} finished while its cells run"
        if action.by is not wp.FinishBy.REVOKE:
            waiting = [t for t, (asg, _, _) in w.outbox.items() if asg == aid]
            assert not waiting, f"{aid} finished ({action.by.value}) with {waiting[0]} unacknowledged"
        tally(f"an assignment finished by {action.by.value}")
        w.records.pop(aid, None)
        w.finished[aid] = None
        self.worker_step(w, wp.AssignmentFinished(aid))

    def send_report(self, w: Worker, tid: str) -> None:
        if w.connected and w.proto.stream_open:
            asg, gen, report = w.outbox[tid]
            w.up.append(("report", tid, asg, gen, report))

    def worker_reads(self, w: Worker, frame: tuple) -> None:
        kind = frame[0]
        if kind == "welcome":
            self.worker_step(w, wp.StreamOpened(self.now, completion_by_reports=True, heartbeat_interval_ms=100))
            for tid in list(w.outbox):  # the replay
                self.send_report(w, tid)
        elif kind == "push":
            push = frame[1]
            w.pushes[push.assignment_id] = push
            self.worker_step(w, wp.PushReceived(push.assignment_id, push.run_id,
                                                tuple(cd.attempt_id for cd in push.cells)))
        elif kind == "revoke":
            self.worker_step(w, wp.RevokeReceived(frame[1]))
        elif kind == "offer":
            w.up.append(("measured", frame[1]))
        elif kind == "report_ack":
            _, tid, outcome = frame
            entry = w.outbox.get(tid)
            if entry is None:
                return
            if outcome in ACK_KINDS:
                if tid in w.proto.held.get(entry[0], wp.Held(AssignmentId(""), "", 0, 0)).counted:
                    tally("an ack counted before comes again")
                self.worker_step(w, wp.ReportAcked(entry[0], tid, ACK_KINDS[outcome]))
            elif outcome == OutcomeKind.REJECTED:  # the shell's dead letter (no transient refusal here)
                del w.outbox[tid]
                self.worker_step(w, wp.ReportDeadLettered(entry[0], tid))
        elif kind == "finished_ack":
            self.worker_step(w, wp.GroupFinishedAnswered(frame[1]))

    def cut(self, w: Worker) -> None:
        if w.connected:
            w.connected = False
            w.up.clear()
            w.down.clear()
            self.worker_step(w, wp.StreamClosed())
            self.apply(c.WorkerStreamEnded(self.now, w.wid, 0))

    # --- rules --------------------------------------------------------------------------------
    @initialize(tasks=st.integers(1, 3), subjects=st.integers(1, 2), max_attempts=st.integers(1, 3))
    def submit(self, tasks, subjects, max_attempts):
        spec = make_spec(tasks=tasks, subjects=subjects, repetitions=1, cap=3)
        policy = make_policy(max_attempts_per_cell=max_attempts, retry_backoff_ms=0, group_deadline_ms=3_000)
        self.run_id = run_id_for(spec.canonical, policy.canonical())
        assert self.apply(c.RunSubmitted(self.now, self.run_id, spec, policy, MANIFEST, WORKER_KEYS)).ok

    @rule(wid=st.sampled_from(WORKERS))
    def connect(self, wid):
        w = self.workers[wid]
        if not w.connected:
            w.connected = True
            w.up.append(("hello", w.proto.hello_owned(), tuple(w.outbox)))

    @rule(wid=st.sampled_from(WORKERS))
    def stream_cut(self, wid):
        self.cut(self.workers[wid])

    @rule(wid=st.sampled_from(WORKERS))
    def worker_restarts(self, wid):
        """The process dies (its running cells with it) and a new one adopts what it recorded."""
        w = self.workers[wid]
        self.cut(w)
        w.proto, w.running, w.outcomes, w.pushes, w.commits = wp.WorkerProtocol(), {}, {}, {}, deque()
        w.incarnation += 1
        for aid, push in w.records.items():
            buffered = tuple(t for t, (asg, _, _) in w.outbox.items() if asg == aid)
            self.worker_step(w, wp.OrphanAdopted(aid, push.run_id, buffered))

    @rule(data=st.data(), wid=st.sampled_from(WORKERS))
    def coordinator_reads_a_frame(self, data, wid):
        w = self.workers[wid]
        if w.up:
            self.coordinator_reads(w, w.up.popleft())

    @rule(wid=st.sampled_from(WORKERS))
    def worker_reads_a_frame(self, wid):
        w = self.workers[wid]
        if w.down:
            self.worker_reads(w, w.down.popleft())

    @rule(wid=st.sampled_from(WORKERS), n=st.integers(1, 3))
    def the_outbox_commits(self, wid, n):
        w = self.workers[wid]
        for _ in range(min(n, len(w.commits))):
            self.commit(w)

    @rule(wid=st.sampled_from(WORKERS), rounds=st.integers(1, 4))
    def frames_flow_both_ways(self, wid, rounds):
        """What each side sent is read, and what that makes them send, `rounds` times."""
        w = self.workers[wid]
        for _ in range(rounds):
            up, w.up = list(w.up), deque()
            for frame in up:
                self.coordinator_reads(w, frame)
            down, w.down = list(w.down), deque()
            for frame in down:
                if w.connected:
                    self.worker_reads(w, frame)
            while w.commits:
                self.commit(w)

    @precondition(lambda self: any(w.running for w in self.workers.values()))
    @rule(data=st.data())
    def a_cell_finishes(self, data):
        w = data.draw(st.sampled_from([w for w in self.workers.values() if w.running]), label="worker")
        aid = data.draw(st.sampled_from(sorted(w.running)), label="assignment")
        cells = w.running[aid]
        tid = data.draw(st.sampled_from(sorted(cells)), label="attempt")
        del cells[tid]
        w.outcomes[tid] = EVIDENCE[data.draw(st.sampled_from(EVIDENCE_NAMES), label="evidence")][0]
        self.worker_step(w, wp.CellFinished(AssignmentId(aid), AttemptId(tid)))
        if not cells:
            del w.running[aid]
            self.worker_step(w, wp.GroupRan(AssignmentId(aid)))

    @rule(data=st.data(), wid=st.sampled_from(WORKERS))
    def a_report_is_sent_again(self, data, wid):
        """A replay (a later stream's, or one while its first ack commits): its ack comes twice."""
        w = self.workers[wid]
        if w.outbox:
            self.send_report(w, data.draw(st.sampled_from(sorted(w.outbox)), label="attempt"))

    @rule(wid=st.sampled_from(WORKERS))
    def a_report_and_its_ack_come_twice(self, wid):
        """The report at the head of the stream is read twice (a replay while its first ack
        commits): two acks, one cell."""
        w = self.workers[wid]
        if w.up and w.up[0][0] == "report":
            w.up.appendleft(w.up[0])

    @rule(ms=st.sampled_from([50, 100, 400, 1_600]))
    def time_passes(self, ms):
        self.now += ms
        self.apply(c.ClockTicked(self.now))
        for w in self.workers.values():
            if w.connected:
                self.worker_step(w, wp.HeartbeatDue(self.now))

    # --- checks -------------------------------------------------------------------------------
    @invariant()
    def held_groups_agree_with_the_outbox(self):
        for w in self.workers.values():
            for aid, held in w.proto.held.items():
                assert aid in w.records, f"{w.wid} holds {aid}, which its state dir does not record"
                stored = [t for t, (asg, _, _) in w.outbox.items() if asg == aid]
                assert all(t in held.unsettled for t in stored), f"{aid}: a stored report is settled"
                assert held.running == (aid in w.running), f"{aid}: running is {held.running}"
            assert set(w.running) <= set(w.proto.held), f"{w.wid} runs a group it does not hold"

    def teardown(self):
        replayed = new_state()
        for cmd in self.log:
            replayed, _ = step(replayed, cmd)
        assert durable_fingerprint(replayed) == durable_fingerprint(self.state)


WorkerProtocolMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestWorkerProtocolStateful = WorkerProtocolMachine.TestCase
