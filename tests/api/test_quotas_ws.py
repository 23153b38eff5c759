"""The groups quota at a WebSocket consume, on real servers (embedded, and Postgres + Redis + JetStream): a
connection that would create a group past the topic's quota is refused at the upgrade with an HTTP 403
envelope, like every other refusal of the upgrade. The project's quota is set through the operator CLI."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect

from tests.api.ws_client import Api, Consumer, unique_name
from tests.fixtures.server import bootstrap, set_tier


@pytest.fixture
def limited(api: Api) -> Api:
    """A project of its own on the api's server, enterprise with one group per topic (set by the CLI)."""
    name = unique_name("quota")
    keys = bootstrap(api.server.env, name)["keys"]
    set_tier(api.server.env, name, "enterprise", "publish=10000,consume=10000,admin=10000,groups=1")
    return Api(api.server, keys["production"])


async def _refused(api: Api, url: str) -> tuple[Any, dict[str, Any]]:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await connect(url, additional_headers=api.headers)
    response = refused.value.response
    return response, json.loads(response.body)["error"]


class TestGroupsQuotaAtConsume:
    async def test_a_connection_creating_a_group_past_the_quota_is_refused_before_the_upgrade(
        self, limited: Api
    ) -> None:
        topic = limited.topic()
        first = await Consumer.open(limited, topic, group="g1")
        response, error = await _refused(limited, limited.ws_url(topic, group="g2"))
        assert response.status_code == 403
        assert error["code"] == "QUOTA_EXCEEDED" and error["status"] == 403
        assert error["details"] == [{"field": "groups", "issue": "limit 1, used 1"}]
        assert error["requestId"] == response.headers["x-request-id"]
        # Nothing was made; the group that exists takes more members.
        assert [g["name"] for g in limited.ok("GET", f"/v1/topics/{topic}/groups")["data"]] == ["g1"]
        second = await Consumer.open(limited, topic, group="g1")
        await second.ws.close()
        await first.ws.close()

    async def test_the_first_connection_makes_its_group(self, limited: Api) -> None:
        topic = limited.topic()
        consumer = await Consumer.open(limited, topic, group="made")
        assert [g["name"] for g in limited.ok("GET", f"/v1/topics/{topic}/groups")["data"]] == ["made"]
        await consumer.ws.close()
        # Once it is deleted (its member gone: the server leaves at the close), its place is free.
        deadline = time.monotonic() + 10
        while True:
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.delete(
                    f"{limited.server.url}/v1/topics/{topic}/groups/made", headers=limited.headers
                )
            if r.status_code != 409 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 204, r.text
        other = await Consumer.open(limited, topic, group="other")
        await other.ws.close()
