"""The session writer joins consecutive acknowledgements into one AckBatch frame for a
protocol-2 worker, keeps the order of everything else, and never batches for protocol 1;
driven with a fake gRPC context that records what is written."""
from __future__ import annotations

import asyncio

import pytest

from common.fleetpb import coordinator_pb2
from common.rejections import Rejection
from coordinator.codec import ACK_BATCH_MAX, ack_batch_frames, ack_frame, bundle_bytes, serialize_frame
from coordinator.core.effects import ACCEPTED, Outcome, OutcomeKind
from coordinator.edge import Session, SessionCut
from coordinator.worker_service import CoordinatorServicer


class Recorder:
    def __init__(self) -> None:
        self.frames: list = []

    async def write(self, frame) -> None:  # noqa: ANN001
        self.frames.append(frame)


def push(aid: str):
    return coordinator_pb2.CoordinatorFrame(assignment=coordinator_pb2.AssignmentPush(assignment_id=aid))


async def written(batch_acks: bool) -> list:
    ctx = Recorder()
    session = Session("w1", ctx, batch_acks=batch_acks, welcomed=True)
    for frame in [ack_frame(2, ACCEPTED), ack_frame(3, ACCEPTED), push("a1"), ack_frame(4, ACCEPTED),
                  ack_frame(5, ACCEPTED), ack_frame(6, ACCEPTED), None]:
        session.queue.put_nowait(frame)
    with pytest.raises(SessionCut):
        await CoordinatorServicer._writer(None, session, ctx)  # type: ignore[arg-type]
    return ctx.frames


def shape(frames: list) -> list:
    out = []
    for f in frames:
        if type(f) is bytes:  # a bundle, written as serialized (codec.bundle_bytes)
            f = coordinator_pb2.CoordinatorFrame.FromString(f)
        kind = f.WhichOneof("body")
        if kind == "acks":
            out.append(("acks", [a.seq for a in f.acks.acks]))
        elif kind == "ack":
            out.append(("ack", f.ack.seq))
        else:
            out.append((kind, f.assignment.assignment_id))
    return out


def test_protocol_two_gets_batches_in_order() -> None:
    assert shape(asyncio.run(written(True))) == [("acks", [2, 3]), ("assignment", "a1"), ("acks", [4, 5, 6])]


def test_protocol_one_gets_one_ack_per_frame() -> None:
    assert shape(asyncio.run(written(False))) == [("ack", 2), ("ack", 3), ("assignment", "a1"), ("ack", 4),
                                                  ("ack", 5), ("ack", 6)]


def test_a_report_batch_acks_are_built_as_ack_batches_in_order_and_in_chunks():
    refused = Outcome(OutcomeKind.REJECTED, Rejection.NOT_OWNER, "not yours")
    acks = [(10 + i, refused if i == 3 else ACCEPTED) for i in range(ACK_BATCH_MAX + 5)]
    frames = ack_batch_frames(acks)
    assert [f.WhichOneof("body") for f in frames] == ["acks", "acks"]
    got = [a for f in frames for a in f.acks.acks]
    assert [len(f.acks.acks) for f in frames] == [ACK_BATCH_MAX, 5]
    assert [a.seq for a in got] == [seq for seq, _ in acks]
    assert got[3].outcome == int(OutcomeKind.REJECTED) and got[3].rejection == int(Rejection.NOT_OWNER)
    assert got[3].detail == "not yours"
    assert {a.outcome for i, a in enumerate(got) if i != 3} == {int(OutcomeKind.ACCEPTED)}


def test_a_bundle_is_written_as_the_bytes_of_the_bundle_message() -> None:
    big = coordinator_pb2.CoordinatorFrame(assignment=coordinator_pb2.AssignmentPush(
        assignment_id="a9", task_json="x" * 20_000,  # a length of three varint bytes
        cells=[coordinator_pb2.CellAssignment(cell_id=f"c{i}", attempt_id=f"c{i}:a1") for i in range(40)]))
    frames = [*ack_batch_frames([(7, ACCEPTED), (8, ACCEPTED)]), push("a1"), big, ack_frame(9, ACCEPTED),
              coordinator_pb2.CoordinatorFrame()]
    for some in (frames[:1], frames[:2], frames):
        expected = coordinator_pb2.CoordinatorFrame(bundle=coordinator_pb2.FrameBundle(frames=some))
        assert bundle_bytes(some) == expected.SerializeToString()
    assert serialize_frame(big) == big.SerializeToString() and serialize_frame(b"as is") == b"as is"


def test_a_protocol_four_session_gets_what_is_queued_together_in_one_write_in_order() -> None:
    async def main() -> list:
        ctx = Recorder()
        session = Session("w1", ctx, batch_acks=True, bundles=True, welcomed=True)
        for frame in [ack_frame(2, ACCEPTED), ack_frame(3, ACCEPTED), push("a1"), ack_frame(4, ACCEPTED), None]:
            session.queue.put_nowait(frame)
        with pytest.raises(SessionCut):
            await CoordinatorServicer._writer(None, session, ctx)  # type: ignore[arg-type]
        return ctx.frames

    written_frames = asyncio.run(main())
    assert len(written_frames) == 1 and type(written_frames[0]) is bytes
    bundle = coordinator_pb2.CoordinatorFrame.FromString(written_frames[0])
    assert bundle.WhichOneof("body") == "bundle"
    assert shape(list(bundle.bundle.frames)) == [("acks", [2, 3]), ("assignment", "a1"), ("ack", 4)]
