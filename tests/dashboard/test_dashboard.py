"""The dashboard in a real headless Chromium against a real server: sign-in, keys, topics and the message
browser, tenant isolation, every page's headings, labels and assets, security headers and CSRF. (Groups
and dead letters are ``test_groups_page.py``; projects, usage, quotas and alerts ``test_account.py``.)"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from playwright.async_api import expect

from tests.dashboard.conftest import EXTERNAL, UNLABELLED, confirm, shot, sign_in, until

NAV = ["Topics", "Consumer groups", "Dead letters", "API keys", "Usage", "Alerts", "Schedules"]


class TestSignIn:
    async def test_wrong_password_is_refused_and_the_right_one_opens_the_projects_topics(
        self, browser, dashboard
    ):
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(dashboard.url + "/topics-nowhere")
        await sign_in(page, dashboard, password="not-the-password")
        await expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        await shot(page, "login")
        await sign_in(page, dashboard)
        await page.wait_for_url(f"**/p/{dashboard.project_id}/development/topics")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Topics")
        nav = page.get_by_role("navigation", name="Sections")
        assert [link.strip() for link in await nav.get_by_role("link").all_inner_texts()] == NAV
        cookie = next(c for c in await context.cookies() if c["name"] == "qc_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        await page.get_by_role("button", name="Sign out").click()
        await page.wait_for_url("**/dashboard/login**")
        await page.goto(dashboard.project_url() + "/keys")
        await page.wait_for_url("**/dashboard/login**")  # signed out: back to the sign-in page
        await context.close()

    async def test_repeated_failures_make_even_the_right_password_wait_but_never_lock_it_out(
        self, browser, dashboard
    ):
        context = await browser.new_context()
        page = await context.new_page()
        for _ in range(5):
            await sign_in(page, dashboard, dashboard.lockout_email, "wrong-password-123")
            await expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        await sign_in(page, dashboard, dashboard.lockout_email, dashboard.lockout_password)
        await expect(page.get_by_role("alert")).to_contain_text(
            "Too many sign-in attempts. Try again in 1 second"
        )
        assert "/login" in page.url
        await asyncio.sleep(1.1)  # a backoff, not a 15-minute lockout (tests/dashboard/test_sign_in.py)
        await sign_in(page, dashboard, dashboard.lockout_email, dashboard.lockout_password)
        await page.wait_for_url(lambda url: "/login" not in url)
        await context.close()

    async def test_only_failures_count_and_a_success_clears_them(self, browser, dashboard):
        email, password = dashboard.returning_email, dashboard.returning_password

        async def attempt(given: str) -> str:
            context = await browser.new_context()
            page = await context.new_page()
            await sign_in(page, dashboard, email, given)
            await page.wait_for_load_state()
            url = page.url
            alert = await page.get_by_role("alert").all_inner_texts()
            await context.close()
            return "signed in" if "/login" not in url else " ".join(alert)

        # One failure, then five successes: successes never count toward the lockout.
        assert await attempt("wrong-password-123") == "Wrong email or password."
        assert [await attempt(password) for _ in range(5)] == ["signed in"] * 5
        # Four failures, a success, four more failures: the success cleared the first four.
        for _ in range(4):
            assert await attempt("wrong-password-123") == "Wrong email or password."
        assert await attempt(password) == "signed in"
        for _ in range(4):
            assert await attempt("wrong-password-123") == "Wrong email or password."
        assert await attempt(password) == "signed in"

    async def test_a_tampered_session_cookie_is_no_session(self, browser, signed_in, dashboard):
        (cookie,) = [c for c in await signed_in.cookies() if c["name"] == "qc_session"]
        body, _, mac = cookie["value"].rpartition(".")
        context = await browser.new_context()
        forged = {**cookie, "value": body[:-2] + ("AA" if body[-2:] != "AA" else "BB") + "." + mac}
        await context.add_cookies([forged])
        page = await context.new_page()
        await page.goto(dashboard.project_url() + "/keys")
        assert "/dashboard/login" in page.url
        await context.add_cookies([cookie])  # the genuine one still opens the page
        await page.goto(dashboard.project_url() + "/keys")
        await expect(page.get_by_role("heading", level=1)).to_have_text("API keys")
        await context.close()

    async def test_the_environment_switcher_scopes_the_page(self, page, dashboard):
        await page.goto(dashboard.project_url() + "/keys")
        await page.get_by_label("Environment").select_option("production")
        await page.wait_for_url(f"**/p/{dashboard.project_id}/production/keys")
        await expect(page.get_by_role("table")).to_contain_text("pq_live_sk_")
        await expect(page.get_by_role("table")).not_to_contain_text("pq_test_sk_")


class TestApiKeys:
    async def test_a_new_key_is_shown_once_and_refused_by_the_api_once_revoked(self, page, dashboard):
        await page.goto(dashboard.project_url("staging") + "/keys")
        await expect(page.get_by_role("heading", name="Rotating a key without downtime")).to_be_visible()
        await page.get_by_role("button", name="Create a staging key").click()
        secret = await page.get_by_label("New API key").input_value()
        assert re.fullmatch(r"pq_test_sk_[0-9A-Za-z]{32}", secret)
        await shot(page, "api-keys")
        async with httpx.AsyncClient() as client:
            ok = await client.get(
                dashboard.server.url + "/v1/topics", headers={"Authorization": f"Bearer {secret}"}
            )
        assert ok.status_code == 200
        await page.goto(dashboard.project_url("staging") + "/keys")
        assert secret not in await page.content()  # shown once
        display = f"pq_test_sk_…{secret[-4:]}"
        row = page.locator("tr", has_text=display)
        await row.get_by_role("button", name=f"Revoke {display}").click()
        await confirm(page)
        await expect(page.get_by_role("status")).to_contain_text("revoked")
        await expect(page.locator("tr", has_text=display)).to_contain_text("revoked")

        async def refused() -> bool:
            r = await anonymous.get("/v1/topics", headers={"Authorization": f"Bearer {secret}"})
            return r.status_code == 401 and r.json()["error"]["code"] == "INVALID_API_KEY"

        async with httpx.AsyncClient(base_url=dashboard.server.url) as anonymous:
            assert await until(refused, 5)


class TestTopics:
    async def test_create_publish_and_find_the_message_in_the_browser(self, page, dashboard):
        await page.goto(dashboard.project_url() + "/topics")
        await page.get_by_label("Name").fill("orders.created")
        await page.get_by_label("Partitions").fill("2")
        await expect(page.get_by_label("Replicas")).to_have_value(
            "1"
        )  # the only count the local engine offers
        await page.get_by_role("button", name="Create topic").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Topic orders.created")
        await expect(page.locator("p.meta")).to_contain_text(
            "2 partitions · 1 replica ·"
        )  # the local engine's
        await page.get_by_label("Key (optional)").fill("customer-7")
        await page.get_by_label("Headers (JSON object, optional)").fill('{"source": "dashboard-test"}')
        await page.get_by_label("Data (JSON)").fill('{"order": 4242, "items": ["tea", "cake"]}')
        await page.get_by_role("button", name="Publish", exact=True).click()
        notice = await page.get_by_role("status").inner_text()
        partition = re.search(r"to partition (\d+) at offset (\d+)", notice)
        assert partition, notice
        # The browser opens at the message just published, not at "No messages from there.".
        await expect(page.locator("table.messages")).to_contain_text('"order": 4242')
        await page.goto(dashboard.project_url() + "/topics/orders.created?notice=Hello")
        await expect(page.locator("body")).not_to_contain_text("No messages from there.")
        await page.get_by_label("Partition", exact=True).select_option(partition.group(1))
        await page.get_by_label("From offset").fill(partition.group(2))
        await page.get_by_role("button", name="Read").click()
        messages = page.locator("table.messages")
        await expect(messages).to_contain_text('"order": 4242')
        await expect(messages).to_contain_text("customer-7")
        await expect(messages).to_contain_text("dashboard-test")
        await shot(page, "topic")
        # From a time: an hour ago starts at the partition's first message.
        await page.get_by_label("From offset").fill("")
        an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
        await page.get_by_label("Or from time (UTC)").fill(an_hour_ago.strftime("%Y-%m-%dT%H:%M:%S"))
        await page.get_by_role("button", name="Read").click()
        await expect(messages).to_contain_text('"order": 4242')
        await page.get_by_label("Or from time (UTC)").fill(
            (an_hour_ago + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
        )
        await page.get_by_role("button", name="Read").click()
        await expect(messages).to_contain_text("No messages from there.")
        await page.goto(dashboard.project_url() + "/topics")
        await expect(page.locator("#topics-table")).to_contain_text("orders.created")
        await shot(page, "topics")

    async def test_the_name_pattern_is_the_servers_and_valid_in_chromium(self, page, dashboard):
        console: list[str] = []
        page.on("console", lambda message: console.append(message.text))
        await page.goto(dashboard.project_url() + "/topics")
        name = page.get_by_label("Name")
        await name.fill("Orders")  # capitals: the server refuses them, so the browser does too
        assert await name.evaluate("el => el.validity.patternMismatch")
        await name.fill("orders.ok_2-b")
        assert not await name.evaluate("el => el.validity.patternMismatch")
        assert [m for m in console if "pattern" in m.lower()] == []

    async def test_a_refused_form_says_why_once_and_keeps_what_was_typed(self, page, dashboard):
        await page.goto(dashboard.project_url() + "/topics")
        # Past the browser's check (as a browser without it would be), to the server's refusal.
        await page.get_by_label("Name").evaluate("el => el.removeAttribute('pattern')")
        await page.get_by_label("Name").fill("Bad Name")
        await page.get_by_label("Partitions").fill("5")
        await page.get_by_label("Retention").fill("2d")
        await page.get_by_role("button", name="Create topic").click()
        alert = page.get_by_role("alert")
        await expect(alert).to_contain_text("Invalid value for 'name'")
        assert (await alert.inner_text()).count("1–249") == 1
        await expect(page.get_by_label("Name")).to_have_value("Bad Name")
        await expect(page.get_by_label("Partitions")).to_have_value("5")
        await expect(page.get_by_label("Retention")).to_have_value("2d")
        async with dashboard.api() as api:
            assert (
                await api.post("/topics", json={"name": "publish.kept", "partitions": 1})
            ).status_code == 201
        await page.goto(dashboard.project_url() + "/topics/publish.kept")
        await page.get_by_label("Key (optional)").fill("k-1")
        await page.get_by_label("Data (JSON)").fill('{"almost": json')
        await page.get_by_role("button", name="Publish", exact=True).click()
        await expect(page.get_by_role("alert")).to_contain_text("Not valid JSON")
        await expect(page.get_by_label("Key (optional)")).to_have_value("k-1")
        await expect(page.get_by_label("Data (JSON)")).to_have_value('{"almost": json')

    @pytest.mark.parametrize(
        ("data", "headers", "says"),
        [
            ("[" * 300 + "]" * 300, "", "nested deeper than 64"),
            ('{"n": 18446744073709551616}', "", "64 bits"),
            ('"\\ud800"', "", "Not valid JSON"),
            ("NaN", "", "Not valid JSON"),
            ('{"big": -Infinity}', "", "Not valid JSON"),
            ("1", '{"a": {"b": 1}}', "string values"),
            ("1", "[1, 2]", "string values"),
        ],
    )
    async def test_the_publish_form_refuses_what_the_api_refuses(self, page, dashboard, data, headers, says):
        async with dashboard.api() as api:
            created = await api.post("/topics", json={"name": "publish.refused", "partitions": 1})
            assert created.status_code in (201, 409), created.text
        answers: list[int] = []
        page.on("response", lambda r: answers.append(r.status) if r.request.method == "POST" else None)
        await page.goto(dashboard.project_url() + "/topics/publish.refused")
        await page.get_by_label("Headers (JSON object, optional)").fill(headers)
        await page.get_by_label("Data (JSON)").fill(data)
        await page.get_by_role("button", name="Publish", exact=True).click()
        await expect(page.get_by_role("alert")).to_contain_text(says)
        assert answers and 500 not in answers, answers
        async with dashboard.api() as api:
            described = (await api.get("/topics/publish.refused")).json()
        assert described["partitionDetails"][0]["latestOffset"] == 0

    async def test_pages_by_offset_and_a_search_by_key_and_header_in_a_range(self, page, dashboard):
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "paged", "partitions": 1})).status_code == 201
            for first in (0, 60):
                batch = [
                    {"data": {"i": i}, "key": f"k-{i % 3}", "headers": {"kind": "odd" if i % 2 else "even"}}
                    for i in range(first, first + 60)
                ]
                published = await api.post("/topics/paged/messages/batch", json={"messages": batch})
                assert published.status_code == 201, published.text
        await page.goto(dashboard.project_url() + "/topics/paged?partition=0")
        offsets = page.locator("table.messages tbody tr td:first-child")

        async def shown() -> list[int]:
            return [int(text.split()[0]) for text in await offsets.all_inner_texts()]

        pager = page.get_by_role("navigation", name="Message pages")
        await expect(offsets).to_have_count(50)
        assert await shown() == list(range(50))
        await expect(pager.get_by_role("link", name="Previous page")).to_have_count(0)
        await pager.get_by_role("link", name="Next page").click()
        await expect(offsets.first).to_have_text(re.compile(r"^50\D"))
        assert await shown() == list(range(50, 100))
        await pager.get_by_role("link", name="Previous page").click()
        await expect(offsets.first).to_have_text(re.compile(r"^0\D"))
        await pager.get_by_role("link", name="Next page").click()
        await pager.get_by_role("link", name="Next page").click()
        await expect(offsets.first).to_have_text(re.compile(r"^100\D"))
        assert await shown() == list(range(100, 120))
        await expect(pager.get_by_role("link", name="Next page")).to_have_count(0)
        # Search: key k-1 and header kind=odd among offsets 0-59: i = 1, 7, 13, ... 55.
        await page.get_by_label("From offset").fill("0")
        await page.get_by_label("To offset (search, exclusive)").fill("60")
        await page.get_by_label("Search: key").fill("k-1")
        await page.get_by_label("Search: header (name or name=value)").fill("kind=odd")
        await page.get_by_role("button", name="Read").click()
        await expect(page.get_by_test_id("search-summary")).to_have_text(
            "10 matching of 60 messages scanned."
        )
        assert await shown() == list(range(1, 60, 6))
        await page.get_by_label("Search: key").fill("nobody")
        await page.get_by_role("button", name="Read").click()
        await expect(page.locator("table.messages")).to_contain_text("No matching messages there.")

    async def test_deleting_a_topic_needs_its_name(self, page, dashboard):
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": "to.delete", "partitions": 1})).status_code == 201
        await page.goto(dashboard.project_url() + "/topics/to.delete")
        await page.get_by_label("Type to.delete to confirm").fill("wrong")
        await page.get_by_role("button", name="Delete topic to.delete").click()
        await expect(page.get_by_role("alert")).to_contain_text("Type the topic's name")
        await page.get_by_label("Type to.delete to confirm").fill("to.delete")
        await page.get_by_role("button", name="Delete topic to.delete").click()
        await expect(page.get_by_role("status")).to_have_text("Topic to.delete deleted.")
        async with dashboard.api() as api:
            assert (await api.get("/topics/to.delete")).status_code == 404


class TestIsolation:
    async def test_another_accounts_project_is_404(self, page, dashboard):
        for path in ("/topics", "/keys", "/dead-letters"):
            response = await page.goto(f"{dashboard.url}/p/{dashboard.other_project_id}/development{path}")
            assert response is not None and response.status == 404
            await expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
        assert (await page.goto(f"{dashboard.url}/p/{dashboard.project_id}/nowhere/topics")).status == 404

    async def test_a_form_without_the_csrf_token_is_refused(self, page, dashboard):
        await page.goto(dashboard.project_url("development") + "/keys")
        before = await page.locator("tbody tr").count()
        refused = await page.request.post(dashboard.project_url("development") + "/keys", form={"other": "x"})
        assert refused.status == 403
        forged = await page.request.post(
            dashboard.project_url("development") + "/keys", form={"csrf_token": "forged"}
        )
        assert forged.status == 403
        await page.reload()
        assert await page.locator("tbody tr").count() == before
        async with httpx.AsyncClient() as client:
            anonymous = await client.post(
                dashboard.url + "/login", data={"email": dashboard.email, "password": dashboard.password}
            )
        assert anonymous.status_code == 403  # sign-in needs its double-submit token too


class TestEveryPage:
    async def test_has_a_heading_labelled_controls_and_only_local_assets(self, page, dashboard):
        async with dashboard.api() as api:
            await api.post("/topics", json={"name": "pages.demo", "partitions": 1})
            await api.put("/topics/pages.demo/groups/readers", json={"deadLetter": {}})
        paths = [
            "/topics",
            "/topics/pages.demo?partition=0",
            "/groups",
            "/groups/pages.demo/readers",
            "/dead-letters",
            "/dead-letters/pages.demo/readers",
            "/keys",
            "/usage",
            "/alerts",
        ]
        for path in paths:
            response = await page.goto(dashboard.project_url() + path)
            assert response is not None and response.status == 200, path
            await expect(page.get_by_role("heading", level=1)).to_have_count(1)
            assert await page.evaluate(UNLABELLED) == [], path
            assert await page.evaluate(EXTERNAL) == [], path
            assert await page.evaluate("() => typeof htmx") == "object", path  # served from static/vendor


SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


class TestSecurityHeaders:
    async def test_every_answer_forbids_framing_and_sniffing(self, signed_in, dashboard):
        cookies = {c["name"]: c["value"] for c in await signed_in.cookies()}
        async with httpx.AsyncClient(cookies=cookies, timeout=30) as http:
            answers = [
                await http.get(dashboard.project_url() + "/topics"),  # a page
                await http.get(dashboard.project_url() + "/topics-table"),  # an htmx partial
                await http.get(dashboard.url + "/login"),  # signed in: a redirect
                await http.get(dashboard.url + "/p/prj_nope/development/topics"),  # the 404 page
                await http.get(dashboard.url + "/static/app.js"),
                await http.get(dashboard.url + "/static/vendor/htmx.min.js"),
            ]
        async with httpx.AsyncClient(timeout=30) as anonymous:
            answers.append(await anonymous.get(dashboard.project_url() + "/keys"))  # signed out: redirect
            answers.append(await anonymous.get(dashboard.url + "/login"))
        for answer in answers:
            for name, value in SECURITY_HEADERS.items():
                assert answer.headers.get(name) == value, (answer.url, name)
            policy = answer.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in policy, answer.url
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy, answer.url

    async def test_the_pages_work_under_the_policy_with_no_violation(self, page, dashboard):
        violations: list[str] = []
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        await page.add_init_script(
            "document.addEventListener('securitypolicyviolation', e => "
            "console.error('Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
        )
        async with dashboard.api() as api:
            await api.post("/topics", json={"name": "csp.demo", "partitions": 1})
            await api.post("/topics/csp.demo/messages", json={"data": {"n": 1}})
        for path in ("/topics", "/topics/csp.demo?partition=0", "/groups", "/keys", "/usage", "/alerts"):
            response = await page.goto(dashboard.project_url() + path)
            assert response is not None and response.status == 200, path
            assert await page.evaluate("() => typeof htmx") == "object", path
        # The usage charts are drawn by app.js and uPlot from the JSON data block: scripts ran.
        await page.goto(dashboard.project_url() + "/usage?window=hour")
        await expect(page.locator(".chart canvas").first).to_be_visible()
        # htmx works (a partial swapped in by an hx-get) and did not inject its inline <style>.
        assert await page.evaluate("() => document.querySelectorAll('head style').length") == 0
        assert violations == []

    async def test_a_page_cannot_be_framed(self, browser, dashboard):
        context = await browser.new_context()
        page = await context.new_page()
        blocked: list[str] = []
        page.on("console", lambda m: blocked.append(m.text) if "frame-ancestors" in m.text else None)
        await page.goto(dashboard.server.url + "/v1/health")  # another page of the same server
        await page.set_content(f'<iframe src="{dashboard.url}/login"></iframe>')
        await until(lambda: asyncio.sleep(0, blocked), 5)
        frame = page.frames[-1]
        assert blocked or "Sign in" not in await frame.content()
        await context.close()
