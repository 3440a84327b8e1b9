"""The numbered reasons a peer's input is refused (kind 1 of the three kinds of error).

Mirrored one for one by `fleet.v1.RejectionReason` in protos/fleet/v1/common.proto; a tidy
test checks that names and numbers agree. Numbers are never reused: retire a reason by
leaving its number out and reserving it in the proto.
"""
from __future__ import annotations

import enum


class Rejection(enum.IntEnum):
    UNSPECIFIED = 0
    MALFORMED_FRAME = 1  # a frame that does not decode or misses a required field
    OUT_OF_ORDER = 2  # a sequence number that is not the next one
    UNKNOWN_RUN = 3
    UNKNOWN_WORKER = 4  # a frame from a worker that has not registered
    UNKNOWN_ASSIGNMENT = 5
    UNKNOWN_ATTEMPT = 6
    UNKNOWN_CELL = 7
    GENERATION_MISMATCH = 8  # the report's assignment or generation is not its attempt's
    NOT_OWNER = 9  # a worker reporting on another worker's attempt or assignment
    CONFLICTING_REPORT = 10  # different content for an attempt that already has a report
    ARTIFACT_MISSING = 11  # a report referencing a digest the store does not hold
    STATUS_CONTRADICTS_EVIDENCE = 12
    INVALID_EVIDENCE = 13  # score missing, not finite, or present without valid verification
    ENVIRONMENT_MISMATCH = 14
    CAPACITY_INVALID = 15  # slots out of range or resources below one group's reservation
    INCARNATION_STALE = 16  # an older process of a worker registering after a newer one
    SPEC_CONFLICT = 17  # a run id already frozen with a different spec or policy
    SPEC_INVALID = 18
    REPAIR_REASON_MISMATCH = 19
    RUN_NOT_PAUSED = 20
    CELL_NOT_INCOMPLETE = 21  # a retry grant for a cell that is selected or still running
    WORKER_NOT_ACTIVE = 22  # work-bearing frame from an expired, drained or gone worker
    DIGEST_MISMATCH = 23  # an upload whose bytes do not hash to its declared digest
    LENGTH_MISMATCH = 24  # an upload whose bytes do not add up to its declared length
    CHUNK_OUT_OF_RANGE = 25  # a chunk past the declared length or not at the committed offset
    ARTIFACT_TOO_LARGE = 26
    MESSAGE_TOO_LARGE = 27
    UNAUTHENTICATED = 28  # a missing or wrong token
    PERMISSION_DENIED = 29  # a valid credential used where it does not apply
    IDENTITY_MISMATCH = 30  # a frame claiming another worker's identity
    GROUP_NOT_ASSIGNED = 31  # group finished for an assignment the worker no longer holds
    RUN_NOT_BLOCKED = 32
    STORAGE_FULL = 33  # the coordinator's disk or map is full; nothing was changed
    RUN_PIN_HELD = 34  # a pin release while a selected result or running group depends on it
    PROTOCOL_UNSUPPORTED = 35  # a worker too old to measure a run's environment
    PAGE_TOKEN_INVALID = 40  # forged, stale, or from another run or listing (admin paging)
    # Issue 11 (order from history) takes 41-42 (40 went to admin paging).
    ORDER_RUN_IN_PROGRESS = 41  # `orderFrom` names a run that has not settled yet
    ORDER_RUN_OTHER_BENCHMARK = 42  # `orderFrom` names a run of another benchmark name or version
    # Issue 22 (providers and spend).
    SPEND_CAP_REACHED = 43  # a recover of a run at its spend cap without a cap above its observed cost
    PROVIDERS_INVALID = 44  # a subject's provider in the spec contradicts the policy's mapping
    WORKER_NOT_QUARANTINED = 45  # a release of a worker that is not quarantined
    # Issue 23 (restore from a backup).
    NOT_YET_MEASURED = 46  # an offered result before its worker measured the run on this stream: resend
    # Issue 25.
    OVERLOADED = 47  # the coordinator's command queue is full; nothing was changed: resend
    # Issue 26 (a 1 s blip).
    SESSION_STALE = 48  # the Hello of a stream older than one its worker process already opened
