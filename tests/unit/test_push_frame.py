"""codec.push_frame: an assignment push carries every field of the core's PushAssignment and
the run's JSON parts, whatever way the frame is built."""
from __future__ import annotations

from common.fleetpb import coordinator_pb2 as pb
from coordinator import codec
from coordinator.core.effects import CellDispatch, PushAssignment

PARTS = codec.RunParts(benchmark_json='{"name":"b"}', executor_json='{"kind":"python"}', verifier_json='{"v":1}',
                       budget_json='{"timeoutSeconds":60}', tasks={"t1": '{"id":"t1"}'},
                       subjects={"s0": '{"id":"s0"}', "s1": '{"id":"s1"}'})


def test_a_push_frame_carries_the_push_and_the_runs_parts():
    cells = tuple(CellDispatch(f"t1/r2/s{i}", f"run-1:t1/r2/s{i}:a1", "t1", 2, f"s{i}", 10 + i) for i in range(2))
    push = PushAssignment("w1", "run-1", "run-1:t1/r2:g3", 3, "t1/r2", cells, deadline_ms=5_000)
    expected = pb.CoordinatorFrame(assignment=pb.AssignmentPush(
        run_id="run-1", assignment_id="run-1:t1/r2:g3", generation=3, group_id="t1/r2", task_id="t1", repetition=2,
        deadline_ms=4_000, benchmark_json='{"name":"b"}', executor_json='{"kind":"python"}', task_json='{"id":"t1"}',
        verifier_json='{"v":1}', budget_json='{"timeoutSeconds":60}',
        cells=[pb.CellAssignment(cell_id=f"t1/r2/s{i}", attempt_id=f"run-1:t1/r2/s{i}:a1", subject_id=f"s{i}",
                                 dispatch_order=10 + i) for i in range(2)],
        subject_json=['{"id":"s0"}', '{"id":"s1"}']))
    assert codec.push_frame(push, PARTS, now_ms=1_000) == expected
    late = codec.push_frame(push, PARTS, now_ms=9_000)  # past the deadline: zero, never negative
    assert late.assignment.deadline_ms == 0 and late.WhichOneof("body") == "assignment"
