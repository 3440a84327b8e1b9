"""Tests for reverse_words(text): word order reversed, whitespace normalised to single spaces."""
from solution import reverse_words


def test_two_words():
    assert reverse_words("hello world") == "world hello"


def test_one_word():
    assert reverse_words("fleet") == "fleet"


def test_empty_and_blank():
    assert reverse_words("") == ""
    assert reverse_words("   ") == ""


def test_whitespace_is_collapsed():
    assert reverse_words("  the quick\tbrown  fox ") == "fox brown quick the"


def test_punctuation_stays_with_its_word():
    assert reverse_words("Hello, world!") == "world! Hello,"
