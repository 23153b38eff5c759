"""Prefixed resource ids: ``top_``, ``key_``, ``prj_``, ``usr_``, ``req_``, ``csr_``."""

from __future__ import annotations

import re
import secrets

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def new_id(prefix: str, length: int = 16) -> str:
    """A random id with a product prefix, e.g. ``top_8xk2m9q4...``."""
    return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def new_request_id() -> str:
    return new_id("req", 16)


def valid_request_id(value: str) -> bool:
    """An incoming ``X-Request-Id`` is echoed only if it is 1–128 chars of ``[A-Za-z0-9._-]``."""
    return bool(_REQUEST_ID.match(value))
