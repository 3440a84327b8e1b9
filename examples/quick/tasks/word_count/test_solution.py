"""Tests for word_count(text): lower-cased words with apostrophes, punctuation as separators."""
from solution import word_count


def test_one_word():
    assert word_count("word") == {"word": 1}


def test_repeats_and_case():
    assert word_count("One fish two Fish") == {"one": 1, "fish": 2, "two": 1}


def test_punctuation_separates():
    assert word_count("car: carpet as java: javascript!!&@$%^&") == {
        "car": 1, "carpet": 1, "as": 1, "java": 1, "javascript": 1}


def test_contractions_and_quotes():
    assert word_count("'Joe can't tell' between 'large' and large.") == {
        "joe": 1, "can't": 1, "tell": 1, "between": 1, "large": 2, "and": 1}


def test_empty():
    assert word_count("") == {}
