"""Tests for flatten(items): deep nesting, order, dropped Nones, an untouched input."""
from solution import flatten


def test_already_flat():
    assert flatten([1, 2, 3]) == [1, 2, 3]


def test_nested():
    assert flatten([1, [2, [3, [4]], 5]]) == [1, 2, 3, 4, 5]


def test_empty_lists_vanish():
    assert flatten([[], [[]], [[[]]]]) == []


def test_none_is_dropped():
    assert flatten([0, None, [1, None, [2]]]) == [0, 1, 2]


def test_strings_are_values():
    assert flatten(["ab", ["cd"]]) == ["ab", "cd"]


def test_input_is_not_modified():
    data = [1, [2, [3]]]
    flatten(data)
    assert data == [1, [2, [3]]]
