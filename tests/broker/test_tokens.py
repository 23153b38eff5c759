"""WebSocket tokens (``app.broker.tokens``): short-lived JWTs standing in for an API key.

What must hold of ``issue`` and ``verify``: a token carries its key, project, environment, topic and
group and verifies back to exactly those; it lives at most five minutes whatever is asked; it is signed
with a key derived from the server secret, never the secret itself; and ``verify`` answers None (never
raises) for anything else: another secret, a changed payload, another algorithm or audience, an expired
token (no leeway), or a token missing a claim.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

import jwt
import pytest

from app.broker import tokens

SECRET = b"server-secret-for-token-tests-9f3kQ"
OTHER_SECRET = b"another-servers-secret-Zr81pW"
DERIVED = hmac.new(SECRET, b"queuecore websocket token", hashlib.sha256).digest()


def issue(**overrides: Any) -> tokens.IssuedToken:
    values: dict[str, Any] = {
        "key_id": "key_123",
        "project_id": "prj_456",
        "environment": "production",
        "topic_id": "top_789",
        "topic": "orders",
        "group": "billing",
    }
    values.update(overrides)
    return tokens.issue(SECRET, **values)


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


def signed(claims: dict[str, Any], key: bytes = DERIVED, algorithm: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=algorithm)


def valid_claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": "key_123",
        "prj": "prj_456",
        "env": "production",
        "tid": "top_789",
        "topic": "orders",
        "aud": tokens.AUDIENCE,
        "iat": now,
        "exp": now + 60,
    }
    claims.update(overrides)
    return claims


class TestIssue:
    def test_a_token_verifies_back_to_its_key_project_topic_and_group(self) -> None:
        issued = issue()
        assert tokens.verify(SECRET, issued.token) == tokens.TokenClaims(
            key_id="key_123",
            project_id="prj_456",
            environment="production",
            topic_id="top_789",
            topic="orders",
            group="billing",
        )

    def test_a_token_not_bound_to_a_group_says_so(self) -> None:
        issued = issue(group=None)
        assert "grp" not in claims_of(issued.token)
        claims = tokens.verify(SECRET, issued.token)
        assert claims is not None and claims.group is None and claims.topic == "orders"

    def test_a_token_lives_as_long_as_asked_up_to_five_minutes(self) -> None:
        for asked, lives in ((30, 30), (300, 300), (3600, 300)):
            issued = issue(ttl_seconds=asked)
            claims = claims_of(issued.token)
            assert claims["exp"] - claims["iat"] == lives
            assert issued.expires_at_ms == claims["exp"] * 1000

    def test_a_token_is_for_the_websocket_audience_and_signed_with_hs256(self) -> None:
        token = issue().token
        assert jwt.get_unverified_header(token)["alg"] == "HS256"
        assert claims_of(token)["aud"] == "queuecore:websocket"

    def test_a_token_is_signed_with_a_key_derived_from_the_secret_never_the_secret_itself(self) -> None:
        token = issue().token
        jwt.decode(token, DERIVED, algorithms=["HS256"], audience=tokens.AUDIENCE)
        with pytest.raises(jwt.InvalidSignatureError):
            jwt.decode(token, SECRET, algorithms=["HS256"], audience=tokens.AUDIENCE)


class TestVerify:
    def test_a_token_of_another_servers_secret_is_refused(self) -> None:
        assert tokens.verify(OTHER_SECRET, issue().token) is None

    def test_a_token_signed_with_the_raw_secret_is_refused(self) -> None:
        assert tokens.verify(SECRET, signed(valid_claims(), key=SECRET)) is None

    def test_a_token_with_a_changed_payload_is_refused(self) -> None:
        header, _, signature = issue().token.split(".")
        forged = jwt.encode(valid_claims(tid="top_someone_elses"), b"whatever", algorithm="HS256")
        assert tokens.verify(SECRET, f"{header}.{forged.split('.')[1]}.{signature}") is None

    def test_an_expired_token_is_refused_without_leeway(self) -> None:
        now = int(time.time())
        assert tokens.verify(SECRET, signed(valid_claims(iat=now - 120, exp=now + 60))) is not None
        assert tokens.verify(SECRET, signed(valid_claims(iat=now - 120, exp=now - 1))) is None

    def test_a_token_for_another_audience_is_refused(self) -> None:
        assert tokens.verify(SECRET, signed(valid_claims(aud="queuecore:dashboard"))) is None
        assert tokens.verify(SECRET, signed({k: v for k, v in valid_claims().items() if k != "aud"})) is None

    @pytest.mark.parametrize("algorithm", ["HS512", "HS384"])
    def test_a_token_signed_with_another_algorithm_is_refused(self, algorithm: str) -> None:
        assert tokens.verify(SECRET, signed(valid_claims(), algorithm=algorithm)) is None

    def test_an_unsigned_token_is_refused(self) -> None:
        assert tokens.verify(SECRET, jwt.encode(valid_claims(), None, algorithm="none")) is None

    @pytest.mark.parametrize("claim", ["exp", "iat", "sub", "prj", "env", "tid", "topic"])
    def test_a_token_missing_a_claim_is_refused(self, claim: str) -> None:
        claims = valid_claims()
        del claims[claim]
        assert tokens.verify(SECRET, signed(claims)) is None

    @pytest.mark.parametrize("garbage", ["", "not-a-jwt", "a.b.c", "..."])
    def test_anything_that_is_not_a_token_is_refused_without_raising(self, garbage: str) -> None:
        assert tokens.verify(SECRET, garbage) is None
