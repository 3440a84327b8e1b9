"""The worker's own small codec: evidence to wire messages and back, pushes to cell jobs.

Rules. A Report and its message convert as common/reportwire.py says (`optional` proto3
fields keep unknown distinct from zero; an enum value this worker does not know is a
`CodecError`, not a guess). The outbox payload of an attempt is its `CellReport` without
artifact refs: the refs are computed by the outbox when it copies the files and stored
beside the payload, and `cell_report_frame` joins the two at send time, so what is sent is
exactly what was made durable. A push becomes one `CellJob` per cell; the subject gets only
the credentials it declares, taken from the worker's environment snapshot.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common.evidence import ArtifactRef, Report
from common.fleetpb import common_pb2, coordinator_pb2
from common.reportwire import report_codec
from worker.executor.base import CellJob


class CodecError(ValueError):
    """A message this worker cannot read; the text names the field."""


# ---- evidence -----------------------------------------------------------------------------


# The one conversion both sides use (common/reportwire.py), refusing with this codec's error.
report_to_proto, report_from_proto = report_codec(CodecError)


def artifact_ref_to_proto(a: ArtifactRef) -> common_pb2.ArtifactRef:
    return common_pb2.ArtifactRef(name=a.name, digest=a.digest, size_bytes=a.size_bytes)


# ---- the outbox payload -------------------------------------------------------------------


def cell_report_payload(push: coordinator_pb2.AssignmentPush, cell: coordinator_pb2.CellAssignment,
                        report: Report) -> bytes:
    """The durable record of one attempt's report: a CellReport whose report has no artifact
    refs yet (the outbox computes and keeps them). Deterministic bytes, so putting the same
    outcome again is recognised as the same entry."""
    assert not report.artifacts, "artifact refs come from the outbox, not from the executor"
    msg = coordinator_pb2.CellReport(
        run_id=push.run_id,
        attempt_id=cell.attempt_id,
        assignment_id=push.assignment_id,
        generation=push.generation,
        report=report_to_proto(report),
    )
    return msg.SerializeToString(deterministic=True)


def cell_report_frame(payload: bytes, artifacts: Sequence[ArtifactRef]) -> coordinator_pb2.CellReport:
    """The CellReport to send: the stored payload with the outbox's refs, in stored order."""
    msg = coordinator_pb2.CellReport.FromString(payload)
    assert not msg.report.artifacts, "a stored payload carries no artifact refs of its own"
    msg.report.artifacts.extend(artifact_ref_to_proto(a) for a in artifacts)
    return msg


# ---- pushes -------------------------------------------------------------------------------


def push_record(push: coordinator_pb2.AssignmentPush) -> bytes:
    """The bytes recorded for a push. `deadline_ms` counts from receipt, so a re-sent push
    carries another value; it is left out so a repeat is recognised as the same push."""
    copy = coordinator_pb2.AssignmentPush()
    copy.CopyFrom(push)
    copy.deadline_ms = 0
    return copy.SerializeToString(deterministic=True)


def push_from_record(data: bytes) -> coordinator_pb2.AssignmentPush:
    return coordinator_pb2.AssignmentPush.FromString(data)


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise CodecError(f"push.{name} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise CodecError(f"push.{name} is not a JSON object")
    return value


def executor_kind(push: coordinator_pb2.AssignmentPush) -> str:
    return str(_json_object(push.executor_json, "executor_json").get("kind", ""))


def jobs_from_push(push: coordinator_pb2.AssignmentPush, *, bench_root: Path, work_root: Path,
                   environ: Mapping[str, str]) -> list[CellJob]:
    """One job per cell, in push order. `CodecError` when the push cannot be run as sent."""
    if len(push.subject_json) != len(push.cells):
        raise CodecError(f"push carries {len(push.cells)} cells but {len(push.subject_json)} subjects")
    task = _json_object(push.task_json, "task_json")
    verifier = _json_object(push.verifier_json, "verifier_json")
    executor = _json_object(push.executor_json, "executor_json")
    budget = _json_object(push.budget_json, "budget_json")
    timeout = budget.get("timeoutSeconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise CodecError(f"push.budget_json.timeoutSeconds is not a positive integer: {timeout!r}")
    jobs = []
    for i, (cell, subject_text) in enumerate(zip(push.cells, push.subject_json)):
        subject = _json_object(subject_text, f"subject_json[{i}]")
        declared = subject.get("credentials") or []
        if not isinstance(declared, list) or not all(isinstance(n, str) for n in declared):
            raise CodecError(f"push.subject_json[{i}].credentials is not a list of names")
        jobs.append(CellJob(
            run_id=push.run_id,
            assignment_id=push.assignment_id,
            attempt_id=cell.attempt_id,
            cell_id=cell.cell_id,
            task_id=push.task_id,
            repetition=push.repetition,
            subject_id=cell.subject_id,
            task=task,
            subject=subject,
            verifier=verifier,
            executor=executor,
            subject_timeout_s=timeout,
            bench_root=bench_root,
            work_root=work_root,
            # Only declared names, and only those this worker has: a missing one becomes the
            # executor's environment failure naming it.
            credentials={n: environ[n] for n in declared if n in environ},
        ))
    return jobs
