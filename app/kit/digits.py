"""Digits as the wire means them: ASCII ``0``-``9`` only."""

from __future__ import annotations


def is_ascii_digits(value: str) -> bool:
    """True when ``value`` is one or more ASCII digits (what ``int()`` reads as a plain non-negative number).

    ``str.isdigit`` alone is also True for superscripts and other scripts' digits: ``int("²")`` refuses
    it (a 500 where a 400 was due), and ``int("١")`` would read it as 1.
    """
    return value.isascii() and value.isdigit()
