"""Sign-in backoff over HTTP against real servers: failures slow further attempts down (per account and
per client address, apart), never lock the right password out, do not slow a browser that signed in to
the account before, and are counted against the socket's address unless a trusted proxy says otherwise
(QUEUECORE_TRUSTED_PROXIES).

Each test here runs against servers of its own (module fixtures), so its failures never slow down the
other dashboard tests; on the trusted-proxy server each test also signs in from an address of its own.
They are served in this process (uvicorn with ``serve``'s config, on a real socket) so that a test waits
out a backoff by advancing the server's clock: the delays are decided on the rate limiter's clock.
"""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest

from tests.fixtures.server import InProcessServer, cli, in_process_server


@pytest.fixture(scope="module")
async def direct(tmp_path_factory):
    """The default: no proxy is trusted."""
    server = await in_process_server(tmp_path_factory.mktemp("direct"))
    yield server
    await server.stop()


@pytest.fixture(scope="module")
async def proxied(tmp_path_factory):
    """Behind a proxy on 127.0.0.1, whose X-Forwarded-For is believed."""
    server = await in_process_server(tmp_path_factory.mktemp("proxied"), trusted_proxies="127.0.0.1")
    yield server
    await server.stop()


async def new_user(server: InProcessServer) -> tuple[str, str]:
    """A dashboard user made with the CLI, as an operator does. In a thread: the server runs on this event
    loop, and a unit of work of its own (a background loop's) must be able to finish while the CLI waits
    for the database."""
    email, password = f"u-{secrets.token_hex(4)}@example.com", secrets.token_urlsafe(12)
    await asyncio.to_thread(cli, server.env, "users", "create", "--email", email, f"--password={password}")
    return email, password


def some_address() -> str:
    """An address for X-Forwarded-For (only ever a header: nothing is sent there)."""
    return f"203.0.{secrets.randbelow(256)}.{secrets.randbelow(254) + 1}"


class Browser:
    """One browser (its cookies) signing in from one address."""

    def __init__(self, server: InProcessServer, address: str | None = None) -> None:
        headers = {"X-Forwarded-For": address} if address else {}
        self.http = httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30)

    async def sign_in(self, email: str, password: str, forwarded_for: str | None = None) -> httpx.Response:
        await self.http.get("/dashboard/login")
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else None
        return await self.http.post(
            "/dashboard/login",
            data={"email": email, "password": password, "csrf_token": self.http.cookies["qc_login_csrf"]},
            headers=headers,
        )

    async def close(self) -> None:
        await self.http.aclose()


async def fail(browser: Browser, email: str, times: int) -> None:
    for _ in range(times):
        assert (await browser.sign_in(email, "wrong-password-123")).status_code == 401


class TestBackoff:
    async def test_failures_slow_the_account_down_but_never_lock_the_password_out(self, proxied):
        email, password = await new_user(proxied)
        guesser = Browser(proxied, some_address())
        await fail(guesser, email, 5)
        # The owner, from elsewhere, right after: asked to wait a moment, not 15 minutes.
        owner = Browser(proxied, some_address())
        refused = await owner.sign_in(email, password)
        assert refused.status_code == 429 and "Too many sign-in attempts" in refused.text
        wait = int(refused.headers["Retry-After"])
        assert 1 <= wait <= 2
        proxied.clock.advance(wait)
        assert (await owner.sign_in(email, password)).status_code == 303
        # The success cleared the account's failures: the next wrong guess is answered, not delayed.
        assert (await guesser.sign_in(email, "wrong-password-123")).status_code == 401
        await guesser.close()
        await owner.close()

    async def test_the_delay_doubles_and_refused_attempts_do_not_count(self, proxied):
        email, _ = await new_user(proxied)
        guesser = Browser(proxied, some_address())
        await fail(guesser, email, 5)
        for expected in (1, 2):
            refused = await guesser.sign_in(email, "wrong-password-123")
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) == expected
            proxied.clock.advance(expected)
            assert (await guesser.sign_in(email, "wrong-password-123")).status_code == 401
        await guesser.close()

    async def test_a_browser_that_signed_in_before_is_not_slowed_by_failures_elsewhere(self, proxied):
        email, password = await new_user(proxied)
        address = some_address()
        owner = Browser(proxied, address)
        assert (await owner.sign_in(email, password)).status_code == 303
        assert owner.http.cookies.get("qc_device")
        assert email not in owner.http.cookies["qc_device"]
        owner.http.cookies.delete("qc_session")  # signed out since (or the session ended): signs in again
        # Someone else, from the owner's own address (the same office), guesses at the account.
        guesser = Browser(proxied, address)
        await fail(guesser, email, 5)
        assert (await guesser.sign_in(email, password)).status_code == 429
        # The owner's browser is known to the account: counted on its own, it goes straight in.
        assert (await owner.sign_in(email, password)).status_code == 303
        await guesser.close()
        await owner.close()


class TestClientAddress:
    async def test_failures_from_one_address_back_off_that_address_whatever_x_forwarded_for_says(
        self, direct
    ):
        # Nobody is trusted: rotating X-Forwarded-For changes nothing, all 30 failures are 127.0.0.1's.
        email, password = await new_user(direct)
        browser = Browser(direct)
        for _ in range(30):
            answer = await browser.sign_in(
                f"nobody-{secrets.token_hex(4)}@example.com", "wrong-password", forwarded_for=some_address()
            )
            assert answer.status_code == 401
        refused = await browser.sign_in(email, password, forwarded_for=some_address())
        assert refused.status_code == 429
        # A backoff, not a lockout: the right password gets in once the second has passed.
        direct.clock.advance(int(refused.headers["Retry-After"]))
        assert (await browser.sign_in(email, password)).status_code == 303
        await browser.close()

    async def test_a_trusted_proxy_says_who_the_client_is(self, proxied):
        # Through a trusted proxy each forwarded address is its own client: 31 failures from 31 of them
        # slow none down.
        browser = Browser(proxied)
        for _ in range(31):
            answer = await browser.sign_in(
                f"nobody-{secrets.token_hex(4)}@example.com", "wrong-password", forwarded_for=some_address()
            )
            assert answer.status_code == 401
        await browser.close()
