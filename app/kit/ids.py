"""Prefixed resource ids: ``top_``, ``key_``, ``prj_``, ``usr_``, ``req_``, ``csr_``."""

from __future__ import annotations

import os
import random
import re

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def new_id(prefix: str, length: int = 16) -> str:
    """A random id with a product prefix, e.g. ``top_8xk2m9q4...``: ``length`` chars of base36."""
    # One urandom read, as an integer, spelled in base36: a fraction of ``secrets.choice`` per char.
    value = int.from_bytes(os.urandom(length), "big")
    chars = []
    for _ in range(length):
        value, digit = divmod(value, 36)
        chars.append(_BASE36[digit])
    return prefix + "_" + "".join(chars)


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def new_request_id() -> str:
    """``req_`` and 20 hex chars (80 random bits); on every request, so kept cheap."""
    # A correlation id, not a secret: ``random`` (reseeded after fork) rather than ``os.urandom``,
    # whose syscall gives up the GIL on every request, and the event loop then waits to take it back
    # from the log writer's thread.
    return f"req_{random.getrandbits(80):020x}"


def valid_request_id(value: str) -> bool:
    """An incoming ``X-Request-Id`` is echoed only if it is 1–128 chars of ``[A-Za-z0-9._-]``."""
    return bool(_REQUEST_ID.fullmatch(value))
