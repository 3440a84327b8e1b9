"""Tests for is_palindrome(text): case and non-alphanumerics ignored."""
from solution import is_palindrome


def test_simple():
    assert is_palindrome("racecar")
    assert not is_palindrome("racecars")


def test_empty_and_single():
    assert is_palindrome("")
    assert is_palindrome("x")


def test_case_is_ignored():
    assert is_palindrome("Level")


def test_punctuation_and_spaces_are_ignored():
    assert is_palindrome("A man, a plan, a canal: Panama!")
    assert not is_palindrome("A man, a plan, a canal: Panamax")


def test_digits_count():
    assert is_palindrome("12 21")
    assert not is_palindrome("12 31")
