"""Message ids that say where a message lives, so a lookup by id needs no index.

``msg_`` + URL-safe base64 (unpadded) of: the topic id's 16 base36 characters as an 11-byte integer,
then the partition and the offset as unsigned LEB128 varints (e.g. ``msg_AH7xk2m9q4Rb0wLgAuZz``). A topic's messages have ids that only
that topic can decode back to itself; anything else is a malformed id (400), not a missing one.
"""

from __future__ import annotations

import base64
import binascii
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from app.broker.errors import InvalidRequest

_TOPIC_BYTES = 11


@dataclass(frozen=True, slots=True)
class MessageLocation:
    topic_id: str
    partition: int
    offset: int


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def topic_prefix(topic_id: str) -> bytes:
    return int(topic_id.removeprefix("top_"), 36).to_bytes(_TOPIC_BYTES, "big")


def partition_prefix(topic_id: str, partition: int, *, prefix: bytes | None = None) -> bytes:
    """The bytes every id of one partition starts with (for encoding many ids of it)."""
    return (prefix or topic_prefix(topic_id)) + _varint(partition)


def encode(
    topic_id: str, partition: int, offset: int, *, prefix: bytes | None = None, head: bytes | None = None
) -> str:
    """The id of the message at ``offset`` of ``partition``; ``prefix`` (the topic's) or ``head`` (the
    partition's, from ``partition_prefix``) skip re-deriving what many ids share."""
    raw = (head or partition_prefix(topic_id, partition, prefix=prefix)) + _varint(offset)
    # urlsafe_b64encode is C all the way (b32encode is pure Python): this runs once per message.
    return "msg_" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def encode_run(
    topic_id: str, partition: int, first: int, count: int, *, prefix: bytes | None = None
) -> list[bytes]:
    """The ids of ``count`` consecutive offsets of one partition from ``first`` (what ``encode`` says of
    each, as ASCII bytes), for a batch's answer, without a base64 call per id (``_runs``)."""
    head = partition_prefix(topic_id, partition, prefix=prefix)
    if count == 1:  # one id: laying out a run costs more than it saves
        return [("msg_" + base64.urlsafe_b64encode(head + _varint(first)).rstrip(b"=").decode()).encode()]
    ids: list[bytes] = []
    for run, laid, width in _runs(head, first, count):
        ids += [laid[at : at + width] for at in range(0, run * width, width)]
    return ids


def encode_run_column(
    topic_id: str, partition: int, first: int, count: int, *, prefix: bytes | None = None
) -> tuple[bytes, array[int]]:
    """``encode_run``'s ids laid end to end, and the length of each: a bulk read's column of ids, made with
    no object per id."""
    head = partition_prefix(topic_id, partition, prefix=prefix)
    pieces: list[bytes] = []
    lengths = array("i")
    for run, laid, width in _runs(head, first, count):
        pieces.append(laid)
        lengths += array("i", [width]) * run
    return b"".join(pieces), lengths


# Three bytes whose base64 is "msg_": laid before each raw id, the run's base64 has the ids' prefix in place.
_MSG = base64.urlsafe_b64decode(b"msg_")


def _runs(head: bytes, first: int, count: int) -> Iterator[tuple[int, bytes, int]]:
    """The ids of offsets ``first`` … ``first + count - 1`` by runs of one id length, each as ``(ids in the
    run, the run's ids laid end to end, characters per id)``.

    An offset's varint is its low 7 bits and the varint of the rest, and the rest is the same for 128
    offsets in a row: within such a run every raw id is ``head + low byte + upper``, of one length. Each
    is padded with zero bytes to a multiple of 3 and preceded by ``_MSG``, so that the base64 of the run's
    raw ids laid end to end is their ids end to end, each followed by the characters of its padding; the raw
    ids are laid out by one slice assignment (only the low byte differs) and encoded by one call. Base64 of
    the bytes before zero padding is the same characters, as many as the bytes need: the padding's
    characters are overwritten with zero bytes (never a base64 character), by one slice assignment per
    character, and deleted by one ``translate``."""
    offset, end = first, first + count
    while offset < end:
        if offset < 0x80:
            stop, upper, mark = min(end, 0x80), b"", 0
        else:
            stop, upper, mark = min(end, (offset | 0x7F) + 1), _varint(offset >> 7), 0x80
        size = len(head) + 1 + len(upper)
        padded = size + (-size % 3)
        run = stop - offset
        raw = bytearray((_MSG + head + b"\0" + upper + bytes(padded - size)) * run)
        low = mark | (offset & 0x7F)
        raw[3 + len(head) :: 3 + padded] = bytes(range(low, low + run))
        encoded = bytearray(base64.urlsafe_b64encode(raw))
        width, keep = 4 + padded // 3 * 4, 4 + -(-size * 4 // 3)
        if keep < width:
            for at in range(keep, width):
                encoded[at::width] = bytes(run)
            encoded = encoded.translate(None, b"\0")
        yield run, bytes(encoded), keep
        offset = stop


def decode(message_id: str) -> MessageLocation:
    """Where a message lives; ``InvalidRequest`` for anything that is not one of our ids."""
    try:
        if not message_id.startswith("msg_") or len(message_id) > 64:
            raise ValueError("prefix")
        body = message_id[4:]
        if not body.isascii() or "=" in body:
            raise ValueError("alphabet")
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != body:
            raise ValueError("not canonical")
        topic = int.from_bytes(raw[:_TOPIC_BYTES], "big")
        partition, pos = _read_varint(raw, _TOPIC_BYTES)
        offset, pos = _read_varint(raw, pos)
        if pos != len(raw) or len(raw) <= _TOPIC_BYTES:
            raise ValueError("trailing bytes")
    except (ValueError, binascii.Error):
        raise InvalidRequest.field("messageId", "not a message id issued by QueueCore") from None
    return MessageLocation(_topic_id(topic), partition, offset)


@lru_cache(maxsize=4096)
def _topic_id(value: int) -> str:
    # An ack decodes up to 1,000 ids of one topic: spell its id once.
    return "top_" + _base36(value).rjust(16, "0")


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
    return out or "0"
