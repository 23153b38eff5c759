"""The process a crash test kills: it opens the engine a conformance backend opens (``LogBackend``) and
appends batches spanning every partition of a topic from several tasks until it is killed.

    python -m tests.stores.log.batch_writer <kind> <root> <nats url> <topic id>

It prints ``READY`` once the engine is open, then ``S <tag>`` before each append and ``A <tag>`` once the
append is answered (``F <tag>`` when it failed: a partition refused its part). Record ``i`` of batch ``<tag>`` in partition ``p`` holds ``<tag>:<p>:<i>|`` and padding,
so a reader can tell which batch each record belongs to (``tag_of``).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path

from app.stores.log.protocol import LogEngine, LogEngineError, RecordIn
from tests.stores.log.conftest import LogBackend

PARTITIONS = 4
RECORDS = 40  # per partition and batch
WRITERS = 8
_PAD = b"p" * 1000  # a batch of 160 kB: its parts take a while to reach every partition


def tag_of(value: bytes) -> str:
    return value.split(b":", 1)[0].decode()


async def _write(engine: LogEngine, topic: str, writer: int) -> None:
    for n in itertools.count():
        tag = f"{writer}.{n}"
        parts = {
            p: [RecordIn(value=f"{tag}:{p}:{i}|".encode() + _PAD) for i in range(RECORDS)]
            for p in range(PARTITIONS)
        }
        print(f"S {tag}", flush=True)
        try:
            await engine.append(topic, parts)
        except LogEngineError:
            print(f"F {tag}", flush=True)  # not answered (a partition refused its part), and on to the next
            continue
        print(f"A {tag}", flush=True)


async def main(kind: str, root: str, nats_url: str, topic: str) -> None:
    engine = await LogBackend(kind, Path(root), nats_url).open()
    print("READY", flush=True)
    await asyncio.gather(*(_write(engine, topic, w) for w in range(WRITERS)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
