"""A report as the coordinator keeps it: one bytes object instead of a dozen records.

A `Report` held in the state is about a dozen objects: the record (19 slots), its artifacts'
tuple and `ArtifactRef`, and an int or float of its own for each time, token count, size and
cost. At a million cells that was 470 bytes a report and a tenth of a snapshot's objects to
unpickle (docs/benchmarks.md, issue 26). `pack` turns it into one bytes object (a run's report
with one artifact: 131 bytes, 164 with the object's header), `unpack` gives back an equal
`Report`; `AttemptState.report` does both, so a reader sees a `Report` as before and pays about
2 us for each one it reads. A walk over many reports that reads a few fields of each (the run's
summary, ListAttempts) takes a `Glance` instead (`glance`): those fields alone, without
building the Report, in about a third of the time.

The packing is marshal (version 2) of a tuple of ints, floats, bytes and None only: marshal is
exact for each of them (a float's every bit, -0.0 included) and writes equal values as equal
bytes whatever their history (a string would be written one way when interned and another way
when not, so strings are packed as their UTF-8 and a digest as its 32 raw bytes). Equal
reports therefore pack to equal bytes, and a state holds the same bytes however it was built:
live, replayed from the log, or loaded from a snapshot.
"""
from __future__ import annotations

import marshal
from typing import NamedTuple

from common.evidence import (
    ArtifactRef, ArtifactUnavailable, Cleanup, Execution, Report, Status, Usage, Verification,
)
from common.ids import DIGEST_PREFIX, is_digest

_STATUS = tuple(Status)
_EXECUTION = tuple(Execution)
_VERIFICATION = tuple(Verification)
_USAGE = tuple(Usage)
_CLEANUP = tuple(Cleanup)
assert all(tuple(e) == tuple(sorted(e)) and e[0] == 0 and e[-1] == len(e) - 1 and len(e) <= 16
           for e in (_STATUS, _EXECUTION, _VERIFICATION, _USAGE, _CLEANUP)), "each enum's values are 0..n-1, n <= 16"
_PREFIX, _PREFIX_LEN = DIGEST_PREFIX, len(DIGEST_PREFIX)
_VERSION = 2  # binary floats; no references between objects (which would depend on refcounts)


def _digest_bytes(digest: str) -> bytes | str:
    """The digest's 32 raw bytes; a digest of any other form (never validated into a state,
    but packing must not lose it) stays a str."""
    return bytes.fromhex(digest[_PREFIX_LEN:]) if is_digest(digest) else digest


_UTF8, _ANY = "utf-8", "surrogatepass"  # a str as its UTF-8 and back, whatever it holds


def _utf8(text: str) -> bytes:
    return text.encode(_UTF8, _ANY)


def pack(r: Report) -> bytes:
    enums = int(r.status) | int(r.execution) << 4 | int(r.verification) << 8 | int(r.usage) << 12 \
        | int(r.cleanup) << 16
    artifacts = tuple((_utf8(a.name), _digest_bytes(a.digest), a.size_bytes) for a in r.artifacts)
    # The fields a report seldom carries, in one None when it carries none of them.
    rare = (_utf8(r.environment_failure), tuple((_utf8(u.name), _utf8(u.reason)) for u in r.unavailable),
            _utf8(r.throttled), r.retry_after_ms) \
        if r.environment_failure or r.unavailable or r.throttled or r.retry_after_ms else None
    return marshal.dumps((enums, r.score, r.input_tokens, r.output_tokens, r.cached_tokens, r.cost_usd,
                          r.started_ms, r.finished_ms, _utf8(r.detail), artifacts, rare), _VERSION)


class Glance(NamedTuple):
    """The fields of a report that a walk over a run's cells reads (the summary's `visit_cell`,
    ListAttempts' records, the console's run page), read straight from its packing: a tuple, not
    a Report (whose frozen dataclass's __init__ is most of `unpack`). Each field is what the
    Report's of the same name is, except `throttled`, which says only whether the provider
    throttled the attempt."""

    status: Status
    execution: Execution
    usage: Usage
    score: float | None
    cost_usd: float | None
    started_ms: int
    finished_ms: int
    detail: str
    throttled: bool


_new_glance = tuple.__new__  # NamedTuple's own __new__ is a Python function: twice as slow


def glance(packed: bytes) -> Glance:
    enums, score, _, _, _, cost, started, finished, detail, _, rare = marshal.loads(packed)
    return _new_glance(Glance, (_STATUS[enums & 15], _EXECUTION[enums >> 4 & 15], _USAGE[enums >> 12 & 15], score,
                                cost, started, finished, detail.decode(_UTF8, _ANY),
                                rare is not None and rare[2] != b""))


def unpack(packed: bytes) -> Report:
    enums, score, input_tokens, output_tokens, cached_tokens, cost, started, finished, detail, artifacts, rare = \
        marshal.loads(packed)
    if rare is None:
        environment_failure, unavailable, throttled, retry_after_ms = "", (), "", 0
    else:
        environment_failure, unavailable, throttled, retry_after_ms = rare
        environment_failure, throttled = environment_failure.decode(_UTF8, _ANY), throttled.decode(_UTF8, _ANY)
        unavailable = tuple(ArtifactUnavailable(n.decode(_UTF8, _ANY), w.decode(_UTF8, _ANY)) for n, w in unavailable)
    return Report(_STATUS[enums & 15], _EXECUTION[enums >> 4 & 15], _VERIFICATION[enums >> 8 & 15],
                  _USAGE[enums >> 12 & 15], _CLEANUP[enums >> 16 & 15], score, environment_failure,
                  input_tokens, output_tokens, cached_tokens, cost, started, finished,
                  detail.decode(_UTF8, _ANY),  # inline: a call per field is 5% of an unpack
                  tuple([ArtifactRef(n.decode(_UTF8, _ANY),
                                     _PREFIX + d.hex() if type(d) is bytes else d, size)  # type: ignore[arg-type]
                         for n, d, size in artifacts]),
                  unavailable, throttled, retry_after_ms)
