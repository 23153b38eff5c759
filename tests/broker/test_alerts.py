"""Alert webhooks, the domain: signing, the outbox dispatcher against a real local HTTP receiver, retries with
backoff, the circuit breaker, giving up, and the SSRF rule. Time is injected; nothing sleeps through a
backoff. Each test gets its own metadata store (SQLite and Postgres), with no server's dispatcher around."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.broker import alerts
from app.broker.errors import AlertEndpointNotFound, InvalidRequest
from app.cli import migrate
from app.main import build_alert_policy
from app.settings import Environment
from app.stores.metadata.alert_repositories import AlertRepository
from app.stores.metadata.database import SqlMetadataStore
from tests.conftest import settings_for
from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.factories import make_project
from tests.fixtures.webhooks import Receiver

policy = build_alert_policy  # the one place the settings become the policy

DOCS = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * 1000)


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request, tmp_path) -> AsyncIterator[tuple[SqlMetadataStore, object]]:
    name = ""
    url = ""
    if request.param == "postgres":
        name = f"qc_alerts_{secrets.token_hex(4)}"
        await create_database(name)
        url = database_url(name)
    settings = settings_for(
        request.param,
        tmp_path,
        url,
        alert_breaker_threshold=3,
        alert_breaker_cooldown_seconds=60,
        alert_backoff_base_seconds=2,
        alert_max_attempts=4,
    )
    await asyncio.to_thread(migrate, settings)
    metadata = SqlMetadataStore(settings.resolved_database_url)
    yield metadata, settings
    await metadata.close()
    if name:
        await drop_database(name)


@pytest.fixture
async def project(store):
    metadata, settings = store
    return await make_project(metadata, settings.server_secret())


ENV = "production"


async def setup_endpoint(metadata, settings, project_id, url, secret="s" * 24, environment=ENV):
    async with metadata.unit() as uow:
        return await alerts.set_endpoint(uow, policy(settings), project_id, environment, url, secret)


async def queue(metadata, project_id, kind="test", environment=ENV, **data):
    async with metadata.unit() as uow:
        return await alerts.enqueue(
            uow, project_id=project_id, environment=environment, event_type=kind, data=data
        )


async def delivery_log(metadata, project_id, environment=ENV):
    async with metadata.unit(readonly=True) as uow:
        return (await alerts.deliveries(uow, project_id, environment, limit=100)).entries


def docs_verify():
    """The verification example of docs/alerts.md, executed as written."""
    block = re.search(r"## Verifying signatures.*?```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert block, "docs/alerts.md lost its verification example"
    code = block.group(1)
    assert len(code.strip().splitlines()) <= 10
    namespace: dict[str, object] = {}
    exec(compile(code, str(DOCS), "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace["verify"]


class TestDelivery:
    async def test_an_event_is_posted_signed_and_recorded(self, store, project, receiver: Receiver):
        metadata, settings = store
        clock = Clock()
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings), clock=clock)
        try:
            await setup_endpoint(metadata, settings, project.project_id, receiver.url)
            event_id = await queue(metadata, project.project_id, "dlq.threshold_reached", depth=3)
            assert event_id.startswith("evt_")
            assert await dispatcher.run_once() == 1
            [got] = receiver.received
            event = json.loads(got.body)
            assert event["id"] == event_id and event["type"] == "dlq.threshold_reached"
            assert event["projectId"] == project.project_id and event["data"] == {"depth": 3}
            assert got.headers["Content-Type"] == "application/json"
            assert got.headers["QueueCore-Event-Id"] == event_id
            assert got.headers["User-Agent"] == "QueueCore-Webhooks/1"
            verify = docs_verify()
            assert verify("s" * 24, got.headers["QueueCore-Signature"], got.body)
            assert not verify("t" * 24, got.headers["QueueCore-Signature"], got.body)
            assert not verify("s" * 24, got.headers["QueueCore-Signature"], got.body + b" ")
            [attempt] = await delivery_log(metadata, project.project_id)
            assert attempt["ok"] and attempt["statusCode"] == 200 and attempt["attempt"] == 1
            assert await dispatcher.run_once() == 0  # delivered once
        finally:
            await dispatcher.close()

    async def test_failures_are_retried_with_backoff_until_delivered(self, store, project, receiver):
        metadata, settings = store
        clock = Clock()
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings), clock=clock)
        try:
            await setup_endpoint(metadata, settings, project.project_id, receiver.url)
            receiver.script = [500, 503]
            await queue(metadata, project.project_id)
            assert await dispatcher.run_once() == 1  # fails: 500
            assert await dispatcher.run_once() == 0  # not due yet
            clock.advance(2 * 0.79)
            assert await dispatcher.run_once() == 0  # the first backoff is 2 s ± 20 %
            clock.advance(2 * 0.42)
            assert await dispatcher.run_once() == 1  # fails: 503
            clock.advance(4 * 0.79)
            assert await dispatcher.run_once() == 0  # the second is 4 s ± 20 %
            clock.advance(4 * 0.42)
            assert await dispatcher.run_once() == 1  # delivered
            attempts = await delivery_log(metadata, project.project_id)
            assert [(a["attempt"], a["ok"], a["statusCode"]) for a in attempts] == [
                (3, True, 200),
                (2, False, 503),
                (1, False, 500),
            ]
            assert attempts[1]["error"] == "HTTP 503"
        finally:
            await dispatcher.close()

    async def test_an_unreachable_endpoint_is_given_up_after_max_attempts(self, store, project):
        metadata, settings = store
        clock = Clock()
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings), clock=clock)
        closed = Receiver()
        url = closed.url
        closed.server.server_close()  # nothing listens there
        try:
            await setup_endpoint(metadata, settings, project.project_id, url)
            await queue(metadata, project.project_id)
            for _ in range(settings.alert_max_attempts):
                assert await dispatcher.run_once() == 1
                clock.advance(120)  # past the backoff and the breaker's cooldown
            assert await dispatcher.run_once() == 0
            attempts = await delivery_log(metadata, project.project_id)
            assert len(attempts) == settings.alert_max_attempts
            assert all(not a["ok"] and a["statusCode"] is None and a["error"] for a in attempts)
        finally:
            await dispatcher.close()


class TestIsolation:
    async def test_a_hanging_endpoint_holds_up_no_other_project(self, store, project, receiver):
        metadata, settings = store
        other = await make_project(metadata, settings.server_secret())
        slow = Receiver().start()
        slow.delay = 3
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings))
        try:
            await setup_endpoint(metadata, settings, project.project_id, slow.url)
            await setup_endpoint(metadata, settings, other.project_id, receiver.url)
            await queue(metadata, project.project_id)
            assert await dispatcher.run_once(wait=False) == 1  # sending, hanging
            await queue(metadata, other.project_id)
            assert await dispatcher.run_once(wait=False) == 1
            await receiver.arrival("test", seconds=2)
            for _ in range(40):
                if await delivery_log(metadata, other.project_id):
                    break
                await asyncio.sleep(0.05)
            [attempt] = await delivery_log(metadata, other.project_id)
            assert attempt["ok"]
            assert await delivery_log(metadata, project.project_id) == []  # still waiting on its answer
        finally:
            await dispatcher.close()
            slow.delay = 0
            slow.stop()


class TestBreaker:
    async def test_opens_after_failures_in_a_row_probes_half_open_and_closes(self, store, project, receiver):
        metadata, settings = store
        clock = Clock()
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings), clock=clock)

        async def state() -> str:
            async with metadata.session(readonly=True) as session:
                endpoint = await AlertRepository.from_session(session).endpoint(project.project_id, ENV)
            assert endpoint is not None
            return alerts.breaker_state(
                endpoint.failures, endpoint.open_until_ms, settings.alert_breaker_threshold, clock()
            )

        try:
            await setup_endpoint(metadata, settings, project.project_id, receiver.url)
            receiver.status = 500
            for _ in range(3):
                await queue(metadata, project.project_id)
            assert await dispatcher.run_once() == 3  # three failures in a row: open
            assert await state() == "open"
            clock.advance(30)  # the retries are due, the breaker still open: they wait
            assert await dispatcher.run_once() == 0
            assert len(receiver.received) == 3
            clock.advance(31)  # cooldown over: half-open, one probe
            assert await state() == "half-open"
            assert await dispatcher.run_once() == 1
            assert len(receiver.received) == 4
            assert await state() == "open"  # the probe failed
            receiver.status = 200
            clock.advance(61)
            assert await dispatcher.run_once() == 1  # a probe again, which succeeds
            assert await state() == "closed"
            clock.advance(1)
            assert await dispatcher.run_once() == 2  # the waiting events follow
            assert len(receiver.received) == 7
            assert await dispatcher.run_once() == 0
        finally:
            await dispatcher.close()


class TestEndpoint:
    async def test_a_generated_secret_is_shown_once(self, store, project):
        metadata, settings = store
        async with metadata.unit() as uow:
            created = await alerts.set_endpoint(
                uow, policy(settings), project.project_id, ENV, "https://example.com/h"
            )
        assert created.secret and created.secret.startswith("whsec_") and len(created.secret) == 38
        assert created.secret_hint == created.secret[-4:] and created.state == "closed"
        async with metadata.unit() as uow:
            updated = await alerts.set_endpoint(
                uow, policy(settings), project.project_id, ENV, "https://example.org/h"
            )
            shown = await alerts.get_endpoint(uow, policy(settings), project.project_id, ENV)
        assert updated.secret is None and shown.secret is None
        assert shown.secret_hint == created.secret[-4:] and shown.url == "https://example.org/h"

    async def test_the_signing_secret_is_sealed_at_rest_and_old_clear_ones_are_sealed_at_start(
        self, store, project, receiver
    ):
        metadata, settings = store
        secret = "whsec_" + "q" * 32
        await setup_endpoint(metadata, settings, project.project_id, receiver.url, secret=secret)

        async def stored() -> str:
            async with metadata.session(readonly=True) as session:
                endpoint = await AlertRepository.from_session(session).endpoint(project.project_id, ENV)
            assert endpoint is not None
            return endpoint.secret

        assert secret not in await stored() and settings.sealer().open(await stored()) == secret
        # A row from before sealing (in clear) is sealed when a dispatcher starts; signing still works.
        async with metadata.session() as session:
            await AlertRepository.from_session(session).replace_secret(
                project.project_id, ENV, await stored(), secret
            )
        assert await stored() == secret
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings))
        try:
            assert await dispatcher.reseal() == 1
            assert secret not in await stored()
            await queue(metadata, project.project_id)
            assert await dispatcher.run_once() == 1
            [got] = receiver.received
            assert docs_verify()(secret, got.headers["QueueCore-Signature"], got.body)
        finally:
            await dispatcher.close()

    async def test_no_endpoint_no_event(self, store, project):
        metadata, _ = store
        assert await queue(metadata, project.project_id) == ""

    async def test_each_environment_has_its_own_endpoint_events_and_attempts(self, store, project, receiver):
        metadata, settings = store
        dispatcher = alerts.AlertDispatcher(metadata, policy(settings))
        try:
            await setup_endpoint(
                metadata, settings, project.project_id, receiver.url, environment="production"
            )
            # Development has none: its events are not written, and production's endpoint gets nothing.
            assert await queue(metadata, project.project_id, environment="development") == ""
            event = await queue(metadata, project.project_id, environment="production")
            assert await dispatcher.run_once() == 1
            assert [json.loads(r.body)["id"] for r in receiver.received] == [event]
            assert json.loads(receiver.received[0].body)["environment"] == "production"
            assert await delivery_log(metadata, project.project_id, "development") == []
            assert [a["eventId"] for a in await delivery_log(metadata, project.project_id)] == [event]
            async with metadata.unit() as uow:
                with pytest.raises(AlertEndpointNotFound):
                    await alerts.get_endpoint(uow, policy(settings), project.project_id, "staging")
        finally:
            await dispatcher.close()


class TestSsrf:
    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1:9/h",
            "http://localhost/h",
            "http://10.1.2.3/h",
            "http://192.168.0.10/h",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/h",
            "http://0.0.0.0/h",
            # IPv6 addresses that carry an internal IPv4 one: 6to4, Teredo, NAT64, IPv4-mapped.
            "http://[2002:7f00:1::1]/h",
            "http://[2002:a9fe:a9fe::]/latest/meta-data",
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/h",
            "http://[64:ff9b::a9fe:a9fe]/h",
            "http://[::ffff:10.0.0.1]/h",
        ],
    )
    async def test_production_refuses_internal_addresses(self, url):
        settings = settings_for("sqlite", Path("/tmp"), "", environment=Environment.production)
        with pytest.raises(InvalidRequest) as refused:
            await alerts.check_url(policy(settings), url)
        assert refused.value.details and refused.value.details[0]["field"] == "url"
        # Not a DNS oracle: the answer names no address the host resolved to.
        issue = refused.value.details[0]["issue"]
        assert issue == "the address is not allowed; alerts go to public hosts only"

    async def test_a_6to4_address_of_a_public_host_is_allowed(self):
        settings = settings_for("sqlite", Path("/tmp"), "", environment=Environment.production)
        destination = await alerts.check_url(policy(settings), "http://[2002:808:808::1]/h")
        assert destination.url == "http://[2002:808:808::1]/h"

    async def test_the_allow_list_and_development_mode_let_local_receivers_in(self):
        prod = settings_for(
            "sqlite",
            Path("/tmp"),
            "",
            environment=Environment.production,
            alert_allowed_hosts=["localhost", "10.0.0.0/8"],
        )
        assert await alerts.check_url(policy(prod), "http://localhost:8080/h")
        assert await alerts.check_url(policy(prod), "http://10.9.8.7/h")
        with pytest.raises(InvalidRequest):
            await alerts.check_url(policy(prod), "http://192.168.1.1/h")
        dev = settings_for("sqlite", Path("/tmp"), "")
        assert await alerts.check_url(policy(dev), "http://127.0.0.1:9/h")

    @pytest.mark.parametrize(
        "url", ["ftp://example.com/h", "example.com/h", "http:///h", "https://user:pw@example.com/h", ""]
    )
    async def test_only_http_urls_with_a_host(self, url):
        dev = settings_for("sqlite", Path("/tmp"), "")
        with pytest.raises(InvalidRequest):
            await alerts.check_url(policy(dev), url)

    async def test_production_connects_to_the_address_it_checked(self, store, project, receiver):
        metadata, settings = store
        production = settings.model_copy(
            update={"environment": Environment.production, "alert_allowed_hosts": ["127.0.0.0/8"]}
        )
        url = f"http://localhost:{receiver.port}/hooks/queuecore"
        destination = await alerts.check_url(policy(production), url)
        assert destination.url == f"http://127.0.0.1:{receiver.port}/hooks/queuecore"
        assert destination.host_header == f"localhost:{receiver.port}" and destination.sni_hostname is None
        secure = await alerts.check_url(policy(production), "https://localhost/h")
        assert secure.url == "https://127.0.0.1/h" and secure.sni_hostname == "localhost"
        await setup_endpoint(metadata, production, project.project_id, url)
        dispatcher = alerts.AlertDispatcher(metadata, policy(production), clock=Clock())
        try:
            await queue(metadata, project.project_id)
            assert await dispatcher.run_once() == 1
            [got] = receiver.received
            assert got.headers["Host"] == f"localhost:{receiver.port}"
        finally:
            await dispatcher.close()

    async def test_a_host_the_http_client_would_read_differently_is_refused(self):
        dev = settings_for("sqlite", Path("/tmp"), "")
        with pytest.raises(InvalidRequest):
            await alerts.check_url(policy(dev), "http://example.com\\@127.0.0.1/h")

    async def test_delivery_re_checks_the_address(self, store, project, receiver):
        metadata, settings = store
        await setup_endpoint(metadata, settings, project.project_id, receiver.url)  # development: allowed
        production = settings.model_copy(update={"environment": Environment.production})
        dispatcher = alerts.AlertDispatcher(metadata, policy(production), clock=Clock())
        try:
            await queue(metadata, project.project_id)
            assert await dispatcher.run_once() == 1
            assert receiver.received == []
            [attempt] = await delivery_log(metadata, project.project_id)
            assert not attempt["ok"] and "address is not allowed" in attempt["error"]
        finally:
            await dispatcher.close()


class TestPolicy:
    def test_the_policy_is_read_from_the_settings_once(self):
        dev = settings_for(
            "sqlite", Path("/tmp"), "", alert_allowed_hosts=["10.0.0.0/8"], alert_max_attempts=3
        )
        prod = settings_for("sqlite", Path("/tmp"), "", environment=Environment.production)
        assert policy(prod).block_internal and not policy(dev).block_internal
        assert policy(dev).allowed_hosts == ("10.0.0.0/8",) and policy(dev).max_attempts == 3
        secret = "s" * 24
        assert policy(dev).sealer.open(dev.sealer().seal(secret)) == secret  # the deployment's own key
