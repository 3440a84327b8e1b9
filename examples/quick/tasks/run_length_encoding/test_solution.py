"""Tests for encode/decode: run-length coding without counts of one, and a round trip."""
from solution import decode, encode


def test_encode_simple():
    assert encode("AABCCC") == "2AB3C"


def test_encode_empty_and_singles():
    assert encode("") == ""
    assert encode("XYZ") == "XYZ"


def test_encode_long_run_and_spaces():
    assert encode("  hsqq qww  ") == "2 hs2q q2w2 "
    assert encode("a" * 12 + "b") == "12ab"


def test_decode():
    assert decode("2AB3C") == "AABCCC"
    assert decode("12ab") == "a" * 12 + "b"


def test_round_trip():
    text = "zzz ZZ  zZ"
    assert decode(encode(text)) == text
