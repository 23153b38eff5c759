"""Secrets at rest, sealed with AES-256-GCM under a key derived from the server secret.

A stored secret that QueueCore must use in clear later (an alert endpoint's signing secret: it signs with
it) is kept *sealed*::

    sealed:v1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>

The key is HKDF-SHA256 of ``QUEUECORE_SECRET_KEY`` (info ``queuecore/sealing/v1``); the key id is the first
8 hex digits of SHA-256 of that key, so a value names the key that sealed it. ``open`` tries the current
key and the previous one (``QUEUECORE_SECRET_KEY_PREVIOUS``, during a rotation); a value with no prefix is
a secret stored before sealing existed and opens as itself. ``stale`` says whether a value should be
sealed again under the current key (clear, or sealed under the previous one): the server does so at start.
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_PREFIX = "sealed:v1:"
_INFO = b"queuecore/sealing/v1"
_NONCE = 12


class SealError(Exception):
    """A sealed value that no known key opens (wrong server secret, or tampered with)."""


def _derive(secret: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret)


def _key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class Sealer:
    """Seals with the current key; opens with the current or the previous one."""

    def __init__(self, secret: bytes, previous: bytes | None = None) -> None:
        current = _derive(secret)
        self._current_id = _key_id(current)
        self._keys = {self._current_id: AESGCM(current)}
        if previous:
            old = _derive(previous)
            self._keys.setdefault(_key_id(old), AESGCM(old))

    def seal(self, value: str) -> str:
        nonce = os.urandom(_NONCE)
        box = self._keys[self._current_id].encrypt(nonce, value.encode(), _PREFIX.encode())
        return f"{_PREFIX}{self._current_id}:{base64.urlsafe_b64encode(nonce + box).decode()}"

    def open(self, stored: str) -> str:
        if not stored.startswith(_PREFIX):
            return stored  # kept before sealing existed
        key_id, _, data = stored[len(_PREFIX) :].partition(":")
        aead = self._keys.get(key_id)
        if aead is None:
            raise SealError(f"no key with id {key_id} (is QUEUECORE_SECRET_KEY the one it was sealed with?)")
        raw = base64.urlsafe_b64decode(data.encode())
        try:
            return aead.decrypt(raw[:_NONCE], raw[_NONCE:], _PREFIX.encode()).decode()
        except Exception as exc:  # InvalidTag: tampered, or a key id collision
            raise SealError("a sealed value does not open with its key") from exc

    def stale(self, stored: str) -> bool:
        """Clear, or sealed under another key than the current one."""
        return not stored.startswith(f"{_PREFIX}{self._current_id}:")
