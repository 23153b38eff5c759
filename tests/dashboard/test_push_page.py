"""The push page of a group in a real headless Chromium against a real server: the endpoint, its breaker,
recent attempts (status, latency), and "send a test event" reaching a real receiver, signed."""

from __future__ import annotations

import json

from playwright.async_api import expect
from queuecore import webhooks

from tests.dashboard.conftest import shot, until
from tests.fixtures.push_receivers import Answer, PushReceiver


class TestPushPage:
    async def test_endpoint_attempts_and_a_test_event(self, page, dashboard, push_receiver: PushReceiver):
        push_receiver.script = [Answer(503, {"Retry-After": "1"}, body=b"warming up")]
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "push.page", "partitions": 1})).status_code == 201
            r = await api.put("/topics/push.page/groups/hooks", json={"push": {"url": push_receiver.url}})
            assert r.status_code == 200, r.text
            secret = r.json()["config"]["push"]["secret"]
            assert (await api.post("/topics/push.page/messages", json={"data": {"n": 1}})).status_code == 201

            async def two_attempts():
                rows = (await api.get("/topics/push.page/groups/hooks/push/attempts")).json()["data"]
                return len(rows) >= 2

            assert await until(two_attempts, timeout=20.0)

        await page.goto(dashboard.project_url() + "/groups/push.page/hooks")
        await page.get_by_role("link", name="push to URL").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Push to URL: group hooks")
        card = page.locator("section.card").first
        await expect(card).to_contain_text(push_receiver.url)
        await expect(card).to_contain_text(f"whsec_…{secret[-4:]}")
        await expect(card).to_contain_text("circuit breaker closed")
        table = page.locator("#attempts table")
        await expect(table).to_contain_text("503")
        await expect(table).to_contain_text("HTTP 503: warming up")
        await expect(table).to_contain_text("200")
        await shot(page, "push")

        before = len(push_receiver.deliveries())
        await page.get_by_role("button", name="Send a test event").click()
        await expect(page.get_by_role("status")).to_contain_text("Test event answered 200")
        test = push_receiver.deliveries()[before]
        assert test.headers["ce-type"] == "queuecore.test"
        assert webhooks.verify(test.body, test.headers, secret) == {
            "test": True,
            "topic": "push.page",
            "group": "hooks",
        }
        assert json.loads(test.body)["test"] is True

    async def test_a_group_without_push_says_so(self, page, dashboard):
        async with dashboard.api() as api:
            await api.post("/topics", json={"name": "push.none", "partitions": 1})
            assert (await api.put("/topics/push.none/groups/plain", json={})).status_code == 200
        await page.goto(dashboard.project_url() + "/groups/push.none/plain/push")
        await expect(page.locator("section.card").first).to_contain_text("This group is not a push group")
        await expect(page.get_by_role("button", name="Send a test event")).to_have_count(0)
