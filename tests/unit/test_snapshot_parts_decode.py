"""A snapshot decodes the same from its stored parts as from its bytes whole, whatever the part
size (the format tag may straddle parts), without the parts being joined: the list is emptied
as it is read. A wrong tag or a missing part is refused typed."""
from __future__ import annotations

import io

import pytest

from coordinator.core.state import durable_fingerprint
from coordinator.snapshot import FORMAT_TAG, SnapshotFormatError, decode_state, encode_state, write_state
from tests.unit.core_helpers import Core, make_spec


def a_state_with_work():
    k = Core(make_spec(tasks=20, subjects=2))
    k.register("w1", slots=3)
    k.register("w2", slots=2)
    return k.state


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 5, len(FORMAT_TAG), 4_096, 1 << 20])
def test_parts_decode_to_the_state_the_whole_bytes_decode_to(size: int) -> None:
    data = encode_state(a_state_with_work())
    whole = durable_fingerprint(decode_state(data))
    parts = split(data, size)
    assert durable_fingerprint(decode_state(parts)) == whole
    assert parts == [], "every part was dropped once read"


def test_parts_of_another_format_are_refused_with_the_format_named() -> None:
    data = b"fleet-snapshot-v1\n" + encode_state(a_state_with_work())[len(FORMAT_TAG):]
    with pytest.raises(SnapshotFormatError, match="fleet-snapshot-v1"):
        decode_state(split(data, 3))


def test_a_missing_part_is_refused_not_folded() -> None:
    parts = split(encode_state(a_state_with_work()), 256)
    del parts[len(parts) // 2]
    with pytest.raises(SnapshotFormatError, match="does not decode"):
        decode_state(parts)


def test_a_snapshot_whose_soft_part_lacks_fields_of_this_build_decodes() -> None:
    """A snapshot written by a build whose `Soft` had fewer fields: the slots this build added
    are absent on load. Soft is never durable, so recovery starts it afresh."""
    import pickle

    from coordinator.core.state import Soft

    state = a_state_with_work()
    whole = durable_fingerprint(state)
    state.soft = object.__new__(Soft)  # every slot unset, as an older build's Soft lacks the new ones
    data = FORMAT_TAG + pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    loaded = decode_state(split(data, 4_096))
    assert loaded.soft.free_stamp == {} and loaded.soft.last_heard_ms == {}
    assert durable_fingerprint(loaded) == whole


def test_a_snapshot_whose_soft_part_has_fields_this_build_removed_decodes() -> None:
    """A snapshot written by a build whose `Soft` had a field this one removed (`tick_version`,
    until 7ca8293): unpickling it set the missing slot and failed, so the coordinator refused
    to start on an older data dir (found by `./dev local` on the last session's `.fleet`)."""
    import copyreg
    import io
    import pickle

    from coordinator.core.state import Soft

    class OlderBuild(pickle.Pickler):
        def reducer_override(self, obj):  # noqa: ANN001, ANN202
            if type(obj) is Soft:
                slots = {name: getattr(obj, name) for name in Soft.__slots__}
                slots["tick_version"] = -1
                return copyreg.__newobj__, (Soft,), (None, slots)
            return NotImplemented

    state = a_state_with_work()
    whole = durable_fingerprint(state)
    out = io.BytesIO()
    OlderBuild(out, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    loaded = decode_state(split(FORMAT_TAG + out.getvalue(), 4_096))
    assert durable_fingerprint(loaded) == whole and loaded.soft.tick_due_ms == 0


def test_soft_state_survives_a_copy_with_its_values() -> None:
    import copy

    from coordinator.core.state import Soft

    soft = Soft(tick_due_ms=9)
    soft.last_heard_ms["w1"] = 3
    again = copy.deepcopy(soft)
    assert again == soft and again.last_heard_ms is not soft.last_heard_ms


def test_the_streamed_encoding_is_the_encoding_byte_for_byte() -> None:
    state = a_state_with_work()
    out = io.BytesIO()
    write_state(out, state)
    assert out.getvalue() == encode_state(state)
    assert durable_fingerprint(decode_state(out.getvalue())) == durable_fingerprint(state)


def test_parts_drawn_from_an_iterator_decode_like_a_list() -> None:
    data = encode_state(a_state_with_work())
    assert durable_fingerprint(decode_state(iter(split(data, 1_000)))) == durable_fingerprint(decode_state(data))
