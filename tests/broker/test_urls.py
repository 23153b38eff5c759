"""The outbound URL rules (app/broker/urls.py) as push groups use them: every mode's checks, production's
https-only and SSRF rule at set time, and the SSRF rule again when a delivery connects (DNS rebinding)."""

from __future__ import annotations

import pytest

from app.broker import urls
from app.broker.delivery.url_client import DeliveryClient, DeliveryError
from app.broker.errors import InvalidRequest
from app.broker.push_groups import PushPolicy
from app.kit.sealing import Sealer
from tests.fixtures.push_receivers import PushReceiver

SEALER = Sealer(b"x" * 32)


def rule(production: bool, allowed: tuple[str, ...] = ()) -> urls.UrlRule:
    return PushPolicy(SEALER, block_internal=production, allowed_hosts=allowed).url_rule


async def refusal(url: str, production: bool, allowed: tuple[str, ...] = ()) -> str:
    with pytest.raises(InvalidRequest) as caught:
        await urls.check_url(rule(production, allowed), url)
    assert caught.value.details and caught.value.details[0]["field"] == "push.url"
    return caught.value.details[0]["issue"]


class TestEveryMode:
    @pytest.mark.parametrize(
        "url",
        [
            "ftp://example.com/x",
            "file:///etc/passwd",
            "http://user:pw@example.com/x",
            "http://user@example.com/x",
            "https:///no-host",
            "",
            "http://" + "a" * 2100 + ".com/",
        ],
    )
    async def test_refused_in_development_too(self, url):
        await refusal(url, production=False)

    async def test_development_takes_loopback_http(self):
        assert (await urls.check_url(rule(False), "http://127.0.0.1:9/x")).url == "http://127.0.0.1:9/x"


class TestProduction:
    async def test_https_only(self):
        assert "https" in await refusal("http://example.com/hooks", production=True)

    @pytest.mark.parametrize(
        "url",
        [
            "https://127.0.0.1/x",
            "https://localhost/x",
            "https://10.1.2.3/x",
            "https://192.168.0.10/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://[fe80::1]/x",
        ],
    )
    async def test_internal_addresses_are_refused(self, url):
        assert "public hosts only" in await refusal(url, production=True)

    async def test_allowed_hosts_are_exempt(self):
        destination = await urls.check_url(rule(True, ("127.0.0.0/8",)), "https://127.0.0.1:8443/x")
        assert destination.url == "https://127.0.0.1:8443/x"


class TestConnectTime:
    """The delivery client applies the rule again at every new connection (``url_client.py``)."""

    async def _post(self, client: DeliveryClient, url: str) -> int:
        try:
            return (await client.post(url, b"{}", {"content-type": "application/json"}, 512)).status
        finally:
            await client.aclose()

    async def test_a_loopback_answer_at_connect_time_is_refused(self, push_receiver: PushReceiver):
        with pytest.raises(DeliveryError, match="public hosts only"):
            await self._post(DeliveryClient(rule(True)), f"http://localhost:{push_receiver.port}/hooks")
        assert push_receiver.deliveries() == []

    async def test_dns_that_changes_after_the_check_is_caught_when_connecting(
        self, monkeypatch, push_receiver
    ):
        answers = iter([["93.184.216.34"], ["127.0.0.1"]])  # public when set, loopback when delivering

        async def rebinding(host: str, port: int) -> list[str]:
            return next(answers)

        monkeypatch.setattr(urls, "resolve", rebinding)
        await urls.check_public(rule(True), "rebind.example", push_receiver.port)  # the set-time check passes
        with pytest.raises(DeliveryError, match="public hosts only"):
            await self._post(DeliveryClient(rule(True)), f"http://rebind.example:{push_receiver.port}/hooks")
        assert push_receiver.deliveries() == []

    async def test_an_approved_address_is_the_one_connected_to(self, push_receiver: PushReceiver):
        status = await self._post(
            DeliveryClient(rule(True, ("127.0.0.0/8",))), f"http://localhost:{push_receiver.port}/hooks"
        )
        assert status == 200
        assert len(push_receiver.deliveries()) == 1
        assert push_receiver.deliveries()[0].headers["host"] == f"localhost:{push_receiver.port}"
