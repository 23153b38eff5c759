"""``is_ascii_digits``: the one test of "a plain number" in requests and forms."""

from __future__ import annotations

import pytest

from app.kit.digits import is_ascii_digits


@pytest.mark.parametrize("value", ["0", "7", "1732406400000", "007"])
def test_ascii_digits_are_digits(value):
    assert is_ascii_digits(value)


@pytest.mark.parametrize("value", ["", "²", "١٢", "12²", "-1", "+1", " 1", "1_000", "1.5", "0x1f", "١"])
def test_anything_else_is_not(value):
    assert not is_ascii_digits(value)
