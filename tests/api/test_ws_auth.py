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
        # Eight upgrades at once against a key allowed 5 consume requests per second (an enterprise
        # project's custom limit: few enough to fit in one second on a loaded machine). The limiter's
        # window slides in real time, so only upgrades answered within a second of the first one's start
        # are surely in one window: at most 5 of those may be let in. A run where fewer than 6 were
        # answered that soon shows nothing and is made again with a fresh project.
        for _ in range(5):
            answers, began = await self._open_at_once(server, 8, consume_limit=5)
            within = [status for status, ended, _ in answers if ended - began < 1.0]
            if len(within) >= 6:
                break
            for _, _, ws in answers:
                if ws is not None:
                    await ws.close()
        else:
            pytest.fail("six upgrades never came back within one second of the limiter's window")
        statuses = [status for status, _, _ in answers]
        assert within.count(101) <= 5 and statuses.count(429) >= 1, (statuses, within)
        open_ones = [ws for _, _, ws in answers if ws is not None]
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
    async def _open_at_once(
        server: ServerProcess, count: int, *, consume_limit: int
    ) -> tuple[list[tuple[int, float, Any]], float]:
        """``count`` upgrades begun together with the key of a fresh enterprise project whose consume limit
        is ``consume_limit``: for each, its status, when it was answered (the event loop's clock) and the
        connection if it opened; and when they began."""
        project = unique_name("rl")
        boot = json.loads(
            cli(server.env, "bootstrap", "--project", project, "--tier", "enterprise", "--json").stdout
        )
        cli(
            server.env,
            "projects",
            "set-tier",
            "--project",
            project,
            "--tier",
            "enterprise",
            "--limits",
            f"consume={consume_limit}",
        )
        own = Api(server, boot["keys"]["production"])
        url = own.ws_url(own.topic())
        loop = asyncio.get_running_loop()

        async def open_one() -> tuple[int, float, Any]:
            try:
                ws = await connect(url, additional_headers=own.headers)
                return 101, loop.time(), ws
            except websockets.InvalidStatus as refused:
                body = json.loads(refused.response.body)
                assert body["error"]["code"] == "RATE_LIMIT_EXCEEDED"
                assert int(refused.response.headers["Retry-After"]) >= 1
                return refused.response.status_code, loop.time(), None

        began = loop.time()
        return list(await asyncio.gather(*(open_one() for _ in range(count)))), began
