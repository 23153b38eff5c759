"""One real ``queuecore-server`` and one headless Chromium (Debian's, driven by Playwright) for the
dashboard tests; a signed-in browser context shared by the scenarios that need one."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import ServerProcess, cli, free_port, server_env

playwright_async = pytest.importorskip("playwright.async_api")
expect = playwright_async.expect

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Screenshots go to a scratch directory, or where DASHBOARD_SCREENSHOTS says (docs/dashboard to refresh the
# ones docs/dashboard.md shows), so an ordinary test run leaves the checkout clean.
SHOTS = Path(
    os.environ.get("DASHBOARD_SCREENSHOTS") or Path(tempfile.gettempdir()) / "queuecore-dashboard-shots"
)


@dataclass
class Dashboard:
    server: ServerProcess
    email: str
    password: str
    project_id: str
    keys: dict[str, str]
    other_project_id: str
    lockout_email: str
    lockout_password: str
    returning_email: str
    returning_password: str
    changer_email: str
    changer_password: str

    @property
    def url(self) -> str:
        return self.server.url + "/dashboard"

    def project_url(self, env: str = "development") -> str:
        return f"{self.url}/p/{self.project_id}/{env}"

    def api(self, env: str = "development") -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.server.url + "/v1",
            headers={"Authorization": f"Bearer {self.keys[env]}"},
            timeout=30,
        )


async def _other_account(database_url: str, email: str, password: str) -> str:
    """Another account with a project of its own, made through the domain as the operator would."""
    from app.broker import tenancy
    from app.stores.metadata.database import SqlMetadataStore

    store = SqlMetadataStore(database_url, pool_size=1)
    try:
        async with store.unit() as uow:
            user = await tenancy.create_user(uow, email, password)
            project = await tenancy.create_project(uow, "other-account", owner_id=user.id)
            return project.id
    finally:
        await store.close()


@pytest.fixture(scope="session")
async def dashboard(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Dashboard]:
    data_dir = tmp_path_factory.mktemp("dashboard")
    env = server_env(data_dir)
    cli(env, "migrate")
    boot = json.loads(cli(env, "bootstrap", "--project", "demo", "--demo-user", "--json").stdout)
    database_url = f"sqlite+aiosqlite:///{(data_dir / 'metadata.db').resolve()}"  # the server's default
    other = await _other_account(database_url, "other@example.com", secrets.token_urlsafe(12))
    lockout_password = secrets.token_urlsafe(12)
    # "--password=…": a generated password may start with "-", which argparse would take for an option.
    cli(env, "users", "create", "--email", "locked@example.com", f"--password={lockout_password}")
    returning_password = secrets.token_urlsafe(12)
    cli(env, "users", "create", "--email", "returning@example.com", f"--password={returning_password}")
    changer_password = secrets.token_urlsafe(12)
    cli(env, "users", "create", "--email", "changer@example.com", f"--password={changer_password}")
    proc = ServerProcess(
        env=env,
        port=free_port(),
        data_dir=data_dir,
        keys=boot["keys"],
        project_id=boot["projectId"],
        log_path=data_dir / "server.log",
    )
    proc.start()
    yield Dashboard(
        proc,
        boot["login"]["email"],
        boot["login"]["password"],
        boot["projectId"],
        boot["keys"],
        other,
        "locked@example.com",
        lockout_password,
        "returning@example.com",
        returning_password,
        "changer@example.com",
        changer_password,
    )
    proc.stop()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[object]:
    async with playwright_async.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield chromium
        await chromium.close()


async def sign_in(page, dashboard: Dashboard, email: str | None = None, password: str | None = None):
    await page.goto(dashboard.url + "/login")
    await page.get_by_label("Email").fill(email or dashboard.email)
    await page.get_by_label("Password").fill(password or dashboard.password)
    await page.get_by_role("button", name="Sign in").click()


@pytest.fixture(scope="session")
async def signed_in(browser, dashboard: Dashboard) -> AsyncIterator[object]:
    """A browser context signed in once as the demo user (sign-in attempts are rate limited)."""
    context = await browser.new_context(viewport={"width": 1360, "height": 900})
    page = await context.new_page()
    await sign_in(page, dashboard)
    await page.wait_for_url("**/topics")
    await page.close()
    yield context
    await context.close()


@pytest.fixture
async def page(signed_in) -> AsyncIterator[object]:
    page = await signed_in.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    await page.close()


async def shot(page, name: str) -> None:
    """A full-page PNG in docs/dashboard; secrets shown once are masked (never committed, even a test's)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(
        path=str(SHOTS / f"{name}.png"), full_page=True, mask=[page.locator(".secret-value")]
    )


# Helpers of the scenarios.


async def until(check, timeout: float = 10.0):
    """Await ``check()`` until it answers something truthy (a deadline, not a speed claim)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.2)


async def confirm(page) -> None:
    """Press Confirm in the dashboard's own confirmation dialog."""
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_be_visible()
    await dialog.get_by_role("button", name="Confirm").click()


async def join_member(api: httpx.AsyncClient, topic: str, group: str) -> dict:
    """Join ``group`` of ``topic`` through the dashboard's API as a pull member (from the earliest)."""
    joined = await api.post(f"/topics/{topic}/groups/{group}/members", json={"startFrom": "earliest"})
    assert joined.status_code in (200, 201), joined.text
    return joined.json()


# Page checks run in the browser: unlabelled form controls, assets not served by the dashboard.
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea')]
    .filter(el => el.type !== 'hidden' && el.labels.length === 0 && !el.getAttribute('aria-label'))
    .map(el => el.outerHTML)"""
EXTERNAL = """() => [...document.querySelectorAll('script[src], link[href], img[src]')]
    .map(el => el.getAttribute('src') || el.getAttribute('href'))
    .filter(url => !url.startsWith('/dashboard/'))"""
