"""coordinator/core/reportpack.py: a report packed and unpacked is equal to itself, field by
field and type by type (its enums enums, -0.0 still negative, None still None), whatever it
carries; equal reports pack to equal bytes however their strings were made (interned or not);
a digest of another form than sha256 survives; an attempt reads and sets its report
through the packed bytes; a glance (what the summary's walk reads) says what the report says; and a
selected cell's GetResults message, filled from the report without the checking conversion, and
its ListAttempts record, filled from a glance, carry what that conversion would have given."""
from __future__ import annotations

import math
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from common.evidence import (
    ArtifactRef, ArtifactUnavailable, Cleanup, Execution, Report, Status, Usage, Verification,
)
from common.ids import sha256_digest
from common import limits
from coordinator import views
from coordinator.core.reportpack import glance, pack, unpack
from coordinator.core.state import AttemptState
from coordinator.core.summary import SelectedResult, Tally, visit_cell
from coordinator.logcodec import report_to_proto
from coordinator.paging import Position
from tests.unit.core_helpers import Core, make_report, make_spec

_text = st.text(max_size=40)
_count = st.none() | st.integers(min_value=0, max_value=2**63 - 1)
_number = st.none() | st.floats(allow_nan=False, allow_infinity=False)
_ms = st.integers(min_value=-2**62, max_value=2**62)
_artifact = st.builds(ArtifactRef, _text,
                      st.binary(min_size=1, max_size=8).map(sha256_digest) | _text, st.integers(0, 2**62))
_reports = st.builds(
    Report, st.sampled_from(Status), st.sampled_from(Execution), st.sampled_from(Verification),
    st.sampled_from(Usage), st.sampled_from(Cleanup), _number, _text, _count, _count, _count, _number, _ms, _ms,
    _text, st.lists(_artifact, max_size=3).map(tuple),
    st.lists(st.builds(ArtifactUnavailable, _text, _text), max_size=2).map(tuple), _text,
    st.integers(0, 2**31 - 1))


def _typed(r: Report) -> list[tuple[type, object]]:
    out: list[tuple[type, object]] = []
    for name in r.__slots__:
        value = getattr(r, name)
        out.append((type(value), math.copysign(1.0, value) if type(value) is float else value))
    return out


@settings(max_examples=300, deadline=None)
@given(_reports)
def test_a_packed_report_unpacks_equal_field_by_field_and_type_by_type(r: Report) -> None:
    back = unpack(pack(r))
    assert back == r
    assert _typed(back) == _typed(r)
    assert [_typed_ref(a) for a in back.artifacts] == [_typed_ref(a) for a in r.artifacts]
    assert pack(back) == pack(r)


def _typed_ref(a: ArtifactRef) -> tuple:
    return type(a), type(a.name), a.name, type(a.digest), a.digest, a.size_bytes


def test_equal_reports_pack_to_equal_bytes_interned_or_not() -> None:
    name, detail = "".join(["lo", "g"]), "".join(["exit ", "1"])
    digest = "".join(["sha256:", "ab" * 32])
    assert name is not sys.intern(name) and digest is not sys.intern("sha256:" + "ab" * 32)
    fresh = make_report(detail=detail, artifacts=(ArtifactRef(name, digest, 7),))
    interned = make_report(detail=sys.intern("exit 1"),
                           artifacts=(ArtifactRef(sys.intern("log"), sys.intern("sha256:" + "ab" * 32), 7),))
    assert fresh == interned and pack(fresh) == pack(interned)
    assert bytes.fromhex("ab" * 32) in pack(fresh)  # the digest's raw bytes, not its 71 characters
    assert digest.encode() not in pack(fresh)


def test_a_negative_zero_and_an_empty_report_survive() -> None:
    r = make_report(score=-0.0, cost_usd=-0.0)
    back = unpack(pack(r))
    assert str(back.score) == "-0.0" and str(back.cost_usd) == "-0.0"
    bare = Report(Status.INDETERMINATE, Execution.UNKNOWN, Verification.NOT_RUN, Usage.MISSING, Cleanup.UNKNOWN)
    assert unpack(pack(bare)) == bare


def test_an_attempt_reads_and_sets_its_report_through_the_packed_bytes() -> None:
    a = AttemptState("a1", "r1", "c1", "g1", 1, "w1", 1, 1_000)
    assert a.report is None and not a.reported and a.packed_report is None
    r = make_report(throttled="429 too many requests", retry_after_ms=2_000, verification=Verification.NOT_RUN,
                    execution=Execution.NOT_STARTED, status=Status.THROTTLED)
    a.report = r
    assert a.reported and type(a.packed_report) is bytes and a.packed_report == pack(r)
    assert a.report == r and a.report is not r  # a new Report at each read
    a.report = None
    assert not a.reported and a.report is None


@settings(max_examples=300, deadline=None)
@given(_reports)
def test_a_glance_says_what_the_report_says(r: Report) -> None:
    g = glance(pack(r))
    assert (g.status, g.execution, g.usage, g.started_ms, g.finished_ms, g.detail) == \
        (r.status, r.execution, r.usage, r.started_ms, r.finished_ms, r.detail)
    assert _typed_value(g.score) == _typed_value(r.score) and _typed_value(g.cost_usd) == _typed_value(r.cost_usd)
    assert type(g.status) is Status and type(g.execution) is Execution and type(g.usage) is Usage
    assert g.throttled is bool(r.throttled)
    a = AttemptState("a1", "r1", "c1", "g1", 1, "w1", 1, 1_000)
    assert a.glance is None
    a.report = r
    assert a.glance == g


def _typed_value(value: object) -> tuple:
    return type(value), math.copysign(1.0, value) if type(value) is float else value


_OPTIONAL = ("cost_usd", "input_tokens", "output_tokens", "cached_tokens")


@settings(max_examples=100, deadline=None)
@given(_reports.filter(lambda r: r.score is not None))
def test_a_selected_cells_message_and_its_attempt_record_carry_what_the_checked_conversion_gives(r: Report) -> None:
    k = Core(make_spec(tasks=1, subjects=1, repetitions=1))
    k.register("w1", slots=1)
    (aid,) = k.held("w1")
    k.report_all(aid)
    run = k.run
    group = run.groups[0]
    (cid,) = group.cells
    tid = run.cells[cid].selected
    assert tid is not None
    k.state.attempts[tid].report = r  # set by hand: any report the wire can carry
    v = visit_cell(k.state, run, group, *run.spec.group_key(group.index), cid, Tally())
    assert isinstance(v, SelectedResult)
    cell = views._cell_proto(k.state, v)
    wire = report_to_proto(r)
    assert (cell.status, cell.usage) == (wire.status, wire.usage)
    assert list(cell.artifacts) == list(wire.artifacts) and list(cell.unavailable) == list(wire.unavailable)
    for name in _OPTIONAL:
        assert (cell.HasField(name), getattr(cell, name)) == (wire.HasField(name), getattr(wire, name)), name
    # ListAttempts reads the same report through a glance.
    page = views.attempts_page(k.state, k.run_id, Position(), 10, limits.PAGE_BYTES_MAX)
    assert page is not None
    (rec,) = page.items
    assert (rec.status, rec.usage, rec.detail) == (wire.status, wire.usage, wire.detail)
    assert (rec.started_ms, rec.finished_ms) == ((wire.started_ms, wire.finished_ms) if r.started_ms else (0, 0))
    for name in ("score", "cost_usd"):
        assert (rec.HasField(name), getattr(rec, name)) == (wire.HasField(name), getattr(wire, name)), name
