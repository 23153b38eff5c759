"""Nesting depth and 64-bit integers, read from JSON text as orjson writes it and as a client sends it."""

from __future__ import annotations

import orjson
import pytest

from app.kit.json_limits import MAX_DEPTH, depth, inexact_integer, may_hold_inexact_integer, too_deep


def wrapped(levels: int) -> object:
    value: object = "x"
    for level in range(levels):
        value = [value] if level % 2 else {"k": value, "s": "]]}}"}
    return value


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 0), ("[{", 0), ([], 1), ({}, 1), ([[], {}], 2), ({"a": [{"b": []}]}, 4), ({"s": "[[[["}, 1)],
)
def test_depth_counts_arrays_and_objects_not_brackets_in_strings(value, expected):
    assert depth(orjson.dumps(value)) == expected


@pytest.mark.parametrize("levels", [0, 1, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 200, 254])
def test_too_deep_is_exact_at_the_limit(levels):
    compact = orjson.dumps(wrapped(levels))
    assert depth(compact) == levels
    assert too_deep(compact) is (levels > MAX_DEPTH)


def test_escaped_quotes_do_not_end_a_string():
    compact = orjson.dumps({"s": 'he said "[[[" and left', "a": [[1]]})
    assert depth(compact) == 3


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("18446744073709551615", None),  # 2**64 - 1: kept by orjson
        ("18446744073709551616", "18446744073709551616"),
        ("-9223372036854775808", None),
        ("-9223372036854775809", "-9223372036854775809"),
        ('{"a":[1,2,{"b":' + "9" * 30 + "}]}", "9" * 30),
        ('"' + "9" * 30 + '"', None),  # a string of digits is a string
        ('{"s":"x\\"' + "9" * 30 + '"}', None),  # after an escaped quote, still inside the string
        ("1." + "0" * 30, None),  # a fraction's digits
        ("1e" + "0" * 30 + "1", None),  # an exponent's digits
        ("[1.5, 12345678901234567890123]", "12345678901234567890123"),
    ],
)
def test_inexact_integer_finds_literals_beyond_64_bits(text, found):
    assert inexact_integer(text) == found


def test_the_filter_never_misses_what_orjson_turned_into_a_float():
    for literal in ("18446744073709551616", "-9223372036854775809", "1" + "0" * 300):
        assert may_hold_inexact_integer(orjson.dumps(orjson.loads(literal)))
    assert not may_hold_inexact_integer(orjson.dumps({"n": 18446744073709551615, "f": 1.5}))
