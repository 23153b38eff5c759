"""Who may open a push connection: WebSocket tokens (their topic and group only, not after expiry, forgery,
a recreated topic or a revoked key), and opening a connection charged as a consume request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jwt
import pytest
import websockets
from websockets.asyncio.client import connect

from app.broker import tokens
from app.settings import Settings
from tests.api.ws_client import Api, unique_name
from tests.fixtures.server import ServerProcess, bootstrap, cli


class TestTokens:
    def _token(self, api: Api, topic: str, **extra: str) -> str:
        return api.ok("POST", "/v1/tokens/websocket", {"topic": topic, **extra})["token"]

    async def _refused(self, url: str) -> dict[str, Any]:
        with pytest.raises(websockets.InvalidStatus) as refused:
            await connect(url)
        assert refused.value.response.status_code == 401
        return json.loads(refused.value.response.body)["error"]

    async def test_a_token_opens_its_topic_only(self, api: Api, server: ServerProcess) -> None:
        topic, other = api.topic(), api.topic()
        issued = api.ok("POST", "/v1/tokens/websocket", {"topic": topic})
        expires = issued["expiresAt"]
        assert expires.endswith("Z")
        ws = await connect(api.ws_url(topic, token=issued["token"]))
        assert json.loads(await ws.recv())["type"] == "welcome"
        await ws.close()
        assert (await self._refused(api.ws_url(other, token=issued["token"])))["code"] == "INVALID_API_KEY"

    async def test_a_token_does_not_open_a_recreated_topic_of_the_sameunique_name(self, api: Api) -> None:
        topic = api.topic()
        token = self._token(api, topic)
        api.ok("DELETE", f"/v1/topics/{topic}")
        api.ok("POST", "/v1/topics", {"name": topic})
        await asyncio.sleep(1.1)  # past the topic cache's TTL
        assert (await self._refused(api.ws_url(topic, token=token)))["code"] == "INVALID_API_KEY"

    async def test_a_group_bound_token_opens_its_group_only(self, api: Api) -> None:
        topic = api.topic()
        token = self._token(api, topic, group="g")
        ws = await connect(api.ws_url(topic, token=token))
        await ws.close()
        await self._refused(api.ws_url(topic, token=token).replace("group=g", "group=h"))

    async def test_expired_and_forged_tokens_are_refused(self, api: Api, server: ServerProcess) -> None:
        topic = api.topic()
        claims = jwt.decode(self._token(api, topic), options={"verify_signature": False})
        secret = Settings(data_dir=server.data_dir).server_secret()
        fields: dict[str, Any] = {
            "key_id": claims["sub"],
            "project_id": claims["prj"],
            "environment": claims["env"],
            "topic_id": claims["tid"],
            "topic": topic,
            "group": None,
        }
        expired = tokens.issue(secret, ttl_seconds=-5, **fields).token
        await self._refused(api.ws_url(topic, token=expired))
        forged = tokens.issue(b"not the server secret", **fields).token
        await self._refused(api.ws_url(topic, token=forged))
        await self._refused(api.ws_url(topic, token="garbage"))
        assert claims["exp"] - claims["iat"] <= 300

    async def test_a_token_of_a_revoked_key_is_refused(self, api: Api, server: ServerProcess) -> None:
        project = unique_name("tok")
        boot = bootstrap(server.env, project, "--tier", "pro")
        own = Api(server, boot["keys"]["production"])
        topic = own.topic()
        token = self._token(own, topic)
        key_id = jwt.decode(token, options={"verify_signature": False})["sub"]
        cli(server.env, "keys", "revoke", "--id", key_id)
        assert (await self._refused(own.ws_url(topic, token=token)))["code"] == "INVALID_API_KEY"


class TestRateLimit:
    async def test_opening_a_websocket_is_charged_as_consume(self, server: ServerProcess) -> None:
        # 55 upgrades at once against 50 consume requests per second (developer). The limiter's window
        # is real time: a run whose upgrades did not all end within one second of the first one's start
        # shows nothing (the window may have slid between them) and is made again with a fresh key.
        for _ in range(5):
            statuses, open_ones, fitted = await self._open_at_once(server, 55)
            if fitted:
                break
            for ws in open_ones:
                await ws.close()
        else:
            pytest.fail("55 upgrades never fit in one second of the limiter's window")
        assert statuses.count(429) >= 1 and statuses.count(101) <= 50, statuses
        # Frames after the upgrade are not charged: an open connection keeps acking.
        ws, others = open_ones[0], open_ones[1:]
        for other in others:
            await other.close()
        for _ in range(60):  # more frames than the limit, within a second
            await ws.send(json.dumps({"type": "ack", "ids": ["x"]}))
        answered = 0
        while answered < 60:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert frame["type"] != "error", frame
            answered += frame["type"] == "acked"
        await ws.close()

    @staticmethod
    async def _open_at_once(server: ServerProcess, count: int) -> tuple[list[int], list[Any], bool]:
        """``count`` upgrades begun together with a fresh developer key: their statuses, the connections
        opened, and whether every one ended within a second of the first one's start."""
        boot = json.loads(
            cli(
                server.env, "bootstrap", "--project", unique_name("rl"), "--tier", "developer", "--json"
            ).stdout
        )
        own = Api(server, boot["keys"]["production"])
        url = own.ws_url(own.topic())
        loop = asyncio.get_running_loop()

        async def open_one() -> tuple[int, Any]:
            try:
                return 101, await connect(url, additional_headers=own.headers)
            except websockets.InvalidStatus as refused:
                body = json.loads(refused.response.body)
                assert body["error"]["code"] == "RATE_LIMIT_EXCEEDED"
                assert int(refused.response.headers["Retry-After"]) >= 1
                return refused.response.status_code, None

        began = loop.time()
        answers = await asyncio.gather(*(open_one() for _ in range(count)))
        fitted = loop.time() - began < 0.95
        return [status for status, _ in answers], [ws for _, ws in answers if ws is not None], fitted
