"""The pump's in-memory page (`worker.session._fresh_page`) against the outbox read it stands
in for: whatever the stream's `fresh` holds (any subset of the pending entries, in any order,
with entries the outbox already handed over), the pump delivers exactly the pending entries,
each once, in seq order, as it does reading the outbox alone."""
from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from common.ids import AssignmentId, AttemptId
from worker.outbox import OutboxEntry
from worker.session import _fresh_page


def entry(seq: int) -> OutboxEntry:
    return OutboxEntry(seq, AttemptId(f"a{seq}"), AssignmentId("g"), b"p", (), fresh=True)


def pump(pending: list[int], fresh: list[int], limit: int) -> list[int]:
    """The pump's loop with nothing new put meanwhile: a page from `fresh`, else the outbox."""
    outbox = sorted(pending)
    queue = deque(entry(s) for s in fresh)
    cursor, delivered = 0, []
    for _ in range(2 * len(outbox) + 2):
        page = _fresh_page(queue, cursor, limit) or [entry(s) for s in outbox if s > cursor][:limit]
        if not page:
            break
        for e in page:
            delivered.append(e.seq)
            cursor = e.seq
    return delivered


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_pending_entry_once_in_order_whatever_fresh_holds(data) -> None:
    pending = data.draw(st.lists(st.integers(1, 60), unique=True, max_size=25))
    # fresh holds only pending entries (an entry put on this stream is delivered by its pump
    # alone), in an order close to the puts' but not always, with repeats of what was taken
    fresh = data.draw(st.lists(st.sampled_from(pending), max_size=30)) if pending else []
    limit = data.draw(st.integers(1, 8))
    assert pump(pending, fresh, limit) == sorted(pending)


def test_a_gap_at_the_head_falls_back_to_the_outbox() -> None:
    # seq 3 was put another way (a new epoch's re-offer, a put with files returning late):
    # fresh holds 4 and 5 only, and the pump must read 3 from the outbox before taking them.
    q = deque([entry(4), entry(5)])
    assert _fresh_page(q, 2, 10) == []
    assert [e.seq for e in _fresh_page(q, 3, 10)] == [4, 5]
    assert not q


def test_entries_already_read_from_the_outbox_are_dropped_and_the_limit_holds() -> None:
    q = deque(entry(s) for s in (1, 2, 3, 4, 5, 6))
    assert [e.seq for e in _fresh_page(q, 2, 3)] == [3, 4, 5]
    assert [e.seq for e in q] == [6]
