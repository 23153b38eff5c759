"""A real browser (Debian's Chromium, driven by Playwright) consumes a group with ``EventSource`` on every
backend: the page comes from another origin (a second loopback server), so the stream is read
cross-origin, allowed by ``Access-Control-Allow-Origin: *`` on the stream alone; the credential is a
short-lived token in the URL (an ``EventSource`` sends no headers and, by default, no cookies). Acks go
through the pull call with the member the page was welcomed as; a revoked key's stream gets the
``error`` event, and the browser's own reconnection is then refused, so the ``EventSource`` stays closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from app.broker import keys
from tests.api.sse_client import served

playwright_async = pytest.importorskip("playwright.async_api")

pytestmark = pytest.mark.asyncio

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>SSE consumer</title></head>
<body><p id="state">idle</p>
<script>
window.seen = [];
window.start = (url) => {
  const source = new EventSource(url);
  window.source = source;
  const keep = (kind) => (e) => window.seen.push({ kind, id: e.lastEventId || null, data: e.data ?? null });
  for (const kind of ['welcome', 'message', 'rebalance', 'draining']) source.addEventListener(kind, keep(kind));
  // 'error' is both the server's event (with data) and the browser's own notice of a failed connection.
  source.addEventListener('error', keep('error'));
  source.addEventListener('open', () => { document.getElementById('state').textContent = 'open'; });
};
</script></body></html>
"""


async def page_app(scope, receive, send) -> None:
    """A static page on another origin than the API."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": PAGE})


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    async with playwright_async.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield chromium
        await chromium.close()


@pytest.fixture
async def api(deployment) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    async with served(deployment.app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield url, client


async def seen(page, kind: str, count: int = 1, timeout: float = 15.0) -> list[dict]:
    """The events of ``kind`` the page has seen, once there are ``count`` (a deadline, not a speed claim)."""
    async with asyncio.timeout(timeout):
        while True:
            events = [e for e in await page.evaluate("window.seen") if e["kind"] == kind]
            if len(events) >= count:
                return events
            await asyncio.sleep(0.05)


async def open_page(browser, api_url: str, token: str):
    async with served(page_app) as page_url:  # the page's own origin
        assert page_url != api_url
        page = await browser.new_page()
        await page.goto(page_url)
    url = f"{api_url}/v1/topics/orders/groups/web/events?startFrom=earliest&token={token}"
    await page.evaluate("(url) => window.start(url)", url)
    return page


async def token_for(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    r = await client.post("/v1/tokens/websocket", json={"topic": "orders", "group": "web"}, headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


class TestBrowserEventSource:
    async def test_a_page_of_another_origin_consumes_and_acks(self, browser, api, prod):
        api_url, client = api
        r = await client.post("/v1/topics", json={"name": "orders", "partitions": 2}, headers=prod)
        assert r.status_code == 201, r.text
        ids = []
        for n in range(3):
            r = await client.post(
                "/v1/topics/orders/messages", json={"data": {"n": n}, "key": "k"}, headers=prod
            )
            ids.append(r.json()["id"])
        page = await open_page(browser, api_url, await token_for(client, prod))
        (welcome,) = await seen(page, "welcome")
        member = httpx.Response(200, content=welcome["data"]).json()
        assert member["memberId"].startswith("csr_") and sorted(member["assignments"]) == [0, 1]
        messages = await seen(page, "message", 3)
        assert [m["id"] for m in messages] == ids  # lastEventId is the message id
        assert [httpx.Response(200, content=m["data"]).json()["data"] for m in messages] == [
            {"n": 0},
            {"n": 1},
            {"n": 2},
        ]
        ident = {"memberId": member["memberId"], "generationId": member["generationId"]}
        r = await client.post("/v1/topics/orders/groups/web/ack", json={**ident, "ids": ids}, headers=prod)
        assert r.status_code == 200 and r.json()["failed"] == [], r.text
        r = await client.get("/v1/topics/orders/groups/web/offsets", headers=prod)
        assert sum(p["lag"] for p in r.json()["data"]) == 0
        await page.close()
        # The page is gone: its member left with the stream.
        async with asyncio.timeout(10):
            while (await client.get("/v1/topics/orders/groups/web", headers=prod)).json()["consumers"]:
                await asyncio.sleep(0.05)

    async def test_a_revoked_key_closes_the_browser_stream_for_good(
        self, browser, api, prod, tenant, deployment
    ):
        api_url, client = api
        r = await client.post("/v1/topics", json={"name": "orders", "partitions": 1}, headers=prod)
        assert r.status_code == 201, r.text
        page = await open_page(browser, api_url, await token_for(client, prod))
        await seen(page, "welcome")
        async with deployment.store.unit() as uow:
            await keys.revoke_key(uow, tenant.key_ids["production"])
        errors = await seen(page, "error", 1)
        told = httpx.Response(200, content=errors[0]["data"]).json()["error"]
        assert told["code"] == "INVALID_API_KEY"
        # The browser tries again by itself (after the welcome's retry); the token's key is revoked: 401,
        # and an EventSource refused with a non-200 answer closes for good (readyState 2, CLOSED).
        async with asyncio.timeout(15):
            while await page.evaluate("window.source.readyState") != 2:
                await asyncio.sleep(0.05)
        await page.close()
