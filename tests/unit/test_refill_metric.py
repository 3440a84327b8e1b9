"""`fleet_slot_refill_seconds` has one observation per slot refilled: a ReportBatch that ends
two groups of a worker, and so pushes it two, is two refills; pushes to other workers and
other effects are none. (Counted once per frame before, the integration test's 'at least 6
refills for 8 groups on 2 slots' could fall short when both slots' last reports shared a
frame.)"""
from __future__ import annotations

import time

from common.ids import AssignmentId, GroupId, RunId, WorkerId
from coordinator.actor import Reply
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
