"""Distinct id types and their deterministic derivations.

Every id in fleet is derived from data already in the log (a spec digest, a group index, a
per-cell dispatch count), never from a clock or a random source, so a replay of the log
produces the same ids byte for byte. Types are NewTypes: free at run time, distinct for
a type checker and for a reader.
"""
from __future__ import annotations

import hashlib
from typing import NewType

RunId = NewType("RunId", str)
TaskId = NewType("TaskId", str)
SubjectId = NewType("SubjectId", str)
CellId = NewType("CellId", str)
GroupId = NewType("GroupId", str)
WorkerId = NewType("WorkerId", str)
AssignmentId = NewType("AssignmentId", str)
AttemptId = NewType("AttemptId", str)
Digest = NewType("Digest", str)  # "sha256:<64 hex>"

RUN_ID_HEX_CHARS = 16
DIGEST_PREFIX = "sha256:"


def run_id_for(spec_canonical: str, policy_canonical: str, manifest_canonical: str = "") -> RunId:
    """A run is named by what it freezes: the same spec, policy and environment manifest (the
    submitter's measurement of the bench files the run uses) give the same id, so an edited
    benchmark makes a new run instead of mixing into the old one."""
    h = hashlib.sha256()
    h.update(spec_canonical.encode())
    h.update(b"\0")
    h.update(policy_canonical.encode())
    if manifest_canonical:
        h.update(b"\0")
        h.update(manifest_canonical.encode())
    return RunId("run-" + h.hexdigest()[:RUN_ID_HEX_CHARS])


def group_id_for(task: TaskId, repetition: int) -> GroupId:
    return GroupId(f"{task}/r{repetition}")


def cell_id_for(task: TaskId, repetition: int, subject: SubjectId) -> CellId:
    return CellId(f"{task}/r{repetition}/{subject}")


def assignment_id_for(run: RunId, group: GroupId, generation: int, epoch: str = "") -> AssignmentId:
    """`epoch` is the coordinator's restore epoch ("" until its first restore from a backup):
    a restored coordinator counts generations again from the backup's, so the epoch keeps an
    id it issues apart from one issued after the backup was taken and lost with the log's tail."""
    return AssignmentId(f"{run}:{group}:e{epoch}:g{generation}" if epoch else f"{run}:{group}:g{generation}")


def attempt_id_for(run: RunId, cell: CellId, dispatch: int, epoch: str = "") -> AttemptId:
    """`dispatch` counts the cell's dispatches from 1; with the run id and the restore epoch
    it is unique forever."""
    return AttemptId(f"{run}:{cell}:e{epoch}:a{dispatch}" if epoch else f"{run}:{cell}:a{dispatch}")


def cell_of_attempt(run: RunId, attempt_id: str) -> CellId | None:
    """The cell an attempt id of `run` names (as `attempt_id_for` wrote it), or None when the
    text is not one: how a restored coordinator reads a result offered for an attempt it
    never issued."""
    prefix = f"{run}:"
    if not attempt_id.startswith(prefix):
        return None
    body, sep, number = attempt_id[len(prefix):].rpartition(":a")
    if not sep or not number.isdigit() or not body:
        return None
    cell, sep, epoch = body.rpartition(":e")
    if sep and cell and epoch.isalnum():
        body = cell
    return CellId(body)


def sha256_digest(data: bytes) -> Digest:
    return Digest(DIGEST_PREFIX + hashlib.sha256(data).hexdigest())


def is_digest(text: str) -> bool:
    if not text.startswith(DIGEST_PREFIX):
        return False
    hexpart = text[len(DIGEST_PREFIX):]
    return len(hexpart) == 64 and not hexpart.strip("0123456789abcdef")  # every char a hex digit
