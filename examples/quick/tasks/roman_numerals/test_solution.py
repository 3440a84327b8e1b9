"""Tests for to_roman(n): additive digits, subtractive pairs, and the largest numeral."""
from solution import to_roman


def test_single_symbols():
    assert [to_roman(n) for n in (1, 5, 10, 50, 100, 500, 1000)] == ["I", "V", "X", "L", "C", "D", "M"]


def test_additive():
    assert to_roman(3) == "III"
    assert to_roman(27) == "XXVII"


def test_subtractive():
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"
    assert to_roman(40) == "XL"
    assert to_roman(900) == "CM"


def test_mixed():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(2024) == "MMXXIV"


def test_largest():
    assert to_roman(3999) == "MMMCMXCIX"
