"""The dashboard checked by axe-core (Deque's engine, from npm, run in Debian's Chromium) on every page,
signed in and out: no serious or critical violation. And the main flows done with the keyboard alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import expect

AXE = Path(__file__).resolve().parents[2] / "app" / "dashboard" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = {"serious", "critical"}


async def violations(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is, one line each."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.evaluate(AXE.read_text())  # evaluated by the driver: not an inline script the CSP refuses
    found = await page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " targets: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {v['targets']}" for v in found if v["impact"] in BLOCKING
    ]


@pytest.fixture(scope="module")
async def populated(dashboard):
    """A topic with a group, a message and a dead letter, so every page has something to show."""
    async with dashboard.api() as api:
        created = await api.post("/topics", json={"name": "a11y.orders", "partitions": 2})
        assert created.status_code in (201, 409), created.text
        config = await api.put(
            "/topics/a11y.orders/groups/billing",
            json={"deadLetter": {"maxRetries": 0, "retryDelay": "0s"}},
        )
        assert config.status_code in (200, 201), config.text
        assert (await api.post("/topics/a11y.orders/messages", json={"data": {"n": 1}})).status_code == 201
    return "a11y.orders"


PAGES = [
    "/projects",
    "/account",
    "/p/{p}/development/topics",
    "/p/{p}/development/topics/a11y.orders",
    "/p/{p}/development/groups",
    "/p/{p}/development/groups/a11y.orders/billing",
    "/p/{p}/development/dead-letters",
    "/p/{p}/development/dead-letters/a11y.orders/billing",
    "/p/{p}/development/keys",
    "/p/{p}/development/usage",
    "/p/{p}/development/alerts",
    "/p/{p}/development/topics/no.such.topic",
]


@pytest.mark.parametrize("path", PAGES)
async def test_every_signed_in_page_has_no_serious_violation(page, dashboard, populated, path):
    await page.goto(dashboard.url + path.format(p=dashboard.project_id))
    assert await violations(page) == []


async def test_the_sign_in_page_has_no_serious_violation(browser, dashboard):
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(dashboard.url + "/login")
        assert await violations(page) == []
    finally:
        await context.close()


async def focus_on(page, name: str, *, limit: int = 80) -> None:
    """Press Tab until the focused element's accessible text or label is ``name``."""
    for _ in range(limit):
        await page.keyboard.press("Tab")
        label = await page.evaluate(
            "() => { const e = document.activeElement; if (!e) return '';"
            " const l = e.labels && e.labels[0] ? e.labels[0].innerText : '';"
            " return (l || e.getAttribute('aria-label') || e.innerText || e.value || '').trim(); }"
        )
        if label == name:
            return
    raise AssertionError(f"{name!r} never took the focus by Tab")


async def test_create_a_topic_and_publish_with_the_keyboard_alone(page, dashboard):
    await page.goto(dashboard.project_url() + "/topics")
    await focus_on(page, "Name")
    await page.keyboard.type("keyboard.only")
    await focus_on(page, "Create topic")
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Topic keyboard.only")
    await focus_on(page, "Data (JSON)")
    await page.keyboard.press("Control+A")  # the field comes with an example in it
    await page.keyboard.type('{"typed": true}')
    await focus_on(page, "Publish")
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("status")).to_contain_text("Published")
    # And on to another page by its link in the navigation.
    await focus_on(page, "Consumer groups")
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/groups")
