"""Standard Webhooks signatures (standard-webhooks/standard-webhooks ``spec/standard-webhooks.md``).

A secret is ``whsec_`` + base64 of random bytes; the signing key is those bytes. A delivery's signature is
``v1,<base64 HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>``; with several secrets in
force (a rotation) the ``webhook-signature`` header holds one per secret, separated by spaces.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Iterable

PREFIX = "whsec_"
_KEY_BYTES = 24


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` + base64 of 24 random bytes."""
    return PREFIX + base64.b64encode(os.urandom(_KEY_BYTES)).decode()


def key_of(secret: str) -> bytes:
    """The HMAC key a secret stands for (the base64 after ``whsec_``)."""
    return base64.b64decode(secret.removeprefix(PREFIX))


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``body`` sent as ``message_id`` at ``timestamp`` (unix seconds)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def header(keys: Iterable[bytes], message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: one signature per key, space-separated."""
    return " ".join(signature(key, message_id, timestamp, body) for key in keys)
