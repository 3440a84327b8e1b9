"""Tests for find_anagrams(word, candidates): case-insensitive, order kept, the word itself excluded."""
from solution import find_anagrams


def test_none():
    assert find_anagrams("diaper", ["hello", "world", "zombies", "pants"]) == []


def test_several_in_order():
    assert find_anagrams("listen", ["enlists", "google", "inlets", "banana", "silent"]) == ["inlets", "silent"]


def test_case_insensitive():
    assert find_anagrams("Orchestra", ["cashregister", "Carthorse", "radishes"]) == ["Carthorse"]


def test_same_word_is_not_an_anagram():
    assert find_anagrams("BANANA", ["Banana", "banana"]) == []


def test_letter_counts_matter():
    assert find_anagrams("galea", ["eagle"]) == []
