"""The WebSocket test client of the push-delivery tests (``test_ws*.py``, and the scale-out tests): ``Api``
makes the HTTP calls of one project key, ``Consumer`` is one connection and the frames it received."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from tests.fixtures.server import ServerProcess


def unique_name(prefix: str) -> str:
    """A name no other test uses: ``prefix`` and eight hex digits."""
    return f"{prefix}-{secrets.token_hex(4)}"


class Api:
    def __init__(self, server: ServerProcess, key: str | None = None) -> None:
        self.server = server
        self.key = key or server.keys["production"]
        self.headers = {"Authorization": f"Bearer {self.key}"}

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = httpx.request(method, self.server.url + path, json=body, headers=self.headers, timeout=30)
        assert r.status_code in (200, 201, 204), r.text
        return r.json() if r.content else None

    def topic(self, partitions: int = 1, delivery: str = "at-least-once", **group_config: str) -> str:
        name = unique_name("ws")
        self.ok("POST", "/v1/topics", {"name": name, "partitions": partitions, "delivery": delivery})
        if group_config:
            self.ok("PUT", f"/v1/topics/{name}/groups/g", group_config)
        return name

    def publish(self, topic: str, count: int, start: int = 0) -> list[str]:
        body = {"messages": [{"data": i} for i in range(start, start + count)]}
        return [m["id"] for m in self.ok("POST", f"/v1/topics/{topic}/messages/batch", body)["messages"]]

    def ws_url(self, topic: str, **params: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"group": "g", "startFrom": "earliest", **params}.items())
        return f"ws://127.0.0.1:{self.server.port}/v1/topics/{topic}/consume?{query}"


class Consumer:
    """A connection and the frames it received, messages kept apart from the rest."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.welcome: dict[str, Any] = {}
        self.control: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []  # messages that came while waiting for a control frame

    @classmethod
    async def open(cls, api: Api, topic: str, **params: Any) -> Consumer:
        ws = await connect(api.ws_url(topic, **params), additional_headers=api.headers)
        consumer = cls(ws)
        consumer.welcome = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert consumer.welcome["type"] == "welcome", consumer.welcome
        return consumer

    async def frame(self, timeout: float = 5) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def messages(self, count: int, timeout: float = 5) -> list[dict[str, Any]]:
        """At least ``count`` messages (all those of the frames read), within ``timeout``."""
        got, self.pending = self.pending, []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            frame = await self.frame(max(0.01, deadline - time.monotonic()))
            if frame["type"] == "message":
                got.append(frame)
            elif frame["type"] == "messages":
                assert len(frame["messages"]) > 1
                got.extend(frame["messages"])
            else:
                self.control.append(frame)
        return got

    async def quiet(self, seconds: float) -> list[dict[str, Any]]:
        """Every message arriving within ``seconds`` (expected: none, mostly)."""
        got, self.pending = self.pending, []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                frame = await self.frame(left)
            except TimeoutError:
                break
            if frame["type"] == "message":
                got.append(frame)
            elif frame["type"] == "messages":
                got.extend(frame["messages"])
            else:
                self.control.append(frame)
        return got

    async def until(self, kind: str, timeout: float = 5) -> dict[str, Any]:
        for frame in self.control:
            if frame["type"] == kind:
                self.control.remove(frame)
                return frame
        deadline = time.monotonic() + timeout
        while True:
            frame = await self.frame(max(0.01, deadline - time.monotonic()))
            if frame["type"] == kind:
                return frame
            if frame["type"] == "message":
                self.pending.append(frame)
            elif frame["type"] == "messages":
                self.pending.extend(frame["messages"])
            else:
                self.control.append(frame)

    async def ack(self, ids: list[str]) -> dict[str, Any]:
        await self.ws.send(json.dumps({"type": "ack", "ids": ids}))
        return await self.until("acked")

    async def close(self) -> None:
        await self.ws.close()
