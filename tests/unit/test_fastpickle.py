"""common/fastpickle.py: every record class round-trips through pickle, copy and deepcopy equal
to itself (frozen ones too, one-field ones too); a record is written as a bare object and its
fields as list items, never as a tuple, which pickle's memo would keep alive until the dump
ends; a snapshot written in the earlier tuple form (format v2) still loads; a record whose
field count differs from the class's is refused, not half set; and the fields a class names
canonical (a report's 0.0 and 1.0, an artifact's name) come back as the one shared object, from
a snapshot's load as from the wire's decode, with every other value (-0.0 too) as it was."""
from __future__ import annotations

import copy
import dataclasses
import io
import pickle
import pickletools

import pytest

from common.evidence import ArtifactRef, ArtifactUnavailable, Report
from common.fastpickle import canonical_float, canonical_str, fast_pickle
from common.reportwire import report_codec
from common.spec import Task
from coordinator.core.state import AttemptState, CellState, durable_fingerprint
from coordinator.snapshot import FORMAT_TAG, decode_state, encode_state
from tests.unit.core_helpers import make_report, make_spec
from tests.unit.test_snapshot_parts_decode import a_state_with_work

RECORDS = [
    CellState("c1", 7, "s1", ["a1", "a2"], "a2", 1, 0, 0),
    AttemptState("a1", "r1", "c1", "g1", 2, "w1", 300, 1_733_000_000_123, make_report(), 1_733_000_000_999),
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


class _TupleForm(pickle.Pickler):
    """Writes every record as the v2 builds did: (the class, its fields as a tuple)."""

    def reducer_override(self, obj: object) -> object:
        if dataclasses.is_dataclass(obj) and hasattr(type(obj), "extend"):
            return type(obj), tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))
        return NotImplemented


def test_a_v2_snapshot_of_the_tuple_form_still_loads() -> None:
    state = a_state_with_work()
    out = io.BytesIO()
    out.write(b"fleet-snapshot-v2\n")
    state_soft, state.soft = state.soft, type(state.soft)()
    _TupleForm(out, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    state.soft = state_soft
    assert b"fleet-snapshot-v3" not in out.getvalue()
    assert durable_fingerprint(decode_state(out.getvalue())) == durable_fingerprint(state)
    assert encode_state(state).startswith(FORMAT_TAG) and FORMAT_TAG == b"fleet-snapshot-v3\n"


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
        # a digest is one object however many records decoded it: the store's index of
        # artifacts (the core interns the one it records) and every report naming it
        assert all(r.artifacts[0].digest is canonical_str(_digest(i)) for i, r in enumerate(back))


def test_a_canonical_float_keeps_every_other_value_as_it_is() -> None:
    negative_zero = canonical_float(-0.0)
    assert str(negative_zero) == "-0.0"
    assert canonical_float(None) is None
    assert canonical_float(0.5) == 0.5 and canonical_float(float("inf")) == float("inf")
    nan = float("nan")
    assert canonical_float(nan) is nan
    assert str(pickle.loads(pickle.dumps(make_report(score=-0.0))).score) == "-0.0"


def _replayed_and_its_snapshot() -> tuple[str, bytes]:
    """A core's log encoded, decoded (every string decoded anew) and replayed; the replayed
    state's fingerprint, checked against the original, and its snapshot's bytes."""
    from coordinator.logcodec import decode_record, encode_record
    from coordinator.snapshot import encode_state
    from tests.unit.core_helpers import Core, artifact

    k = Core(make_spec(tasks=2, subjects=1))
    k.register("w1", slots=2)
    for tid in [t for aid in k.held("w1") for t in k.attempts_of(aid)]:
        ref, _ = artifact("log", data=f"the log of {tid}".encode())
        k.store(ref)
        k.report(tid, make_report(artifacts=(ref,)))
    replayed = Core(submit=False)
    for i, cmd in enumerate(k.log):
        replayed.apply(decode_record(encode_record(i + 1, cmd))[1])
    assert durable_fingerprint(replayed.state) == durable_fingerprint(k.state)
    _assert_each_digest_once(replayed.state)
    return durable_fingerprint(replayed.state), encode_state(replayed.state)


def _assert_each_digest_once(state: object) -> None:
    keys = {d: d for d in state.artifacts}  # type: ignore[attr-defined]
    refs = [a.report.artifacts[0] for a in state.attempts.values() if a.report is not None]  # type: ignore[attr-defined]
    assert len(refs) == 2 and len(keys) == 2
    assert all(keys[r.digest] is r.digest for r in refs)


def test_a_replayed_log_and_its_snapshot_hold_each_digest_once() -> None:
    """An artifact's digest arrives twice, in its upload's record and in the report's: after a
    replay of the encoded log, and after its snapshot is loaded where nothing else holds those
    digests (recovery, the snapshot process: a process of their own), the store's index of
    artifacts and the report hold one object (120 bytes a report at a million cells)."""
    from coordinator.snapshot import decode_state

    fingerprint, data = _replayed_and_its_snapshot()
    loaded = decode_state(data)
    assert durable_fingerprint(loaded) == fingerprint
    _assert_each_digest_once(loaded)
