"""common/fastpickle.py: every record class round-trips through pickle, copy and deepcopy equal
to itself (frozen ones too, one-field ones too); a record is written as a bare object and its
fields as list items, never as a tuple, which pickle's memo would keep alive until the dump
ends; a snapshot written in the earlier tuple form (format v2) still loads; a record whose
field count differs from the class's is refused, not half set; and the fields a class names
canonical (a report's 0.0 and 1.0, an artifact's name) come back as the one shared object, from
a snapshot's load as from the wire's decode, with every other value (-0.0 too) as it was."""
from __future__ import annotations

import copy
import copyreg
import dataclasses
import io
import pickle
import pickletools

import pytest

from common.evidence import ArtifactRef, ArtifactUnavailable, Report
from common.fastpickle import canonical_float, fast_pickle
from common.reportwire import report_codec
from common.spec import Task
from coordinator.core.reportpack import pack as pack_report
from coordinator.core.state import AttemptState, CellState, durable_fingerprint
from coordinator.snapshot import FORMAT_TAG, decode_state, encode_state
from tests.unit.core_helpers import make_report, make_spec
from tests.unit.test_snapshot_parts_decode import a_state_with_work

RECORDS = [
    CellState("c1", 7, "s1", ["a1", "a2"], "a2", 1, 0, 0),
    AttemptState("a1", "r1", "c1", "g1", 2, "w1", 300, 1_733_000_000_123, pack_report(make_report()), 1_733_000_000_999),
    make_report(),
    ArtifactUnavailable("log", "too large"),
    Task("t1"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_round_trips_through_pickle_copy_and_deepcopy(record: object) -> None:
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(record, protocol=protocol))
        assert back == record and type(back) is type(record)
    assert copy.copy(record) == record
    assert copy.deepcopy(record) == record


def test_a_record_is_written_as_list_items_not_as_a_tuple() -> None:
    ops = [op.name for op, _, _ in pickletools.genops(pickle.dumps(RECORDS[0], protocol=pickle.HIGHEST_PROTOCOL))]
    assert "NEWOBJ" in ops and "APPENDS" in ops
    assert not [op for op in ops if op.startswith("TUPLE") or op == "REDUCE"], ops


def test_shared_values_stay_shared_after_a_round_trip() -> None:
    cell = CellState("c1", 7, "s1", ["a1"], None)
    a, b = pickle.loads(pickle.dumps([cell, cell], protocol=pickle.HIGHEST_PROTOCOL))
    assert a is b


def _as_written_before(obj: object) -> list:
    """A record's fields as builds before format v4 held them: an attempt's report a Report."""
    values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    if isinstance(obj, AttemptState) and obj.packed_report is not None:
        values[[f.name for f in dataclasses.fields(obj)].index("packed_report")] = obj.report
    return values


class _TupleForm(pickle.Pickler):
    """Writes every record as the v2 builds did: (the class, its fields as a tuple)."""

    def reducer_override(self, obj: object) -> object:
        if dataclasses.is_dataclass(obj) and hasattr(type(obj), "extend"):
            return type(obj), tuple(_as_written_before(obj))
        return NotImplemented


class _V3Form(pickle.Pickler):
    """Writes every record as the v3 builds did: the bare object, its fields as list items, an
    attempt's report a Report record."""

    def reducer_override(self, obj: object) -> object:
        if dataclasses.is_dataclass(obj) and hasattr(type(obj), "extend"):
            return copyreg.__newobj__, (type(obj),), None, iter(_as_written_before(obj))
        return NotImplemented


def _reported_state() -> object:
    from tests.unit.core_helpers import Core, artifact

    k = Core(make_spec(tasks=3, subjects=2))
    k.register("w1", slots=2)
    for tid in [t for aid in k.held("w1") for t in k.attempts_of(aid)]:
        ref, _ = artifact("log", data=f"the log of {tid}".encode())
        k.store(ref)
        k.report(tid, make_report(artifacts=(ref,), detail=f"detail of {tid}"))
    assert sum(a.reported for a in k.state.attempts.values()) == 4
    return k.state


@pytest.mark.parametrize("tag, form", [(b"fleet-snapshot-v2\n", _TupleForm), (b"fleet-snapshot-v3\n", _V3Form)])
def test_a_snapshot_of_an_earlier_format_still_loads_its_reports_packed(tag: bytes, form: type) -> None:
    state = _reported_state()
    out = io.BytesIO()
    out.write(tag)
    state_soft, state.soft = state.soft, type(state.soft)()
    form(out, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    state.soft = state_soft
    data = out.getvalue()
    assert b"coordinator.core.state\nAttemptState" in data or b"AttemptState" in data
    assert b"Report" in data  # the fixture really wrote Report records
    loaded = decode_state(data)
    assert durable_fingerprint(loaded) == durable_fingerprint(state)
    assert all(a.packed_report is None or type(a.packed_report) is bytes for a in loaded.attempts.values())
    assert [a.report for a in loaded.attempts.values()] == [a.report for a in state.attempts.values()]
    assert encode_state(state).startswith(FORMAT_TAG) and FORMAT_TAG == b"fleet-snapshot-v4\n"
    assert b"Report" not in encode_state(state)  # this build writes no Report record at all


def test_a_record_with_another_field_count_is_refused() -> None:
    @fast_pickle
    @dataclasses.dataclass(slots=True)
    class Two:
        a: int
        b: int

    obj = Two.__new__(Two)
    with pytest.raises(ValueError):
        obj.extend([1, 2, 3])  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        obj.extend([1])  # type: ignore[attr-defined]



def _fresh(value: float) -> float:
    return float(repr(value))  # a new object of the same value, as a decoder makes


def _reports(n: int) -> list[Report]:
    return [make_report(score=_fresh(float(i % 2)), cost_usd=_fresh(0.0) if i % 3 else _fresh(0.25),
                        artifacts=(ArtifactRef("".join(["l", "o", "g"]), _digest(i), i),))
            for i in range(6)]


def _shared(reports: list[Report]) -> tuple[int, int, int]:
    return (len({id(r.score) for r in reports}), len({id(r.cost_usd) for r in reports if r.cost_usd == 0.0}),
            len({id(r.artifacts[0].name) for r in reports}))


def _digest(i: int) -> str:
    return "".join(["sha256:", f"{i:064x}"])  # a new object each call


def test_canonical_fields_come_back_shared_from_a_snapshot_load_and_from_the_wire() -> None:
    reports = _reports(6)
    assert _shared(reports) == (6, 4, 6)  # the fixture really holds separate objects
    loaded = pickle.loads(pickle.dumps(reports, protocol=pickle.HIGHEST_PROTOCOL))
    to_proto, from_proto = report_codec(ValueError)
    decoded = [from_proto(to_proto(r)) for r in reports]
    for back in (loaded, decoded):
        assert back == reports
        assert _shared(back) == (2, 1, 1)
        assert back[0].score is canonical_float(_fresh(0.0)) and back[1].score is canonical_float(_fresh(1.0))
        assert back[3].cost_usd == 0.25


def test_a_canonical_float_keeps_every_other_value_as_it_is() -> None:
    negative_zero = canonical_float(-0.0)
    assert str(negative_zero) == "-0.0"
    assert canonical_float(None) is None
    assert canonical_float(0.5) == 0.5 and canonical_float(float("inf")) == float("inf")
    nan = float("nan")
    assert canonical_float(nan) is nan
    assert str(pickle.loads(pickle.dumps(make_report(score=-0.0))).score) == "-0.0"


def _packed(state: object) -> list[bytes]:
    return [a.packed_report for a in state.attempts.values() if a.reported]  # type: ignore[attr-defined]


def test_a_report_packs_to_the_same_bytes_live_replayed_and_loaded() -> None:
    """A report reaches the state three ways: from the worker's message (live), from its log
    record (replay, every string decoded anew), from a snapshot (recovery, the snapshot
    process). Each holds the same packed bytes, and each names an artifact its store's index
    holds; the snapshot holds no Report or ArtifactRef record."""
    from coordinator.logcodec import decode_record, encode_record
    from tests.unit.core_helpers import Core, artifact

    k = Core(make_spec(tasks=2, subjects=1))
    k.register("w1", slots=2)
    for tid in [t for aid in k.held("w1") for t in k.attempts_of(aid)]:
        ref, _ = artifact("log", data=f"the log of {tid}".encode())
        k.store(ref)
        k.report(tid, make_report(artifacts=(ref,), detail="".join(["exit ", "0"])))
    replayed = Core(submit=False)
    for i, cmd in enumerate(k.log):
        replayed.apply(decode_record(encode_record(i + 1, cmd))[1])
    data = encode_state(replayed.state)
    loaded = decode_state(data)
    live = _packed(k.state)
    assert len(live) == 2 and all(type(p) is bytes for p in live)
    assert _packed(replayed.state) == live and _packed(loaded) == live
    assert durable_fingerprint(loaded) == durable_fingerprint(replayed.state) == durable_fingerprint(k.state)
    for state in (k.state, replayed.state, loaded):
        refs = [a.report.artifacts[0] for a in state.attempts.values() if a.reported]
        assert all(r.digest in state.artifacts for r in refs)
    assert b"ArtifactRef" not in data and b"Report" not in data
