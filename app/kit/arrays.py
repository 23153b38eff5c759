"""Integer arrays as bytes in a fixed byte order, whatever the machine's (``array`` uses the machine's)."""

from __future__ import annotations

import sys
from array import array
from typing import Literal

ByteOrder = Literal["little", "big"]


def to_bytes(column: array[int], byteorder: ByteOrder = "little") -> bytes:
    """``column``'s items as bytes in ``byteorder``."""
    if sys.byteorder != byteorder:
        column = array(column.typecode, column)
        column.byteswap()
    return column.tobytes()


def from_bytes(typecode: str, data: bytes, byteorder: ByteOrder = "little") -> array[int]:
    """The array of ``typecode`` whose items ``data`` holds in ``byteorder`` (a whole number of items)."""
    column = array(typecode)
    column.frombytes(data)
    if sys.byteorder != byteorder:
        column.byteswap()
    return column
