"""Goal: a ReportBatch (protocol 4) cut mid-stream loses no report and selects no cell twice,
and a bad report inside a batch is refused alone; method: a real coordinator, a raw session
client sending hand-made ReportBatch frames through the fake network proxy
(tests/integration/fakenet.py), which cuts the stream either before the batch reaches the
coordinator or right after it (the commit happens, the acks are lost); the worker then
reconnects, resends the same batch as its outbox would, and the results are read back."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.fleetpb import admin_pb2, common_pb2, coordinator_pb2
from tests.integration import rawclient as rc
from tests.integration.fakenet import FakeNet, FaultRates
from tests.integration.harness import Cluster, intbench_spec

pytestmark = pytest.mark.timeout(90)

# Liveness far beyond the test's length: the cut suspects the worker, nothing expires.
SLOW_POLICY = {"heartbeatIntervalMs": 1_000, "suspectAfterMs": 60_000, "expireAfterMs": 120_000,
               "recoveryGraceMs": 120_000}
ACCEPTED = common_pb2.ACK_OUTCOME_ACCEPTED
DUPLICATE = common_pb2.ACK_OUTCOME_DUPLICATE
REJECTED = common_pb2.ACK_OUTCOME_REJECTED
NO_FAULTS = FaultRates(drop_up=0, drop_down=0, duplicate_down=0, delay_max_ms=0, cut_per_frame=0)


@pytest.fixture
def cluster(tmp_path: Path):
    cl = Cluster(tmp_path)
    cl.start_coordinator()
    try:
        yield cl
        assert cl.coordinator.alive(), f"the coordinator died\n{cl.tails()}"
    finally:
        cl.stop_all()


def is_batch(frame: coordinator_pb2.WorkerFrame) -> bool:
    return frame.WhichOneof("body") == "report_batch"


def batch_of(pushes: list) -> coordinator_pb2.ReportBatch:
    return coordinator_pb2.ReportBatch(reports=[
        coordinator_pb2.CellReport(run_id=p.run_id, attempt_id=c.attempt_id, assignment_id=p.assignment_id,
                                   generation=p.generation, report=rc.good_report())
        for p in pushes for c in p.cells])


@contextlib.contextmanager
def one_group_pushed(cl: Cluster) -> Iterator[tuple[str, rc.RawSession, Any]]:
    """A run of one group, and a protocol-4 session of one slot holding its push."""
    run_id = cl.submit(intbench_spec(1), SLOW_POLICY)
    token = (cl.data_dir / "enroll.token").read_text().strip()
    with rc.RawSession(cl.address, rc.worker_metadata(token, "w1")) as s:
        s.open(rc.hello("w1", slots=1, protocol_version=4))
        (push,) = s.push(1)
        yield run_id, s, push


def send_batch(s: rc.RawSession, batch: coordinator_pb2.ReportBatch) -> list:
    """Send `batch` (a seq per report) and return the ack of each report, in order."""
    first = s.seq + 1
    s.send(coordinator_pb2.WorkerFrame(seq=first, report_batch=batch))
    s.seq += len(batch.reports)
    return [s.ack(first + i) for i in range(len(batch.reports))]


def selected_once(cl: Cluster, run_id: str, pushes: list) -> None:
    """Every reported cell selected, from the attempt that was reported, and only that one."""
    results = cl.results(run_id)
    cells = {c["cell_id"]: c for c in results["cells"]}
    admin = cl.admin()
    try:
        attempts = admin.call("ListAttempts", admin_pb2.ListAttemptsRequest(run_id=run_id)).attempts
    finally:
        admin.close()
    for p in pushes:
        for ca in p.cells:
            got = cells[ca.cell_id]
            assert got["state"] == "selected" and got["attempt_id"] == ca.attempt_id, got
            mine = [a for a in attempts if a.cell_id == ca.cell_id]
            assert len(mine) == 1, f"cell {ca.cell_id} dispatched more than once: {mine}"
    assert sum(1 for c in results["cells"] if c["state"] == "selected") == sum(len(p.cells) for p in pushes)


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_report_batch_cut_mid_stream_loses_nothing_and_selects_nothing_twice(cluster, where):
    run_id = cluster.submit(intbench_spec(4), SLOW_POLICY)
    token = (cluster.data_dir / "enroll.token").read_text().strip()
    net = FakeNet(cluster.address, seed=0, rates=NO_FAULTS)
    cut = {"armed": True}

    def once(frame: coordinator_pb2.WorkerFrame) -> bool:
        hit = cut["armed"] and is_batch(frame)
        cut["armed"] = cut["armed"] and not hit
        return hit

    if where == "before":
        net.cut_before_up = once
    else:
        net.cut_after_up = once
    address = net.start()
    try:
        s = rc.RawSession(address, rc.worker_metadata(token, "w1"))
        try:
            welcome = s.open(rc.hello("w1", slots=2, protocol_version=4))
            assert welcome.protocol_version >= 4, "the coordinator speaks ReportBatch"
            credential = welcome.worker_credential
            pushes = s.push(2)
            batch = batch_of(pushes)
            first = s.seq + 1
            s.send(coordinator_pb2.WorkerFrame(seq=first, report_batch=batch))
            s.seq += len(batch.reports)
            s.closed()  # the fake network breaks the stream; the acks, if any, do not matter
        finally:
            s.close()
        committed = sum(1 for c in cluster.results(run_id)["cells"] if c["state"] == "selected")
        assert committed == (0 if where == "before" else len(batch.reports)), committed

        # The worker's outbox still holds all four: it reconnects and resends the same batch.
        s = rc.RawSession(address, rc.worker_metadata(credential, "w1"))
        try:
            s.open(rc.hello("w1", slots=2, protocol_version=4,
                            owned_assignment_ids=[p.assignment_id for p in pushes],
                            buffered_attempt_ids=[r.attempt_id for r in batch.reports]))
            acks = send_batch(s, batch)
            expected = ACCEPTED if where == "before" else DUPLICATE
            assert [a.outcome for a in acks] == [expected] * len(batch.reports), acks
            # The seq after the batch is the next frame's: the stream goes on.
            ack = s.ack(s.send_body(group_finished=coordinator_pb2.GroupFinished(
                assignment_id=pushes[0].assignment_id, reason="completed")))
            assert ack.outcome in (ACCEPTED, DUPLICATE), ack
        finally:
            s.close()
    finally:
        net.stop()
    selected_once(cluster, run_id, pushes)


def test_a_bad_report_inside_a_batch_is_refused_alone(cluster):
    with one_group_pushed(cluster) as (run_id, s, push):
        batch = batch_of([push])
        batch.reports[0].attempt_id = ""  # malformed: refused on its own seq
        acks = send_batch(s, batch)
        assert acks[0].outcome == REJECTED and acks[0].rejection == common_pb2.REJECTION_REASON_MALFORMED_FRAME
        assert [a.outcome for a in acks[1:]] == [ACCEPTED] * (len(acks) - 1), acks
        empty = s.seq + 1
        s.send(coordinator_pb2.WorkerFrame(seq=empty, report_batch=coordinator_pb2.ReportBatch()))
        s.seq += 1
        assert s.ack(empty).outcome == REJECTED
    cells = {c["cell_id"]: c["state"] for c in cluster.results(run_id)["cells"]}
    assert cells[push.cells[0].cell_id] != "selected"
    assert all(cells[c.cell_id] == "selected" for c in push.cells[1:])


def test_a_report_the_core_refuses_inside_a_batch_is_acked_with_its_reason(cluster):
    """The acks of a batch travel as one AckBatch: a refusal by the core keeps its seq, its
    reason and its detail there, and the other reports of the batch are accepted."""
    with one_group_pushed(cluster) as (run_id, s, push):
        batch = batch_of([push])
        batch.reports[1].generation += 1  # not the assignment's generation
        acks = send_batch(s, batch)
        assert acks[1].outcome == REJECTED, acks
        assert acks[1].rejection == common_pb2.REJECTION_REASON_GENERATION_MISMATCH
        assert "generation" in acks[1].detail
        assert [a.outcome for i, a in enumerate(acks) if i != 1] == [ACCEPTED] * (len(acks) - 1), acks
    cells = {c["cell_id"]: c["state"] for c in cluster.results(run_id)["cells"]}
    assert cells[push.cells[1].cell_id] != "selected"
    assert all(cells[c.cell_id] == "selected" for i, c in enumerate(push.cells) if i != 1)
