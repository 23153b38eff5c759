"""One round of the Python SDK's figures against a running server: the twin of bench/js_sdk_bench.mjs (the
same two measurements, the same payloads, the same shapes), driven by bench/js_sdk_bench.py.

    .venv/bin/python bench/py_sdk_bench.py --base-url URL --key KEY [--messages 20000]

Prints one JSON line: {"publishBatch": msgs/s, "consume": msgs/s}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import time
from typing import Any

from queuecore import AsyncQueueCore


def payload(i: int) -> dict[str, Any]:
    return {"type": "order.created", "orderId": f"ord_{i:08d}", "amount": 9900, "note": "x" * 120}


def name(what: str) -> str:
    return f"bench-py-{what}-{secrets.token_hex(4)}"


async def publish_batch_rate(client: AsyncQueueCore, messages: int) -> float:
    topic = name("pub")
    await client.topics.create(topic, partitions=3)
    batches = [
        [payload(i) for i in range(start, min(messages, start + 1000))] for start in range(0, messages, 1000)
    ]
    pending = iter(batches)

    async def lane() -> None:
        for batch in pending:
            await client.publish_batch(topic, batch)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(4)))
    seconds = time.perf_counter() - started
    await client.topics.delete(topic)
    return messages / seconds


async def consume_rate(client: AsyncQueueCore, messages: int) -> float:
    topic = name("csm")
    await client.topics.create(topic, partitions=1)
    for start in range(0, messages, 1000):
        await client.publish_batch(topic, [payload(i) for i in range(start, min(messages, start + 1000))])
    consumer = client.consume(topic, group="bench", start_from="earliest", max_in_flight=1000)
    handled = 0

    async def handle(msg: Any) -> None:
        nonlocal handled
        msg.ack()
        handled += 1
        if handled == messages:
            consumer.stop()

    consumer.on("message", handle)
    started = time.perf_counter()
    await consumer.start()  # returns once stopped: every ack confirmed, the member gone
    seconds = time.perf_counter() - started
    lag = (await client.offsets.get(topic, group="bench", partition=0)).lag
    if lag != 0:
        raise RuntimeError(f"lag {lag} after stop(): acks not all confirmed")
    await client.topics.delete(topic)
    return messages / seconds


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--key", default=os.environ.get("QUEUECORE_API_KEY"))
    parser.add_argument("--messages", type=int, default=20000)
    args = parser.parse_args()
    async with AsyncQueueCore(api_key=args.key, base_url=args.base_url) as client:
        publish = await publish_batch_rate(client, args.messages)
        consume = await consume_rate(client, args.messages)
    print(
        json.dumps(
            {
                "client": "python",
                "python": platform.python_version(),
                "publishBatch": publish,
                "consume": consume,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
