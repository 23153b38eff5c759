"""The group page's pause and resume buttons and state, its DLQ breaker settings, and the dead-letter
page's attempt history, in a real browser against a real server."""

from __future__ import annotations

from playwright.async_api import expect

from tests.dashboard.conftest import join_member, until


class TestPauseOnTheGroupPage:
    async def test_pause_and_resume_from_the_page(self, page, dashboard):
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "pause.demo", "partitions": 1})
            ).status_code == 201
            assert (await api.put("/topics/pause.demo/groups/workers", json={})).status_code == 200
            await page.goto(dashboard.project_url() + "/groups/pause.demo/workers")
            await expect(page.get_by_test_id("group-state")).to_have_text("delivering")
            await page.get_by_role("button", name="Pause group").click()
            await expect(page.get_by_role("status")).to_contain_text("Group paused")
            await expect(page.get_by_test_id("group-state")).to_have_text("paused")
            described = (await api.get("/topics/pause.demo/groups/workers")).json()
            assert (described["paused"], described["pausedReason"]) == (True, "user")
            await page.get_by_role("button", name="Resume group").click()
            await expect(page.get_by_role("status")).to_contain_text("Group resumed")
            await expect(page.get_by_test_id("group-state")).to_have_text("delivering")
            assert (await api.get("/topics/pause.demo/groups/workers")).json()["paused"] is False

    async def test_the_breaker_settings_are_kept_and_can_be_turned_off(self, page, dashboard):
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "breaker.demo", "partitions": 1})
            ).status_code == 201
            config = {"deadLetter": {"maxRetries": 2, "breaker": {"minAttempts": 7, "window": "5m"}}}
            assert (await api.put("/topics/breaker.demo/groups/workers", json=config)).status_code == 200
            await page.goto(dashboard.project_url() + "/groups/breaker.demo/workers")
            await expect(page.get_by_label("Breaker minimum deliveries")).to_have_value("7")
            await page.get_by_role("button", name="Save configuration").click()  # unchanged: kept
            await expect(page.get_by_role("status")).to_contain_text("Configuration saved")
            kept = (await api.get("/topics/breaker.demo/groups/workers")).json()["config"]["deadLetter"]
            assert kept["breaker"] == {"failureRate": 0.5, "minAttempts": 7, "window": "5m"}
            await page.get_by_label("DLQ breaker (pause when too many deliveries fail)").uncheck()
            await page.get_by_role("button", name="Save configuration").click()
            await expect(page.get_by_role("status")).to_contain_text("Configuration saved")
            off = (await api.get("/topics/breaker.demo/groups/workers")).json()["config"]["deadLetter"]
            assert off["breaker"] is None and off["maxRetries"] == 2


class TestDeadLetterHistory:
    async def test_every_failed_attempt_is_listed(self, page, dashboard):
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "history.demo", "partitions": 1})
            ).status_code == 201
            config = {"deadLetter": {"maxRetries": 1, "retryDelay": "0s"}}
            assert (await api.put("/topics/history.demo/groups/workers", json=config)).status_code == 200
            assert (await api.post("/topics/history.demo/messages", json={"data": 1})).status_code == 201
            member = await join_member(api, "history.demo", "workers")
            ids = {"memberId": member["memberId"], "generationId": member["generationId"]}
            for reason in ("first try failed", "second try failed"):
                (message,) = (
                    await api.post(
                        "/topics/history.demo/groups/workers/poll",
                        json={**ids, "maxMessages": 1, "waitSeconds": 5},
                    )
                ).json()["messages"]
                nacked = await api.post(
                    "/topics/history.demo/groups/workers/nack",
                    json={**ids, "id": message["id"], "reason": reason},
                )
                assert nacked.status_code == 200, nacked.text

            async def dead_lettered() -> bool:
                return (await api.get("/topics/history.demo/groups/workers/dlq")).json()["total"] == 1

            assert await until(dead_lettered)
            await page.goto(dashboard.project_url() + "/dead-letters/history.demo/workers")
            attempts = page.get_by_test_id("attempts").locator("li")
            await expect(attempts).to_have_count(2)
            await expect(attempts.nth(0)).to_contain_text("first try failed")
            await expect(attempts.nth(1)).to_contain_text("second try failed")
