"""Verify the deliveries of a push group (Standard Webhooks signatures).

A push group POSTs each message to your URL, signed with the group's secret (``whsec_…``, answered once
by the config update that set ``push``, or by ``rotate_secret``)::

    from queuecore import webhooks

    @app.post("/hooks/queuecore")
    async def receive(request):
        body = await request.body()
        data = webhooks.verify(body, request.headers, secret)  # raises WebhookVerificationError
        ...

The signature is ``v1,<base64 HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>`` keyed by the
base64-decoded secret after ``whsec_``; during a rotation the ``webhook-signature`` header carries one
signature per secret, space-separated, and any one that matches is enough. A timestamp more than
``tolerance`` seconds from now is refused (replays).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Union

from ._exceptions import QueueCoreError

__all__ = ["DEFAULT_TOLERANCE", "WebhookVerificationError", "sign", "verify"]

DEFAULT_TOLERANCE = 300
"""Seconds a delivery's ``webhook-timestamp`` may be away from now (five minutes, as the spec's libraries)."""

_PREFIX = "whsec_"

Secrets = Union[str, bytes, Sequence[Union[str, bytes]]]


class WebhookVerificationError(QueueCoreError):
    """A delivery that is not signed by the secret (or too old, or missing a header)."""


def _key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        return secret
    try:
        return base64.b64decode(secret.removeprefix(_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the secret is not a whsec_… signing secret") from None


def _keys(secret: Secrets) -> list[bytes]:
    if isinstance(secret, (str, bytes)):
        return [_key(secret)]
    return [_key(s) for s in secret]


def sign(secret: str | bytes, message_id: str, timestamp: int, payload: bytes | str) -> str:
    """The ``v1,<base64>`` signature of ``payload`` sent as ``message_id`` at ``timestamp`` (unix seconds)."""
    body = payload.encode() if isinstance(payload, str) else payload
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if value is None:  # a plain dict with other capitalisation
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    if not value:
        raise WebhookVerificationError(f"missing the {name} header")
    return value


def verify(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: Secrets,
    *,
    tolerance: float | None = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> Any:
    """Check a delivery's signature and timestamp; answer its body parsed as JSON.

    ``secret``: the group's ``whsec_…`` secret (or several, while you switch to a rotated one).
    ``tolerance``: seconds the timestamp may differ from ``now``; ``None`` skips that check.
    Raises ``WebhookVerificationError`` otherwise."""
    body = payload.encode() if isinstance(payload, str) else payload
    message_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number of seconds") from None
    if tolerance is not None:
        current = time.time() if now is None else now
        if timestamp < current - tolerance:
            raise WebhookVerificationError("the delivery is too old (webhook-timestamp)")
        if timestamp > current + tolerance:
            raise WebhookVerificationError("the delivery is dated in the future (webhook-timestamp)")
    signed = f"{message_id}.{timestamp}.".encode() + body
    expected = [
        base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode() for key in _keys(secret)
    ]
    for entry in signatures.split(" "):
        version, _, value = entry.partition(",")
        if version != "v1":
            continue
        if any(hmac.compare_digest(value, want) for want in expected):
            try:
                return json.loads(body) if body else None
            except ValueError:
                return body
    raise WebhookVerificationError("no signature matches the secret")
