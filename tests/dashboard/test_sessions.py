"""Dashboard sessions over HTTP against a real server: they live server-side, so sign-out, ``users
disable`` and the idle timeout end them at once, and the cookie says nothing readable (no email, no CSRF
token). The browser scenarios (sign-in, password change) are in ``test_dashboard.py``."""

from __future__ import annotations

import asyncio
import base64
import re
import secrets

import httpx
import pytest

from tests.dashboard.conftest import Dashboard
from tests.fixtures.server import ServerProcess, cli, free_port, server_env

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


async def signed_in(url: str, email: str, password: str) -> httpx.AsyncClient:
    """A client holding a session of ``email`` on the server at ``url``."""
    http = httpx.AsyncClient(base_url=url, timeout=30)
    await http.get("/dashboard/login")
    answer = await http.post(
        "/dashboard/login",
        data={"email": email, "password": password, "csrf_token": http.cookies["qc_login_csrf"]},
    )
    assert answer.status_code == 303, answer.text
    return http


def new_user(server: ServerProcess) -> tuple[str, str]:
    email, password = f"s-{secrets.token_hex(4)}@example.com", secrets.token_urlsafe(12)
    cli(server.env, "users", "create", "--email", email, f"--password={password}")
    return email, password


class TestServerSideSessions:
    async def test_a_cookie_replayed_after_sign_out_opens_nothing(self, dashboard: Dashboard):
        http = await signed_in(dashboard.server.url, dashboard.email, dashboard.password)
        keys_page = f"/dashboard/p/{dashboard.project_id}/development/keys"
        page = await http.get(keys_page)
        assert page.status_code == 200
        csrf = CSRF.search(page.text).group(1)
        stolen = http.cookies["qc_session"]
        assert (await http.post("/dashboard/logout", data={"csrf_token": csrf})).status_code == 303
        await http.aclose()

        async with httpx.AsyncClient(
            base_url=dashboard.server.url, cookies={"qc_session": stolen}, timeout=30
        ) as replay:
            read = await replay.get(keys_page)
            assert read.status_code == 303 and "/dashboard/login" in read.headers["location"]
            name = f"replayed-{secrets.token_hex(3)}"
            create = await replay.post(
                f"/dashboard/p/{dashboard.project_id}/development/topics",
                data={"csrf_token": csrf, "name": name, "partitions": "1"},
            )
            assert create.status_code == 303 and "/dashboard/login" in create.headers["location"]
        async with dashboard.api() as api:
            assert (await api.get(f"/topics/{name}")).status_code == 404

    async def test_the_cookie_holds_no_email_and_no_csrf_token(self, dashboard: Dashboard):
        email, password = new_user(dashboard.server)
        http = await signed_in(dashboard.server.url, email, password)
        page = await http.get("/dashboard/account")
        assert page.status_code == 200
        csrf = CSRF.search(page.text).group(1)
        cookie = http.cookies["qc_session"]
        decoded = base64.urlsafe_b64decode(cookie + "=" * (-len(cookie) % 4))
        for readable in (email, email.encode(), csrf, csrf.encode()):
            assert readable not in cookie if isinstance(readable, str) else readable not in decoded
        assert "@" not in cookie  # (its decoded bytes are random: any byte, "@" included, may be among them)
        await http.aclose()

    async def test_users_disable_ends_the_sessions_at_once_and_refuses_sign_in(self, dashboard: Dashboard):
        email, password = new_user(dashboard.server)
        http = await signed_in(dashboard.server.url, email, password)
        assert (await http.get("/dashboard/account")).status_code == 200
        disabled = cli(dashboard.server.env, "users", "disable", "--email", email)
        assert "1 dashboard session ended" in disabled.stdout
        gone = await http.get("/dashboard/account")
        assert gone.status_code == 303 and "/dashboard/login" in gone.headers["location"]
        await http.aclose()
        with pytest.raises(AssertionError):
            await signed_in(dashboard.server.url, email, password)
        cli(dashboard.server.env, "users", "enable", "--email", email)
        again = await signed_in(dashboard.server.url, email, password)
        assert (await again.get("/dashboard/account")).status_code == 200
        await again.aclose()


@pytest.fixture(scope="module")
def impatient(tmp_path_factory) -> ServerProcess:
    """A server whose dashboard sessions end after 2 idle seconds."""
    data_dir = tmp_path_factory.mktemp("impatient")
    env = server_env(data_dir, QUEUECORE_DASHBOARD_IDLE_TIMEOUT_SECONDS="2")
    cli(env, "migrate")
    proc = ServerProcess(env=env, port=free_port(), data_dir=data_dir, log_path=data_dir / "server.log")
    proc.start()
    yield proc
    proc.stop()


class TestIdleTimeout:
    async def test_an_idle_session_ends_and_a_used_one_does_not(self, impatient: ServerProcess):
        email, password = new_user(impatient)
        idle = await signed_in(impatient.url, email, password)
        busy = await signed_in(impatient.url, email, password)
        for _ in range(6):  # 3 s in all, a request every 0.5 s: never 2 s idle
            assert (await busy.get("/dashboard/account")).status_code == 200
            await asyncio.sleep(0.5)
        gone = await idle.get("/dashboard/account")
        assert gone.status_code == 303 and "/dashboard/login" in gone.headers["location"]
        await busy.aclose()
        await idle.aclose()
