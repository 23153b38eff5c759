"""Accounts (``app/broker/tenancy.py``): signing in answers the same work for a known and an unknown email.

On the SQLite deployment (the lookup is one indexed read on either database; the hash is what matters).
"""

from __future__ import annotations

import secrets
import statistics
import time

import pytest
from argon2 import PasswordHasher

from app.broker import tenancy
from tests.conftest import Deployment

ON_SQLITE = pytest.mark.parametrize("deployment", ["sqlite"], indirect=True)


@pytest.fixture
async def account(deployment: Deployment) -> tuple[str, str]:
    email, password = f"known-{secrets.token_hex(4)}@example.com", secrets.token_urlsafe(12)
    async with deployment.store.unit() as uow:
        await tenancy.create_user(uow, email, password)
    return email, password


async def sign_in(deployment: Deployment, email: str, password: str):
    async with deployment.store.unit(readonly=True) as uow:
        return await tenancy.authenticate_user(uow, email, password)


@ON_SQLITE
class TestAuthenticateUser:
    async def test_the_right_password_signs_in_and_nothing_else_does(self, deployment, account):
        email, password = account
        assert (await sign_in(deployment, email, password)).email == email
        assert await sign_in(deployment, email.upper(), password) is not None
        assert await sign_in(deployment, email, password + "x") is None
        assert await sign_in(deployment, "nobody@example.com", password) is None
        assert await sign_in(deployment, "", password) is None

    async def test_an_unknown_email_runs_the_same_password_hash(self, deployment, account, monkeypatch):
        # The argon2 verification is the only slow step: an unknown email must run it too, with the
        # same parameters, or the answer's time tells which emails have accounts.
        verified: list[str] = []
        original = PasswordHasher.verify

        def spy(self, password_hash, password):
            verified.append(password_hash)
            return original(self, password_hash, password)

        monkeypatch.setattr(PasswordHasher, "verify", spy)
        email, _ = account
        await sign_in(deployment, email, "wrong-password")
        await sign_in(deployment, f"unknown-{secrets.token_hex(4)}@example.com", "wrong-password")
        await sign_in(deployment, "", "wrong-password")
        assert len(verified) == 3
        known, unknown, empty = verified
        # Same algorithm and cost parameters ("$argon2id$v=19$m=…,t=…,p=…$"), a different hash.
        assert unknown.rsplit("$", 2)[0] == known.rsplit("$", 2)[0] == empty.rsplit("$", 2)[0]
        assert unknown != known

    async def test_known_and_unknown_emails_take_comparable_time(self, deployment, account):
        # A bound, not a speed claim: without the stand-in hash the unknown email answered ~30× faster.
        email, _ = account
        await sign_in(deployment, "warm-up@example.com", "x")  # makes the stand-in hash once
        known, unknown = [], []
        for _ in range(9):  # interleaved, so a busy moment of the machine hits both alike
            for samples, who in ((known, email), (unknown, "nobody-here@example.com")):
                started = time.perf_counter()
                await sign_in(deployment, who, "wrong-password")
                samples.append(time.perf_counter() - started)
        ratio = statistics.median(unknown) / statistics.median(known)
        assert 0.33 < ratio < 3, (statistics.median(known), statistics.median(unknown))
