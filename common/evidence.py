"""The evidence model of one attempt, and the one rule that decides what it means.

A report is selectable only with execution completed or subject_failed, verification
valid, cleanup confirmed and no environment failure. Missing usage alone never makes a
report unselectable. A coarse status is carried for readers, and must agree with the
evidence: `expected_status` is the only mapping, and a report whose status differs is
rejected rather than reinterpreted.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from common.fastinit import fast_init_all
from common.fastpickle import canonical_float, canonical_str, fast_pickle
from common.ids import Digest, is_digest
from common.limits import ARTIFACTS_PER_REPORT_MAX, ID_CHARS_MAX, RETRY_AFTER_MS_MAX, SCORE_ABS_MAX


class Execution(enum.IntEnum):
    UNSPECIFIED = 0
    COMPLETED = 1
    SUBJECT_FAILED = 2  # the subject ran and failed (crash, non-zero exit, its own timeout)
    NOT_STARTED = 3  # the environment never let the subject start
    UNKNOWN = 4  # the worker cannot tell what happened (killed, lost)


class Verification(enum.IntEnum):
    UNSPECIFIED = 0
    VALID = 1
    INVALID = 2  # the verifier crashed or gave no parseable verdict
    NOT_RUN = 3


class Usage(enum.IntEnum):
    UNSPECIFIED = 0
    COMPLETE = 1
    PARTIAL = 2
    MISSING = 3
    UNKNOWN = 4


class Cleanup(enum.IntEnum):
    UNSPECIFIED = 0
    CONFIRMED = 1
    UNKNOWN = 2


class Status(enum.IntEnum):
    """Coarse status, derived from the evidence (see `expected_status`)."""

    UNSPECIFIED = 0
    COMPLETED = 1  # selectable, the subject completed
    SUBJECT_FAILED = 2  # selectable, the subject failed: a measured outcome
    INFRA_FAILED = 3  # not selectable; the environment failed or never started the subject
    INDETERMINATE = 4  # not selectable; what happened is not known well enough
    THROTTLED = 5  # not selectable and not an attempt: the model provider refused or was overloaded


@fast_pickle(canonical={"name": canonical_str})
@dataclass(frozen=True, slots=True)
class ArtifactRef:
    name: str
    digest: Digest
    size_bytes: int


@fast_pickle
@dataclass(frozen=True, slots=True)
class ArtifactUnavailable:
    name: str
    reason: str


@fast_pickle(canonical={"score": canonical_float, "cost_usd": canonical_float})
@dataclass(frozen=True, slots=True)
class Report:
    """The evidence of one attempt, as the worker sends it. Frozen: equality is identity."""

    status: Status
    execution: Execution
    verification: Verification
    usage: Usage
    cleanup: Cleanup
    score: float | None = None
    environment_failure: str = ""  # a deterministic environment defect, empty when none
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    started_ms: int = 0  # worker wall clock, for the timeline only; never used for decisions
    finished_ms: int = 0
    detail: str = ""  # a short human line: why the subject failed, what the verifier said
    artifacts: tuple[ArtifactRef, ...] = ()
    unavailable: tuple[ArtifactUnavailable, ...] = ()
    # The model provider refused the subject's request (rate limit, overload): what it said, in
    # one line; empty when it did not. A throttled attempt is never scored and never counts
    # against maxAttemptsPerCell (coordinator/core/providers.py).
    throttled: str = ""
    retry_after_ms: int = 0  # the provider's Retry-After, 0 when it gave none


def is_selectable(r: Report) -> bool:
    return (
        r.execution in (Execution.COMPLETED, Execution.SUBJECT_FAILED)
        and r.verification == Verification.VALID
        and r.cleanup == Cleanup.CONFIRMED
        and not r.environment_failure
        and not r.throttled
    )


def expected_status(r: Report) -> Status:
    if is_selectable(r):
        return Status.COMPLETED if r.execution == Execution.COMPLETED else Status.SUBJECT_FAILED
    if r.throttled:
        return Status.THROTTLED
    if r.environment_failure or r.execution == Execution.NOT_STARTED:
        return Status.INFRA_FAILED
    return Status.INDETERMINATE


_ENUM_FIELDS = (("status", Status), ("execution", Execution), ("verification", Verification), ("usage", Usage),
                ("cleanup", Cleanup))


def evidence_problem(r: Report) -> str:
    """Empty when the report is well formed; otherwise what is wrong with it, in one line.
    Once per report received and replayed: the common case is checked first, in one go."""
    if not (type(r.status) is Status and type(r.execution) is Execution and type(r.verification) is Verification
            and type(r.usage) is Usage and type(r.cleanup) is Cleanup
            and r.status and r.execution and r.verification and r.usage and r.cleanup):
        for name, enum_type in _ENUM_FIELDS:
            value = getattr(r, name)
            if not isinstance(value, enum_type) or value == 0:
                return f"{name} is unspecified"
    if r.verification == Verification.VALID:
        if r.score is None:
            return "valid verification without a score"
        if not math.isfinite(r.score) or abs(r.score) > SCORE_ABS_MAX:
            return f"score {r.score!r} is not a finite number"
    elif r.score is not None:
        return "a score without valid verification"
    for name in ("input_tokens", "output_tokens", "cached_tokens"):
        value = getattr(r, name)
        if value is not None and value < 0:
            return f"{name} is negative"
    if r.cost_usd is not None and (not math.isfinite(r.cost_usd) or r.cost_usd < 0):
        return "cost_usd is negative or not finite"
    if r.usage == Usage.COMPLETE and r.cost_usd is None:
        return "complete usage without a cost"
    if len(r.environment_failure) > ID_CHARS_MAX:
        return "environment failure reason too long"
    if r.throttled or r.retry_after_ms:
        if not r.throttled:
            return "a retry-after without a throttled reason"
        if len(r.throttled) > ID_CHARS_MAX:
            return "throttled reason too long"
        if r.verification == Verification.VALID:
            return "a throttled attempt with a verdict: a throttled attempt is never scored"
        if r.environment_failure:
            return "a throttled attempt with an environment failure"
        if not 0 <= r.retry_after_ms <= RETRY_AFTER_MS_MAX:
            return f"retry_after_ms must be between 0 and {RETRY_AFTER_MS_MAX}"
    if not r.artifacts and not r.unavailable:
        return ""
    if len(r.artifacts) + len(r.unavailable) > ARTIFACTS_PER_REPORT_MAX:
        return "too many artifacts"
    names = [a.name for a in r.artifacts] + [u.name for u in r.unavailable]
    if len(set(names)) != len(names):
        return "an artifact name appears twice"
    for a in r.artifacts:
        if not a.name or len(a.name) > ID_CHARS_MAX:
            return "an artifact without a usable name"
        if not is_digest(a.digest) or a.size_bytes < 0:
            return f"artifact {a.name!r} has a malformed digest or size"
    for u in r.unavailable:
        if not u.reason:
            return f"artifact {u.name!r} is unavailable without a reason"
    return ""


fast_init_all(globals())  # records made once or more per cell: common/fastinit.py
