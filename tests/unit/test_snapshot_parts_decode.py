"""A snapshot decodes the same from its stored parts as from its bytes whole, whatever the part
size (the format tag may straddle parts), without the parts being joined: the list is emptied
as it is read. A wrong tag or a missing part is refused typed."""
from __future__ import annotations

import pytest

from coordinator.core.state import durable_fingerprint
from coordinator.snapshot import FORMAT_TAG, SnapshotFormatError, decode_state, encode_state
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
