"""common/fastpickle.py: every record class round-trips through pickle, copy and deepcopy equal
to itself (frozen ones too, one-field ones too); a record is written as a bare object and its
fields as list items, never as a tuple, which pickle's memo would keep alive until the dump
ends; a snapshot written in the earlier tuple form (format v2) still loads; and a record whose
field count differs from the class's is refused, not half set."""
from __future__ import annotations

import copy
import dataclasses
import io
import pickle
import pickletools

import pytest

from common.evidence import ArtifactUnavailable
from common.fastpickle import fast_pickle
from common.spec import Task
from coordinator.core.state import AttemptState, CellState, durable_fingerprint
from coordinator.snapshot import FORMAT_TAG, decode_state, encode_state
from tests.unit.core_helpers import make_report
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

