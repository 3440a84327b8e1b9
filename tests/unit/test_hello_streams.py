"""Goal: the edge tells a Hello delayed in a dead connection from a worker's newer stream
(Hello.stream, issue 26's blip under load); method: feed `HelloStreams.stale` the orders a
network can deliver Hellos in, from one worker process, from a restarted one, and from a
worker that does not number its streams."""
from __future__ import annotations

from coordinator.hellos import HelloStreams


def test_a_stream_not_above_the_highest_seen_from_the_same_process_is_stale() -> None:
    hellos = HelloStreams()
    assert hellos.stale("w1", 5, 1) == 0
    assert hellos.stale("w1", 5, 3) == 0  # streams 2 died unseen: a gap is normal
    assert hellos.stale("w1", 5, 2) == 3  # stream 2's Hello, retransmitted late
    assert hellos.stale("w1", 5, 3) == 3  # the same stream twice is no newer either
    assert hellos.stale("w1", 5, 4) == 0
    assert hellos.stale("w2", 5, 1) == 0  # another worker has its own numbers


def test_a_restarted_process_starts_again_at_1_and_its_predecessor_is_the_cores_to_refuse() -> None:
    hellos = HelloStreams()
    assert hellos.stale("w1", 5, 7) == 0
    assert hellos.stale("w1", 6, 1) == 0  # a new incarnation numbers its streams from 1
    assert hellos.stale("w1", 6, 1) == 1
    # The old process's late Hello is not this check's: the core refuses INCARNATION_STALE,
    # and it must not wind the record back to incarnation 5.
    assert hellos.stale("w1", 5, 9) == 0
    assert hellos.seen["w1"] == (6, 1)
    assert hellos.stale("w1", 6, 1) == 1


def test_an_unnumbered_hello_is_never_refused_nor_recorded() -> None:
    hellos = HelloStreams()
    assert hellos.stale("w1", 5, 0) == 0
    assert hellos.stale("w1", 5, 0) == 0
    assert "w1" not in hellos.seen
    assert hellos.stale("w1", 5, 2) == 0
    assert hellos.stale("w1", 5, 0) == 0  # an older worker's Hello after a numbered one
