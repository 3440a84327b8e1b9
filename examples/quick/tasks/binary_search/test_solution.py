"""Tests for binary_search(items, target): ends, middle, absent values, edge sizes."""
from solution import binary_search


def test_middle():
    assert binary_search([1, 3, 5, 7, 9], 5) == 2


def test_first_and_last():
    items = [2, 4, 6, 8, 10, 12]
    assert binary_search(items, 2) == 0
    assert binary_search(items, 12) == 5


def test_absent():
    items = [1, 3, 5, 7]
    assert binary_search(items, 0) == -1
    assert binary_search(items, 4) == -1
    assert binary_search(items, 8) == -1


def test_empty_and_single():
    assert binary_search([], 1) == -1
    assert binary_search([6], 6) == 0


def test_large():
    items = list(range(0, 2_000_000, 2))
    assert binary_search(items, 1_234_566) == 617_283
    assert binary_search(items, 1_234_567) == -1
