"""Limits on JSON values that a parser takes but a round trip would not keep: nesting depth and integers.

orjson reads 1,024 levels of nesting but writes only 254, and reads an integer beyond 64 bits as a float
(``18446744073709551616`` would come back as ``1.8446744073709552e+19``). Callers check what they parsed
with these functions, which work on orjson's compact output (``orjson.dumps``) and on the text as sent,
and cost almost nothing on ordinary values: each starts with a count or a search of bytes at C speed and
only looks closer at a value that could break a rule.
"""

from __future__ import annotations

import re

MAX_DEPTH = 64  # levels of arrays and objects inside one another; a scalar is at level 0

INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1

# Strings (escapes included) and what is left between them, in compact JSON.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS_ONLY = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")
# An integer literal of 19 digits or more, not part of a fraction or an exponent; or a string, skipped.
_LONG_INTEGER = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<![\w.+-])-?[0-9]{19,}(?![.eE0-9])')


def depth(compact: bytes) -> int:
    """The nesting depth of a compact JSON text (``orjson.dumps`` output): ``1`` → 0, ``[[]]`` → 2."""
    brackets = _STRING.sub(b"", compact).translate(None, _BRACKETS_ONLY)
    levels = 0
    while brackets:
        # One level per pass: the pattern matches only pairs that are innermost in the text as it was.
        brackets = _INNERMOST.sub(b"", brackets)
        levels += 1
    return levels


def too_deep(compact: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether a compact JSON text nests deeper than ``limit`` levels."""
    if compact.count(b"[") + compact.count(b"{") <= limit:  # too few brackets to nest that deep
        return False
    return depth(compact) > limit


def may_hold_inexact_integer(compact: bytes) -> bool:
    """Whether a parsed-and-rewritten value may hold an integer the parser turned into a float: orjson
    writes such a float with an exponent (``e+19``). False means it certainly holds none."""
    return b"e+" in compact


def inexact_integer(text: bytes | str) -> str | None:
    """The first integer literal in a JSON text that 64 bits cannot hold (beyond −2⁶³ … 2⁶⁴−1), or None."""
    raw = text.encode() if isinstance(text, str) else text
    for match in _LONG_INTEGER.finditer(raw):
        literal = match.group()
        if literal.startswith(b'"'):
            continue
        if not INT64_MIN <= int(literal) <= UINT64_MAX:
            return literal.decode()
    return None
