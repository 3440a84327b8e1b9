"""Goal: the worker's codec keeps unknown distinct from zero and turns a push into exactly the jobs it describes; method: round-trip reports through the wire message, inspect field presence, and build jobs from hand-made pushes, including malformed ones."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from common.evidence import (
    ArtifactRef,
    ArtifactUnavailable,
    Cleanup,
    Execution,
    Report,
    Status,
    Usage,
    Verification,
)
from common.fleetpb import common_pb2, coordinator_pb2
from common.ids import sha256_digest
from worker import codec

DIGEST = sha256_digest(b"log")


def full_report() -> Report:
    return Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE, Cleanup.CONFIRMED,
                  score=0.0, input_tokens=0, output_tokens=5, cached_tokens=0, cost_usd=0.0,
                  started_ms=10, finished_ms=20, detail="ok",
                  artifacts=(ArtifactRef("stdout.log", DIGEST, 3),),
                  unavailable=(ArtifactUnavailable("big.bin", "too large"),))


def test_a_report_round_trips_and_zeros_stay_present() -> None:
    r = full_report()
    m = codec.report_to_proto(r)
    for name in ("score", "input_tokens", "output_tokens", "cached_tokens", "cost_usd"):
        assert m.HasField(name), name
    back = codec.report_from_proto(common_pb2.Report.FromString(m.SerializeToString()))
    assert back == r


def test_unknown_usage_and_score_stay_absent_not_zero() -> None:
    r = Report(Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, Usage.MISSING, Cleanup.UNKNOWN)
    m = common_pb2.Report.FromString(codec.report_to_proto(r).SerializeToString())
    for name in ("score", "input_tokens", "output_tokens", "cached_tokens", "cost_usd"):
        assert not m.HasField(name), name
    back = codec.report_from_proto(m)
    assert back.score is None and back.cost_usd is None and back.input_tokens is None
    assert back == r


def test_an_unknown_enum_value_is_refused_not_guessed() -> None:
    m = codec.report_to_proto(full_report())
    m.execution = 99
    with pytest.raises(codec.CodecError, match="execution"):
        codec.report_from_proto(m)


def test_the_payload_has_no_refs_and_the_frame_gets_the_outbox_refs_in_order() -> None:
    push = make_push()
    r = Report(Status.SUBJECT_FAILED, Execution.SUBJECT_FAILED, Verification.VALID, Usage.MISSING,
               Cleanup.CONFIRMED, score=math.pi)
    payload = codec.cell_report_payload(push, push.cells[0], r)
    assert payload == codec.cell_report_payload(push, push.cells[0], r), "deterministic bytes"
    stored = coordinator_pb2.CellReport.FromString(payload)
    assert (stored.run_id, stored.attempt_id, stored.assignment_id, stored.generation) == (
        "run-1", "run-1:add/r0/s1:a1", "run-1:add/r0:g2", 2)
    assert not stored.report.artifacts
    refs = [ArtifactRef("b", DIGEST, 3), ArtifactRef("a", sha256_digest(b"x"), 1)]
    frame = codec.cell_report_frame(payload, refs)
    assert [(a.name, a.digest, a.size_bytes) for a in frame.report.artifacts] == [(a.name, a.digest, a.size_bytes) for a in refs]
    assert codec.report_from_proto(frame.report).score == math.pi


def make_push(**over: object) -> coordinator_pb2.AssignmentPush:
    subjects = over.pop("subjects", [{"id": "s1", "callable": "m:f", "credentials": ["API_KEY", "ABSENT"]},
                                     {"id": "s2", "callable": "m:g"}])
    push = coordinator_pb2.AssignmentPush(
        run_id="run-1", assignment_id="run-1:add/r0:g2", generation=2, group_id="add/r0", task_id="add",
        repetition=0, deadline_ms=12_345,
        cells=[coordinator_pb2.CellAssignment(cell_id=f"add/r0/{s['id']}", attempt_id=f"run-1:add/r0/{s['id']}:a1",
                                              subject_id=s["id"], dispatch_order=i + 1)
               for i, s in enumerate(subjects)],
        benchmark_json='{"name":"toy"}', executor_json='{"kind":"python"}',
        task_json='{"id":"add","dir":"tasks/add"}', verifier_json='{"callable":"m:v"}',
        budget_json='{"timeoutSeconds":7}', subject_json=[json.dumps(s) for s in subjects])
    for k, v in over.items():
        setattr(push, k, v)
    return push


def test_jobs_carry_the_push_and_only_declared_credentials(tmp_path: Path) -> None:
    environ = {"API_KEY": "secret", "OTHER": "not-for-subjects", "PATH": "/bin"}
    jobs = codec.jobs_from_push(make_push(), bench_root=tmp_path / "bench", work_root=tmp_path / "w", environ=environ)
    assert [j.attempt_id for j in jobs] == ["run-1:add/r0/s1:a1", "run-1:add/r0/s2:a1"]
    a, b = jobs
    assert a.credentials == {"API_KEY": "secret"} and b.credentials == {}
    assert a.subject_timeout_s == 7 and a.task == {"id": "add", "dir": "tasks/add"}
    assert a.executor == {"kind": "python"} and a.verifier == {"callable": "m:v"}
    assert (a.run_id, a.assignment_id, a.cell_id, a.task_id, a.repetition, a.subject_id) == (
        "run-1", "run-1:add/r0:g2", "add/r0/s1", "add", 0, "s1")
    assert a.bench_root == tmp_path / "bench" and a.work_root == tmp_path / "w"


@pytest.mark.parametrize("change, problem", [
    ({"budget_json": '{"timeoutSeconds": 0}'}, "timeoutSeconds"),
    ({"budget_json": '{}'}, "timeoutSeconds"),
    ({"task_json": "[1]"}, "task_json"),
    ({"verifier_json": "{not json"}, "verifier_json"),
    ({"subjects": [{"id": "s1", "callable": "m:f", "credentials": "API_KEY"}]}, "credentials"),
])
def test_a_malformed_push_names_its_field(tmp_path: Path, change: dict, problem: str) -> None:
    with pytest.raises(codec.CodecError, match=problem):
        codec.jobs_from_push(make_push(**change), bench_root=tmp_path, work_root=tmp_path, environ={})


def test_cells_and_subjects_must_pair_up(tmp_path: Path) -> None:
    push = make_push()
    del push.subject_json[1]
    with pytest.raises(codec.CodecError, match="2 cells but 1 subjects"):
        codec.jobs_from_push(push, bench_root=tmp_path, work_root=tmp_path, environ={})


def test_a_resent_push_with_another_relative_deadline_records_the_same_bytes() -> None:
    a, b = make_push(deadline_ms=1000), make_push(deadline_ms=999)
    assert codec.push_record(a) == codec.push_record(b)
    assert codec.push_from_record(codec.push_record(a)).assignment_id == a.assignment_id
    assert codec.push_record(a) != codec.push_record(make_push(generation=3))
