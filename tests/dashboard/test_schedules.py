"""The dashboard's schedules page in a real headless Chromium against a real server: create (and a refusal
shown with its field), the last runs appearing as the server's runner publishes them, pause, resume,
delete; every control labelled."""

from __future__ import annotations

import secrets

from playwright.async_api import expect

from tests.dashboard.conftest import EXTERNAL, UNLABELLED, shot


class TestSchedules:
    async def test_create_watch_runs_pause_resume_delete(self, page, dashboard):
        topic = f"sched.{secrets.token_hex(3)}"
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": topic, "partitions": 1})).status_code == 201
        await page.goto(dashboard.project_url() + "/schedules")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Schedules")
        assert await page.evaluate(UNLABELLED) == []
        assert await page.evaluate(EXTERNAL) == []

        await page.get_by_label("Topic").select_option(topic)
        await page.get_by_label("Kind").select_option("cron")
        await page.get_by_label("Cron expression or period").fill("not a cron")
        await page.get_by_label("Message data (JSON)").fill('{"n": 1}')
        await page.get_by_role("button", name="Create schedule").click()
        await expect(page.locator("body")).to_contain_text("cron")
        await expect(page.get_by_label("Cron expression or period")).to_have_value("not a cron")  # kept

        await page.get_by_label("Topic").select_option(topic)
        await page.get_by_label("Kind").select_option("every")
        await page.get_by_label("Cron expression or period").fill("1s")
        await page.get_by_role("button", name="Create schedule").click()
        await expect(page.get_by_role("status")).to_contain_text("created")
        async with dashboard.api() as api:
            (schedule,) = [s for s in (await api.get("/schedules")).json()["data"] if s["topic"] == topic]
        row = page.locator("#schedules tr", has_text=schedule["id"])
        await expect(row).to_contain_text("every 1s")
        # The list refreshes by itself; the runs the server's runner published appear with their messages.
        await expect(page.locator("#schedules tr", has_text=schedule["id"])).to_contain_text(
            "msg_", timeout=15_000
        )
        await shot(page, "schedules")

        await page.get_by_role("button", name=f"Pause {schedule['id']}").click()
        await expect(page.locator("#schedules tr", has_text=schedule["id"])).to_contain_text("paused")
        async with dashboard.api() as api:
            assert (await api.get(f"/schedules/{schedule['id']}")).json()["status"] == "paused"
        await page.get_by_role("button", name=f"Resume {schedule['id']}").click()
        await expect(page.locator("#schedules tr", has_text=schedule["id"])).to_contain_text("active")
        await page.get_by_role("button", name=f"Delete {schedule['id']}").click()
        await expect(page.get_by_role("status")).to_contain_text("deleted")
        await expect(page.locator("#schedules")).not_to_contain_text(schedule["id"])
        async with dashboard.api() as api:
            assert (await api.get(f"/schedules/{schedule['id']}")).status_code == 404
