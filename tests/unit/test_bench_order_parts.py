"""tools/bench/order.py's reading of a run's attempts: a refill's gap and a group's span over
its sleep, on attempts laid out by hand (the bench itself needs real daemons and a minute)."""
from __future__ import annotations

from types import SimpleNamespace

from tools.bench.order import SLOTS, group_spans_ms, refill_parts_ms


def attempt(group: str, worker: str, task: int, start: int, end: int, dispatched: int = 0) -> SimpleNamespace:
    return SimpleNamespace(assignment_id=group, worker_id=worker, task_id=f"t{task:02d}", started_ms=start,
                           finished_ms=end, dispatched_ms=dispatched)


def test_a_group_s_span_over_its_sleep_and_each_worker_s_last_end() -> None:
    ds = [0.100, 0.050]
    attempts = [attempt("g1", "w1", 0, 1000, 1101), attempt("g1", "w1", 0, 1001, 1103),  # 103 ms for 100
                attempt("g2", "w2", 1, 2000, 2050), attempt("g2", "w2", 1, 2000, 2051),  # 51 ms for 50
                attempt("g3", "w2", 1, 0, 0)]  # never started: not counted
    spans, ends = group_spans_ms(attempts, ds)
    assert sorted(spans) == [1.0, 3.0]
    assert ends == {"w1": 1103, "w2": 2051}


def test_a_refill_is_the_next_group_s_start_less_the_slot_s_last_end() -> None:
    # One worker: its first SLOTS groups start at once; the next starts 6 ms after the first
    # of them ended, 2 ms after its dispatch.
    attempts = [attempt(f"g{i}", "w1", 0, 1000, 1100 + 10 * i) for i in range(SLOTS)]
    attempts.append(attempt("gn", "w1", 0, 1106, 1200, dispatched=1104))
    assert refill_parts_ms(attempts) == [(6, 2)]
