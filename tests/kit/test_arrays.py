"""Integer arrays as bytes in a fixed byte order (``app.kit.arrays``), checked against ``struct``."""

from __future__ import annotations

import struct
from array import array

import pytest

from app.kit.arrays import from_bytes, to_bytes


@pytest.mark.parametrize(("byteorder", "mark"), [("little", "<"), ("big", ">")])
@pytest.mark.parametrize(("typecode", "values"), [("i", [-1, 0, 7, 2**31 - 1]), ("q", [-(2**63), 1, 2**40])])
def test_bytes_are_struct_s_in_either_order_and_read_back(byteorder, mark, typecode, values) -> None:
    data = to_bytes(array(typecode, values), byteorder)
    assert data == struct.pack(f"{mark}{len(values)}{typecode}", *values)
    assert list(from_bytes(typecode, data, byteorder)) == values


def test_to_bytes_leaves_the_array_as_it_was() -> None:
    column = array("i", [1, 2])
    to_bytes(column, "big")
    assert list(column) == [1, 2]
