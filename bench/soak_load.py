"""The crash soak's load (``bench/soak.py`` drives it): publishers and consumers as asyncio tasks that run
until the kill cuts their connections, and the resend of keyed publishes the kill left unsure.

  * publishers: single messages with and without ``Idempotency-Key``, batches (2-20) with and without
    per-item ``idempotencyKey``; a publish in flight at the kill has an unknown outcome; a keyed one is
    sent again after the restart, with the same key (``check_log``);
  * group ``push``: a WebSocket consumer acking everything it receives;
  * group ``pull``: a REST pull consumer acking everything;
  * group ``retry``: a pull consumer of a group with a DLQ: it nacks "poison" messages at every attempt
    (they must end in the DLQ), nacks "flaky" ones once with a delay (then acks them), acks the rest.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import httpx
from soak_ledger import (
    CLOCK_SLACK_S,
    FLAKY_DELAY_S,
    JITTER,
    RETRY_DELAY_S,
    TOPIC,
    Ledger,
    audit,
    confirmed_acks,
    delivered,
    read_log,
)
from websockets.asyncio.client import connect


async def publisher(http: httpx.AsyncClient, ledger: Ledger, kind: str) -> None:
    rng = ledger.rng
    while True:
        keyed = kind.endswith("keyed")
        if kind.startswith("single"):
            data = {"t": ledger.tag(), "role": ledger.role(), "pad": "x" * rng.randrange(0, 400)}
            items = [data]
        else:
            tag, size = ledger.tag(), rng.randrange(2, 21)
            items = [
                {"b": tag, "i": i, "of": size, "role": ledger.role(), "pad": "y" * rng.randrange(0, 200)}
                for i in range(size)
            ]
        if keyed:
            for item in items:
                item["ik"] = f"k{secrets.token_hex(8)}"
        try:
            await send(http, ledger, items, batch=kind.startswith("batch"))
        except (httpx.TransportError, asyncio.CancelledError):
            # Cut by the kill: written or not, nobody knows. A keyed one is sent again after the restart.
            if keyed:
                ledger.unsure.append(("batch" if kind.startswith("batch") else "single", items))
            ledger.counts["publishes cut by a kill (outcome unknown)"] += len(items)
            return
        await asyncio.sleep(rng.uniform(0.02, 0.1))


async def send(
    http: httpx.AsyncClient, ledger: Ledger, items: list[dict[str, Any]], *, batch: bool
) -> list[dict[str, Any]]:
    """Publish ``items`` (one single message, or a batch); record what a 2xx placed."""
    if batch:
        body = {
            "messages": [{"data": d, **({"idempotencyKey": d["ik"]} if "ik" in d else {})} for d in items]
        }
        answer = await http.post(f"/v1/topics/{TOPIC}/messages/batch", json=body)
    else:
        headers = {"Idempotency-Key": items[0]["ik"]} if "ik" in items[0] else {}
        answer = await http.post(f"/v1/topics/{TOPIC}/messages", json={"data": items[0]}, headers=headers)
    if answer.status_code != 201:
        ledger.violation(f"publish answered {answer.status_code}: {answer.text[:300]}")
        return []
    placed = answer.json()["messages"] if batch else [answer.json()]
    for item, where in zip(items, placed, strict=True):
        ledger.published[where["id"]] = {
            "partition": where["partition"],
            "offset": where["offset"],
            "data": item,
        }
        if "ik" in item:
            ledger.keyed.setdefault(item["ik"], where["id"])
    ledger.counts["published (2xx)"] += len(items)
    return placed


async def push_consumer(url: str, key: str, ledger: Ledger) -> None:
    ws_url = (
        url.replace("http://", "ws://")
        + f"/v1/topics/{TOPIC}/consume?group=push&startFrom=earliest&maxInFlight=200"
    )
    async with connect(ws_url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=5) as ws:
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind in ("message", "messages"):
                batch = frame["messages"] if kind == "messages" else [frame]
                for message in batch:
                    delivered(ledger, "push", message)
                ledger.ack_sent["push"].update(m["id"] for m in batch)
                await ws.send(json.dumps({"type": "ack", "ids": [m["id"] for m in batch]}))
            elif kind == "acked":
                confirmed_acks(ledger, "push", frame)
            elif kind == "error":
                ledger.counts["push error frames"] += 1


async def join(http: httpx.AsyncClient, ledger: Ledger, group: str) -> dict[str, Any]:
    answer = await http.post(
        f"/v1/topics/{TOPIC}/groups/{group}/members", json={"startFrom": "earliest", "sessionTimeout": "10s"}
    )
    if answer.status_code not in (200, 201):
        ledger.violation(f"{group}: join answered {answer.status_code}: {answer.text[:200]}")
        answer.raise_for_status()
    member = answer.json()
    ledger.members[group] = {"memberId": member["memberId"], "generationId": member["generationId"]}
    return ledger.members[group]


async def pull_consumer(http: httpx.AsyncClient, ledger: Ledger, group: str, wait: int = 1) -> None:
    base = f"/v1/topics/{TOPIC}/groups/{group}"
    while True:
        ident = ledger.members.get(group) or await join(http, ledger, group)
        answer = await http.post(f"{base}/poll", json={**ident, "maxMessages": 200, "waitSeconds": wait})
        if answer.status_code in (404, 409):  # the member expired or the generation moved: join again
            ledger.members.pop(group, None)
            continue
        if answer.status_code != 200:
            ledger.violation(f"{group}: poll answered {answer.status_code}: {answer.text[:200]}")
            await asyncio.sleep(0.5)
            continue
        messages = answer.json()["messages"]
        nacks: list[dict[str, Any]] = []
        for message in messages:
            delivered(ledger, group, message)
            role = message["data"].get("role")
            if group == "retry" and (role == "poison" or (role == "flaky" and message["attempt"] == 1)):
                nacks.append(message)
        acks = [m["id"] for m in messages if m not in nacks]
        if acks:  # first, well before the ack deadline; the nacks one by one after
            ledger.ack_sent[group].update(acks)
            ack = await http.post(f"{base}/ack", json={**ident, "ids": acks})
            if ack.status_code == 200:
                confirmed_acks(ledger, group, ack.json())
        for message in nacks:
            role = message["data"]["role"]
            delay = FLAKY_DELAY_S if role == "flaky" else RETRY_DELAY_S
            body: dict[str, Any] = {**ident, "id": message["id"], "reason": role}
            if role == "flaky":
                body["delay"] = f"{int(FLAKY_DELAY_S * 1000)}ms"
            sent = time.monotonic()
            nack = await http.post(f"{base}/nack", json=body)
            if nack.status_code == 200 and message["id"] in nack.json().get("ids", []):
                ledger.nack_due[f"{group}/{message['id']}"] = sent + delay * JITTER - CLOCK_SLACK_S
                ledger.counts[f"nacks {group}"] += 1


async def check_log(http: httpx.AsyncClient, ledger: Ledger, roll_forward_s: float = 0.0) -> None:
    stored = await read_log(http)
    audit(ledger, stored, roll_forward_s)
    # Keyed publishes whose outcome was unknown: the same key again answers the original if it was written.
    in_log = {m["data"]["ik"]: m for m in stored.values() if "ik" in m["data"]}
    unsure, ledger.unsure = ledger.unsure, []
    for kind, items in unsure:
        placed = await send(http, ledger, items, batch=kind == "batch")
        ledger.counts["unknown keyed publishes resent"] += len(items)
        for item, where in zip(items, placed, strict=False):
            was = in_log.get(item["ik"])
            if was is not None and (was["id"], was["offset"]) != (where["id"], where["offset"]):
                ledger.violation(
                    f"resent key {item['ik']} placed anew at {where['offset']}, was {was['offset']}"
                )
    # A few acknowledged keyed publishes, again: the original answer, replayed.
    for key in ledger.rng.sample(sorted(ledger.keyed), min(3, len(ledger.keyed))):
        mid = ledger.keyed[key]
        data = ledger.published[mid]["data"]
        answer = await http.post(
            f"/v1/topics/{TOPIC}/messages", json={"data": data}, headers={"Idempotency-Key": key}
        )
        ledger.counts["replay checks"] += 1
        if (
            answer.status_code not in (200, 201)
            or answer.headers.get("Idempotent-Replayed") != "true"
            or answer.json().get("id") != mid
        ):
            ledger.violation(f"replayed key {key}: {answer.status_code} {answer.text[:200]}")
