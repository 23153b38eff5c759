"""Group writes under contention on Postgres, through a real server in the scale-out shape: seeks (by
offset and by time), live offset resets, WebSocket members coming and going and pull members joining and
leaving, all at once on one group of a 3-partition topic. Every answer is a success or a documented refusal:
never a 500 (a Postgres deadlock once answered 500 here, issue #29)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time

import httpx
from websockets.asyncio.client import connect

from tests.api.ws_client import Api

SECONDS = 12


async def test_seeks_resets_and_members_at_once_never_answer_500(jetstream_server):
    api = Api(jetstream_server)
    topic = api.topic(partitions=3)
    api.publish(topic, 300)
    base = f"/v1/topics/{topic}/groups/g"
    statuses: list[tuple[str, int, str]] = []
    stop = time.monotonic() + SECONDS

    async def seeker(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            partition = random.randrange(3)
            body = (
                {"partition": partition, "offset": random.randrange(100)}
                if random.random() < 0.5
                else {"partition": partition, "timestamp": int(time.time() * 1000) - 60_000}
            )
            r = await http.post(f"{base}/offsets/seek", json=body)
            statuses.append(("seek", r.status_code, r.text[:200]))

    async def resetter(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            r = await http.post(f"{base}/offsets/reset", json={"to": random.choice(["earliest", "latest"])})
            statuses.append(("reset", r.status_code, r.text[:200]))
            await asyncio.sleep(0.05)

    async def pusher() -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(Exception):
                async with connect(api.ws_url(topic), additional_headers=api.headers, open_timeout=10) as ws:
                    until = time.monotonic() + random.uniform(0.2, 1.0)
                    while time.monotonic() < until:
                        try:
                            frame = await asyncio.wait_for(ws.recv(), 0.2)
                        except TimeoutError:
                            continue
                        if '"type":"message"' in frame:
                            msg_id = frame.split('"id":"', 1)[1].split('"', 1)[0]
                            await ws.send(json.dumps({"type": "ack", "id": msg_id}))

    async def puller(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            r = await http.post(f"{base}/members", json={"startFrom": "earliest"})
            statuses.append(("join", r.status_code, r.text[:200]))
            if r.status_code in (200, 201):
                member = r.json()["memberId"]
                r = await http.delete(f"{base}/members/{member}")
                statuses.append(("leave", r.status_code, r.text[:200]))

    async with httpx.AsyncClient(base_url=jetstream_server.url, headers=api.headers, timeout=30) as http:
        await asyncio.gather(seeker(http), seeker(http), resetter(http), pusher(), pusher(), puller(http))
    failed = [s for s in statuses if s[1] >= 500]
    assert statuses and not failed, failed[:5]
    assert len([s for s in statuses if s[0] == "seek" and s[1] == 200]) > 10
