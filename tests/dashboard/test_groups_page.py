"""The dashboard's consumer groups in a real headless Chromium against a real server: live lag, dead letters
with the audit, a group's config and flow control, confirmations and a reset to a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from playwright.async_api import expect

from tests.dashboard.conftest import confirm, join_member, shot, until


class TestConsumerGroups:
    async def test_lag_falls_on_the_page_without_a_reload(self, page, dashboard):
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "lag.demo", "partitions": 1})).status_code == 201
            batch = [{"data": {"n": i}} for i in range(6)]
            assert (
                await api.post("/topics/lag.demo/messages/batch", json={"messages": batch})
            ).status_code == 201
            member = await join_member(api, "lag.demo", "billing")
            await page.goto(dashboard.project_url() + "/groups/lag.demo/billing")
            lag = page.get_by_test_id("total-lag")
            await expect(lag).to_have_text("6")
            await expect(page.locator("#group-live")).to_contain_text(member["memberId"])
            await shot(page, "consumer-group")
            polled = (
                await api.post(
                    "/topics/lag.demo/groups/billing/poll",
                    json={
                        "memberId": member["memberId"],
                        "generationId": member["generationId"],
                        "maxMessages": 10,
                    },
                )
            ).json()["messages"]
            assert len(polled) == 6
            acked = await api.post(
                "/topics/lag.demo/groups/billing/ack",
                json={
                    "memberId": member["memberId"],
                    "generationId": member["generationId"],
                    "ids": [m["id"] for m in polled],
                },
            )
            assert acked.status_code == 200, acked.text
            await expect(lag).to_have_text("0", timeout=15_000)  # the live panel refreshes itself
            # The lag chart kept a sample at every refresh: it went from 6 down to 0.
            samples = await page.evaluate("() => Array.from(window.dashboardCharts.lag.data[1])")
            assert samples[0] == 6 and samples[-1] == 0 and 0 in samples, samples
            await page.reload()  # the tab keeps its samples
            kept = await page.evaluate("() => Array.from(window.dashboardCharts.lag.data[1])")
            assert kept[: len(samples)] == samples, (kept, samples)
            await page.goto(dashboard.project_url() + "/groups")
            await expect(page.get_by_role("table")).to_contain_text("billing")
            await shot(page, "consumer-groups")
            # Reset is refused while the member is connected, as the API refuses it.
            await page.goto(dashboard.project_url() + "/groups/lag.demo/billing")
            await page.get_by_role("button", name="Reset offsets").click()
            await confirm(page)
            await expect(page.get_by_role("alert")).to_contain_text("connected member")


class TestDeadLetters:
    async def test_a_dead_letter_replayed_from_the_page_is_audited_as_the_user(self, page, dashboard):
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "dlq.demo", "partitions": 1})).status_code == 201
            config = {"deadLetter": {"maxRetries": 0}}
            assert (await api.put("/topics/dlq.demo/groups/workers", json=config)).status_code == 200
            assert (
                await api.post("/topics/dlq.demo/messages", json={"data": {"poison": True}})
            ).status_code == 201
            member = await join_member(api, "dlq.demo", "workers")
            ids = {"memberId": member["memberId"], "generationId": member["generationId"]}
            (message,) = (
                await api.post("/topics/dlq.demo/groups/workers/poll", json={**ids, "maxMessages": 1})
            ).json()["messages"]
            nacked = await api.post(
                "/topics/dlq.demo/groups/workers/nack",
                json={**ids, "id": message["id"], "reason": "cannot parse"},
            )
            assert nacked.status_code == 200, nacked.text

            async def dead_lettered() -> bool:
                return (await api.get("/topics/dlq.demo/groups/workers/dlq")).json()["total"] == 1

            assert await until(dead_lettered)

            await page.goto(dashboard.project_url() + "/dead-letters")
            # Other modules' topics have a group named workers too: the row of this topic's.
            row = page.get_by_role("row").filter(has_text="dlq.demo")
            await row.get_by_role("link", name="workers").click()
            await expect(page.get_by_role("heading", level=1)).to_have_text("Dead letters of workers")
            await expect(page.get_by_test_id("dlq-total")).to_have_text("1")
            table = page.locator("table.messages")
            await expect(table).to_contain_text("cannot parse")
            await expect(table).to_contain_text('"poison": true')
            await shot(page, "dead-letters")
            await page.get_by_role("button", name=f"Replay {message['id']}").click()
            await expect(page.get_by_role("status")).to_have_text(f"Replayed {message['id']}.")
            await expect(page.get_by_test_id("dlq-total")).to_have_text("0")
            audit = page.locator("#audit")
            await expect(audit).to_contain_text("replay")
            await expect(audit).to_contain_text(dashboard.email)

            entries = (await api.get("/topics/dlq.demo/groups/workers/dlq/audit")).json()["data"]
            assert entries[0]["action"] == "replay"
            assert entries[0]["messageId"] == message["id"]
            assert entries[0]["actor"]["type"] == "user"
            assert entries[0]["actor"]["id"].startswith("usr_")
            # Back to the group that failed: its member gets the message again.
            again = await api.post(
                "/topics/dlq.demo/groups/workers/poll", json={**ids, "maxMessages": 1, "waitSeconds": 5}
            )
            assert [m["id"] for m in again.json()["messages"]] == [message["id"]]

    async def test_delete_one_and_replay_all_at_a_rate(self, page, dashboard):
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "dlq.bulk", "partitions": 1})).status_code == 201
            config = {"deadLetter": {"maxRetries": 0}}
            assert (await api.put("/topics/dlq.bulk/groups/bulk", json=config)).status_code == 200
            batch = [{"data": {"n": i}} for i in range(3)]
            assert (
                await api.post("/topics/dlq.bulk/messages/batch", json={"messages": batch})
            ).status_code == 201
            member = await join_member(api, "dlq.bulk", "bulk")
            ids = {"memberId": member["memberId"], "generationId": member["generationId"]}
            polled = (
                await api.post("/topics/dlq.bulk/groups/bulk/poll", json={**ids, "maxMessages": 3})
            ).json()
            for m in polled["messages"]:
                nacked = await api.post("/topics/dlq.bulk/groups/bulk/nack", json={**ids, "id": m["id"]})
                assert nacked.status_code == 200, nacked.text

            async def dead_lettered() -> bool:
                return (await api.get("/topics/dlq.bulk/groups/bulk/dlq")).json()["total"] == 3

            assert await until(dead_lettered)
            first = polled["messages"][0]["id"]
            await page.goto(dashboard.project_url() + "/dead-letters/dlq.bulk/bulk")
            await page.get_by_role("button", name=f"Delete {first}").click()
            await confirm(page)
            await expect(page.get_by_role("status")).to_have_text(f"Deleted {first}.")
            await expect(page.get_by_test_id("dlq-total")).to_have_text("2")
            await page.get_by_label("Rate (messages per second, blank for no limit)").fill("20")
            await page.get_by_role("button", name="Replay all").click()
            await confirm(page)
            await expect(page.get_by_role("status")).to_have_text("Replayed 2 dead letters.")
            await expect(page.get_by_test_id("dlq-total")).to_have_text("0")
            entries = (await api.get("/topics/dlq.bulk/groups/bulk/dlq/audit")).json()["data"]
            assert [(e["action"], e.get("count"), e["actor"]["type"]) for e in entries] == [
                ("replay_all", 2, "user"),
                ("delete", None, "user"),
            ]


class TestGroupConfig:
    async def test_config_saved_on_the_page_is_what_the_api_answers(self, page, dashboard):
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "config.demo", "partitions": 1})
            ).status_code == 201
            assert (await api.put("/topics/config.demo/groups/audit-log", json={})).status_code == 200
            await page.goto(dashboard.project_url() + "/groups/config.demo/audit-log")
            await page.get_by_label("Ack timeout").fill("45s")
            await page.get_by_label("Dead-letter queue").check()
            await page.get_by_label("Max retries").fill("2")
            await page.get_by_label("Retry delay").fill("5s")
            await page.get_by_role("button", name="Save configuration").click()
            await expect(page.get_by_role("status")).to_have_text("Configuration saved.")
            config = (await api.get("/topics/config.demo/groups/audit-log")).json()["config"]
            assert config["ackTimeout"] == "45s"
            assert config["deadLetter"]["maxRetries"] == 2
            assert config["deadLetter"]["retryDelay"] == "5s"
            await page.get_by_label("Ack timeout").fill("soon")
            await page.get_by_label("Max retries").fill("3")
            await page.get_by_role("button", name="Save configuration").click()
            alert = page.get_by_role("alert")
            await expect(alert).to_contain_text("ackTimeout")
            assert (await alert.inner_text()).count("ackTimeout") == 1  # said once, not twice
            await expect(page.get_by_label("Ack timeout")).to_have_value("soon")  # what was typed
            await expect(page.get_by_label("Max retries")).to_have_value("3")
            await page.goto(dashboard.project_url() + "/groups/config.demo/audit-log")
            # No member is connected: the reset goes through.
            await page.get_by_label("Reset to").select_option("latest")
            await page.get_by_role("button", name="Reset offsets").click()
            await confirm(page)
            await expect(page.get_by_role("status")).to_have_text("Offsets reset.")


class TestGroupFlowControl:
    async def test_flow_control_and_filter_saved_on_the_page_with_the_filter_checked_as_typed(
        self, page, dashboard
    ):
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "flow.demo", "partitions": 1})).status_code == 201
            assert (await api.put("/topics/flow.demo/groups/flow-group", json={})).status_code == 200
            await page.goto(dashboard.project_url() + "/groups/flow.demo/flow-group")
            editor = page.get_by_label("Filter")
            # Checked by the server as it is typed: what is wrong, and where.
            await editor.fill('headers.type = "order" AND')
            check = page.locator("#filter-check")
            await expect(check).to_contain_text("at position 27")
            await expect(check).to_have_class("field-error")
            await editor.fill('headers.type = "order"')
            await expect(check).to_have_text("Valid filter.")
            await page.get_by_label("Max in flight").fill("25")
            await page.get_by_label("Rate (messages per second)").fill("2.5")
            await page.get_by_role("button", name="Save flow control").click()
            await expect(page.get_by_role("status")).to_have_text("Flow control saved.")
            config = (await api.get("/topics/flow.demo/groups/flow-group")).json()["config"]
            assert (config["maxInFlight"], config["rate"], config["filter"]) == (
                25,
                2.5,
                'headers.type = "order"',
            )
            await expect(page.get_by_test_id("flow-summary")).to_contain_text("max 25 in flight")
            # A refused save: the error beside the field, what was typed kept, nothing saved.
            await page.get_by_label("Filter").fill('key = "a" OR')
            await page.get_by_label("Max in flight").fill("7")
            await page.get_by_role("button", name="Save flow control").click()
            await expect(page.locator("#filter-check")).to_contain_text("at position 13")
            await expect(page.get_by_label("Filter")).to_have_value('key = "a" OR')
            await expect(page.get_by_label("Max in flight")).to_have_value("7")
            config = (await api.get("/topics/flow.demo/groups/flow-group")).json()["config"]
            assert config["maxInFlight"] == 25 and config["filter"] == 'headers.type = "order"'
            await page.get_by_label("Max in flight").fill("0")
            await page.get_by_label("Filter").fill("")
            await page.get_by_role("button", name="Save flow control").click()
            await expect(page.locator("#max-in-flight-error")).to_contain_text("between 1 and 100000")
            # Empty fields remove the settings.
            await page.get_by_label("Max in flight").fill("")
            await page.get_by_label("Rate (messages per second)").fill("")
            await page.get_by_role("button", name="Save flow control").click()
            await expect(page.get_by_role("status")).to_have_text("Flow control saved.")
            config = (await api.get("/topics/flow.demo/groups/flow-group")).json()["config"]
            assert (config["maxInFlight"], config["rate"], config["filter"]) == (None, None, None)


class TestConfirmationsAndResetByTime:
    async def test_a_styled_dialog_not_the_browsers_and_cancel_leaves_it(self, page, dashboard):
        browser_dialogs: list[str] = []
        page.on("dialog", lambda dialog: browser_dialogs.append(dialog.message))
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "time.reset", "partitions": 1})
            ).status_code == 201
            batch = [{"data": {"n": i}} for i in range(3)]
            assert (
                await api.post("/topics/time.reset/messages/batch", json={"messages": batch})
            ).status_code == 201
            assert (await api.put("/topics/time.reset/groups/rewinder", json={})).status_code == 200
            moved = await api.post("/topics/time.reset/groups/rewinder/offsets/reset", json={"to": "latest"})
            assert moved.status_code == 200, moved.text
            await page.goto(dashboard.project_url() + "/groups/time.reset/rewinder")
            await page.get_by_label("Reset to").select_option("time")
            an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
            await page.get_by_label('Time, UTC (for "a time")').fill(
                an_hour_ago.strftime("%Y-%m-%dT%H:%M:%S")
            )
            await page.get_by_role("button", name="Reset offsets").click()
            dialog = page.get_by_role("dialog")
            await expect(dialog).to_contain_text("Reset the offsets of group rewinder?")
            await shot(page, "confirmation")
            await dialog.get_by_role("button", name="Cancel").click()
            await expect(dialog).to_be_hidden()
            offsets = (await api.get("/topics/time.reset/groups/rewinder/offsets")).json()["data"]
            assert [o["current"] for o in offsets] == [3]  # cancelled: nothing moved
            await page.get_by_role("button", name="Reset offsets").click()
            await confirm(page)
            await expect(page.get_by_role("status")).to_have_text("Offsets moved to the time.")
            offsets = (await api.get("/topics/time.reset/groups/rewinder/offsets")).json()["data"]
            assert [(o["current"], o["lag"]) for o in offsets] == [(0, 3)]  # the first message after it
        assert browser_dialogs == []
