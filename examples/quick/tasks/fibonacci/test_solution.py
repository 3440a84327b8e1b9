"""Tests for fibonacci(n): small values, a large n that rules out naive recursion, and errors."""
from solution import fibonacci


def test_base_cases():
    assert fibonacci(0) == 0
    assert fibonacci(1) == 1


def test_first_ten():
    assert [fibonacci(i) for i in range(10)] == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]


def test_large_n_is_fast():
    assert fibonacci(90) == 2880067194370816120
    assert fibonacci(300) % 1_000_000 == 979600


def test_negative_raises():
    try:
        fibonacci(-1)
    except ValueError:
        return
    raise AssertionError("fibonacci(-1) did not raise ValueError")
