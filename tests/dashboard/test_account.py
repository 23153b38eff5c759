"""The dashboard's projects, account, usage, quotas and alerts pages in a real headless Chromium against a
real server."""

from __future__ import annotations

import hashlib
import hmac
import re

from playwright.async_api import expect

from tests.dashboard.conftest import EXTERNAL, UNLABELLED, shot, sign_in, until


class TestProjectsAndAccount:
    async def test_the_projects_page_lists_environments_tier_and_limits_and_creates_one(
        self, page, dashboard
    ):
        await page.goto(dashboard.project_url() + "/topics")
        await page.get_by_role("link", name="Projects", exact=True).click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Projects")
        demo = page.locator("tr[data-project='demo']")
        await expect(demo).to_contain_text(dashboard.project_id)
        await expect(demo).to_contain_text("development")
        await expect(demo).to_contain_text("staging")
        await expect(demo).to_contain_text("production")
        await expect(demo).to_contain_text("publish ")  # the tier's limits
        await page.get_by_label("Project name").fill("second project")
        await page.get_by_role("button", name="Create project").click()
        await expect(page.get_by_role("status")).to_have_text("Project second project created.")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Topics")
        await expect(page.get_by_label("Project")).to_contain_text("second project")
        await page.goto(dashboard.url + "/projects")
        await page.get_by_label("Project name").fill("second project")
        await page.get_by_role("button", name="Create project").click()
        await expect(page.get_by_role("alert")).to_contain_text("second project")  # taken
        await expect(page.get_by_label("Project name")).to_have_value("second project")
        for path in ("/projects", "/account"):  # every control labelled, only local assets
            await page.goto(dashboard.url + path)
            assert await page.evaluate(UNLABELLED) == [], path
            assert await page.evaluate(EXTERNAL) == [], path

    async def test_a_password_change_ends_the_other_sessions_only(self, browser, dashboard):
        email, old = dashboard.changer_email, dashboard.changer_password
        here, elsewhere = await browser.new_context(), await browser.new_context()
        mine, theirs = await here.new_page(), await elsewhere.new_page()
        for tab in (mine, theirs):
            await sign_in(tab, dashboard, email, old)
            await tab.wait_for_url("**/dashboard**")
            assert "/login" not in tab.url
        await mine.goto(dashboard.url + "/account")
        await mine.get_by_label("Current password").fill("not-my-password")
        await mine.get_by_label("New password", exact=True).fill("a-new-password-1")
        await mine.get_by_label("New password again").fill("a-new-password-1")
        await mine.get_by_role("button", name="Change password").click()
        await expect(mine.get_by_role("alert")).to_have_text("The current password is wrong.")
        await mine.get_by_label("Current password").fill(old)
        await mine.get_by_label("New password", exact=True).fill("a-new-password-1")
        await mine.get_by_label("New password again").fill("a-new-password-1")
        await mine.get_by_role("button", name="Change password").click()
        await expect(mine.get_by_role("status")).to_have_text(
            "Password changed. Other sessions are signed out."
        )
        await mine.goto(dashboard.url + "/account")
        await expect(mine.get_by_role("heading", level=1)).to_have_text("Account settings")  # still in
        await theirs.goto(dashboard.url + "/account")
        await theirs.wait_for_url("**/dashboard/login**")  # the other session ended
        await sign_in(theirs, dashboard, email, old)
        await expect(theirs.get_by_role("alert")).to_have_text("Wrong email or password.")
        await sign_in(theirs, dashboard, email, "a-new-password-1")
        await theirs.wait_for_url("**/dashboard**")
        await theirs.goto(dashboard.url + "/account")
        await expect(theirs.get_by_role("heading", level=1)).to_have_text("Account settings")
        await here.close()
        await elsewhere.close()


class TestUsage:
    async def test_requests_of_a_key_show_up_in_its_usage(self, page, dashboard):
        key = dashboard.keys["development"]
        url = dashboard.project_url() + "/usage?window=hour&category=publish"
        await page.goto(url)
        await page.get_by_label("Key").select_option(label=f"pq_test_sk_…{key[-4:]}")
        await page.get_by_role("button", name="Show").click()
        await page.wait_for_url("**key=key_*")
        filtered = page.url
        before = int(await page.get_by_test_id("usage-requests").inner_text())
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "usage.demo", "partitions": 1})
            ).status_code == 201
            for i in range(3):
                assert (
                    await api.post("/topics/usage.demo/messages", json={"data": {"i": i}})
                ).status_code == 201

        async def counted() -> bool:
            await page.goto(filtered)
            return int(await page.get_by_test_id("usage-requests").inner_text()) >= before + 3

        assert await until(counted, 10)
        await expect(page.locator(".chart canvas").first).to_be_visible()
        await expect(page.locator("body")).to_contain_text("publish 100 req/s")
        await shot(page, "usage")

    async def test_chart_ticks_are_short_whole_numbers_with_units(self, page, dashboard):
        async with dashboard.api("staging") as api:
            assert (
                await api.post("/topics", json={"name": "usage.bytes", "partitions": 1})
            ).status_code == 201
            for _ in range(3):
                big = {"data": {"blob": "x" * 30_000}}
                assert (await api.post("/topics/usage.bytes/messages", json=big)).status_code == 201

        async def ticks() -> dict:
            await page.goto(dashboard.project_url("staging") + "/usage?window=hour")
            await page.wait_for_function("() => window.dashboardCharts && window.dashboardCharts.bytes")
            labels = await page.evaluate(
                "() => Object.fromEntries(Object.entries(window.dashboardCharts)"
                ".map(([name, chart]) => [name, chart.axes[1]._values]))"
            )
            return labels if any(v != "0 B" for v in labels["bytes"]) else {}

        labels = await until(ticks, 10)
        assert labels, "no bytes counted"
        assert all(re.fullmatch(r"\d+(\.\d)? (B|kB|MB)", v) for v in labels["bytes"]), labels["bytes"]
        assert len(set(labels["bytes"])) == len(labels["bytes"]), labels["bytes"]
        # Nothing throttled in staging: an empty chart ticks in whole numbers.
        assert all(re.fullmatch(r"\d+", v) for v in labels["throttled"]), labels["throttled"]


class TestQuotas:
    async def test_the_usage_page_shows_each_quota_its_limit_and_what_is_used(self, page, dashboard):
        async with dashboard.api("production") as api:
            r = await api.post("/topics", json={"name": "quota.a", "partitions": 4})
            assert r.status_code == 201, r.text
            assert (await api.put("/topics/quota.a/groups/g", json={})).status_code == 200
            push = {"push": {"url": "http://127.0.0.1:9/hook"}}  # a push group (nothing is published)
            assert (await api.put("/topics/quota.a/groups/hooks", json=push)).status_code == 200
        await page.goto(dashboard.project_url("production") + "/usage")
        table = page.get_by_role("table", name="Quotas of the developer tier")
        await expect(table).to_be_visible()
        rows = {
            quota: table.locator(f'tr[data-quota="{quota}"]')
            for quota in ("topics", "partitions", "groups", "schedules", "pushGroups", "storedBytes")
        }
        expected = {
            "topics": ("1", "100"),
            "partitions": ("4", "500"),
            "groups": ("2", "20"),
            "schedules": ("0", "25"),
            "pushGroups": ("1", "10"),
        }
        for quota, (used, limit) in expected.items():
            await expect(rows[quota].locator("[data-used]")).to_have_attribute("data-used", used)
            await expect(rows[quota].locator("[data-limit]")).to_have_attribute("data-limit", limit)
        await expect(rows["groups"]).to_contain_text("on topic quota.a")
        await expect(rows["storedBytes"].locator("[data-limit]")).to_have_text("10.0 GiB")
        await expect(rows["partitions"]).to_contain_text("partitions per environment")
        await shot(page, "usage-quotas")


class TestAlerts:
    async def test_endpoint_secret_once_test_event_and_attempt_log(self, page, dashboard, receiver):
        await page.goto(dashboard.project_url("staging") + "/alerts")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Alerts")
        await page.get_by_label("Endpoint URL").fill(receiver.url)
        await page.get_by_role("button", name="Save endpoint").click()
        secret = await page.get_by_label("Signing secret").input_value()
        assert len(secret) >= 16
        await page.get_by_role("button", name="Send a test event").click()
        await expect(page.get_by_role("status")).to_contain_text("Test event")
        assert secret not in await page.content()  # shown once
        (event,) = await receiver.arrival("test")
        headers = {k.lower(): v for k, v in event.headers.items()}
        stamp, _, mac = headers["queuecore-signature"].partition(",v1=")
        expected = hmac.new(
            secret.encode(), stamp.removeprefix("t=").encode() + b"." + event.body, hashlib.sha256
        )
        assert hmac.compare_digest(mac, expected.hexdigest())
        # The attempt log refreshes by itself.
        await expect(page.locator("#attempts")).to_contain_text("delivered (200)", timeout=15_000)
        await shot(page, "alerts")
