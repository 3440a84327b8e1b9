"""`fleet_slot_refill_seconds` has one observation per slot refilled: a ReportBatch that ends
two groups of a worker, and so pushes it two, is two refills; pushes to other workers and
other effects are none. (Counted once per frame before, the integration test's 'at least 6
refills for 8 groups on 2 slots' could fall short when both slots' last reports shared a
frame.) And the edge sends a commit's Acks before its pushes (Hub.on_batch's order)."""
from __future__ import annotations

import time

from common.ids import AssignmentId, GroupId, RunId, WorkerId
from coordinator.actor import Batch, Outgoing, Reply
from coordinator.core.effects import ACCEPTED, Emit, PushAssignment, Transition
from coordinator.edge import Hub


def push(worker: str, aid: str) -> PushAssignment:
    return PushAssignment(WorkerId(worker), RunId("r1"), AssignmentId(aid), 1, GroupId("g"), (), 0)


class _Session:
    worker_id = "w1"
    batch_acks = True

    def __init__(self) -> None:
        self.sent: list = []

    def send(self, frame: object) -> bool:
        self.sent.append(frame)
        return True


def refills(transitions: list[Transition]) -> float:
    """The refills the edge counts when it answers a ReportBatch of these transitions (its
    Acks are sent too, one AckBatch, whatever the count)."""
    hub, session = Hub(), _Session()
    hub.answer(Reply(session, tuple(range(1, len(transitions) + 1)), time.perf_counter(), refill=True, batch=True),
               transitions)
    assert len(session.sent) == (1 if transitions else 0)
    return hub.metrics.registry.get_sample_value("fleet_slot_refill_seconds_count")


def test_each_push_to_the_reporting_worker_is_one_refill():
    transitions = [
        Transition(ACCEPTED, (Emit("cell_selected", "r1", "c1"),)),
        Transition(ACCEPTED, (Emit("cell_selected", "r1", "c2"), push("w1", "a3"))),  # the first group ended
        Transition(ACCEPTED, (push("w2", "a4"),)),  # another worker's slot: not this session's refill
        Transition(ACCEPTED, (Emit("cell_selected", "r1", "c3"), push("w1", "a5"))),  # the second group ended
    ]
    assert refills(transitions) == 2


def test_no_push_to_the_worker_is_no_observation():
    assert refills([Transition(ACCEPTED, (push("w2", "a1"), Emit("cell_selected", "r1", "c1")))]) == 0
    assert refills([]) == 0


def test_a_commit_acks_the_report_before_it_pushes_the_group_that_refills_the_slot():
    """Hub.on_batch routes one commit in a stated order: awaited results, then each frame's Ack,
    then the pushes. A worker hears its report acknowledged before the group that refills its
    slot, whatever order the actor filled the batch in."""
    hub, session = Hub(), _Session()
    hub.sessions["w1"] = session  # type: ignore[assignment]
    order: list[str] = []
    t = Transition(ACCEPTED, (push("w1", "a2"),))
    batch = Batch(completions=[(lambda _: order.append("completion"), None)],
                  replies=[(Reply(session, (7,), time.perf_counter(), refill=True), t)],
                  outgoing=[Outgoing("w1", "push-frame")])
    hub.on_batch(batch)
    assert order == ["completion"]
    kinds = ["push" if f == "push-frame" else f.WhichOneof("body") for f in session.sent]
    assert kinds == ["ack", "push"] and session.sent[0].ack.seq == 7
