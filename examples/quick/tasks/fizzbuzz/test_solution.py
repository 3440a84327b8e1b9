"""Tests for fizzbuzz(n): the classic 1..n sequence of numbers, Fizz, Buzz and FizzBuzz."""
from solution import fizzbuzz


def test_first_five():
    assert fizzbuzz(5) == ["1", "2", "Fizz", "4", "Buzz"]


def test_zero_is_empty():
    assert fizzbuzz(0) == []


def test_fifteen_is_fizzbuzz():
    assert fizzbuzz(15)[-1] == "FizzBuzz"


def test_thirty_entries():
    out = fizzbuzz(30)
    assert len(out) == 30
    assert out.count("FizzBuzz") == 2
    assert out.count("Fizz") == 8
    assert out.count("Buzz") == 4
