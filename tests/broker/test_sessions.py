"""Dashboard sessions (``app/broker/sessions.py``): kept server-side, ended by sign-out, a password change,
a disabled account, idle time and their lifetime. On SQLite and Postgres."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest

from app.broker import sessions, tenancy
from app.broker.errors import UserNotFound
from app.kit.clock import utcnow
from tests.broker.conftest import ON_DATABASES
from tests.conftest import Deployment

IDLE = 30 * 60


@pytest.fixture
async def user(deployment: Deployment):
    async with deployment.store.unit() as uow:
        return await tenancy.create_user(
            uow, f"s-{secrets.token_hex(4)}@example.com", secrets.token_urlsafe(12)
        )


async def sign_in(deployment: Deployment, user, now=None) -> tuple[str, sessions.SignedIn]:
    async with deployment.store.unit() as uow:
        return await sessions.open_session(uow, user, now=now)


async def resolve(deployment: Deployment, token: str, now=None, idle: float = IDLE):
    async with deployment.store.unit() as uow:
        return await sessions.resolve(uow, token, idle_seconds=idle, now=now)


@ON_DATABASES
class TestSessions:
    async def test_the_cookie_token_opens_the_session_and_says_nothing_itself(self, deployment, user):
        token, signed = await sign_in(deployment, user)
        found = await resolve(deployment, token)
        assert found == signed and found.email == user.email and found.user_id == user.id
        # The token is random: no email, no CSRF token, not the stored id.
        assert user.email not in token and signed.csrf not in token and signed.session_id != token
        assert len(token) >= 40
        assert await resolve(deployment, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
        assert await resolve(deployment, "") is None

    async def test_sign_out_ends_it_for_good(self, deployment, user):
        token, signed = await sign_in(deployment, user)
        async with deployment.store.unit() as uow:
            await sessions.end(uow, signed.session_id)
        assert await resolve(deployment, token) is None

    async def test_ending_every_session_of_an_account(self, deployment, user):
        tokens = [(await sign_in(deployment, user))[0] for _ in range(3)]
        async with deployment.store.unit() as uow:
            assert await sessions.end_all(uow, user.id) == 3
        assert [await resolve(deployment, t) for t in tokens] == [None] * 3

    async def test_idle_sessions_end_and_use_keeps_them_alive(self, deployment, user):
        start = utcnow()
        token, _ = await sign_in(deployment, user, now=start)
        # Used every 20 minutes: alive for an hour and more (idle timeout 30 minutes).
        for minutes in (20, 40, 60, 80):
            assert await resolve(deployment, token, now=start + timedelta(minutes=minutes)) is not None
        # Then 31 minutes without a request: gone, and stays gone.
        assert await resolve(deployment, token, now=start + timedelta(minutes=111)) is None
        assert await resolve(deployment, token, now=start + timedelta(minutes=81)) is None

    async def test_a_session_ends_twelve_hours_after_sign_in_however_busy(self, deployment, user):
        start = utcnow()
        token, _ = await sign_in(deployment, user, now=start)
        now = start
        while now + timedelta(minutes=20) < start + timedelta(hours=12):
            now += timedelta(minutes=20)
            assert await resolve(deployment, token, now=now) is not None
        assert await resolve(deployment, token, now=start + timedelta(hours=12, seconds=1)) is None

    async def test_disabling_an_account_ends_its_sessions_and_its_sign_in(self, deployment, user):
        password = secrets.token_urlsafe(12)
        async with deployment.store.unit() as uow:
            row = await tenancy.get_user_by_email(uow, user.email)
            await tenancy.set_password(uow, row, password)
        token, _ = await sign_in(deployment, user)
        async with deployment.store.unit() as uow:
            _, ended = await sessions.set_disabled(uow, user.email.upper(), True)
        assert ended == 1
        assert await resolve(deployment, token) is None
        async with deployment.store.unit(readonly=True) as uow:
            assert await tenancy.authenticate_user(uow, user.email, password) is None
        async with deployment.store.unit() as uow:
            await sessions.set_disabled(uow, user.email, False)
        async with deployment.store.unit(readonly=True) as uow:
            assert (await tenancy.authenticate_user(uow, user.email, password)).id == user.id

    async def test_disabling_an_unknown_account_is_refused(self, deployment):
        async with deployment.store.unit() as uow:
            with pytest.raises(UserNotFound):
                await sessions.set_disabled(uow, "nobody@example.com", True)
