"""Copies of a topic's streams, for backups (``JetStreamLogEngine.export_logs`` / ``import_logs``).

Export, per partition stream (``QC_<token>_<p>``), while other nodes append: its configuration and state
(``STREAM.INFO``), then every message from ``first_seq`` to ``last_seq`` of that moment, read by batch
direct gets (as ``reads`` does). An acknowledged append is in its partition's stream (a multi-partition
one only after every part was applied, ``transactions``), so every append acknowledged before the export
began is in it. Files, per stream::

    <stream>.json      {"config": {...}, "first_seq": F, "last_seq": L}
    <stream>.records   per message: >Q sequence | >I payload length | payload

The payload is the record's frame (``codec``) as stored: key, headers, value and timestamp are in it. NATS
headers are not kept: they are publish-time checks, batch marks and the ``Nats-Msg-Id`` a roll-forward of
the transaction stream is deduplicated by, and that stream is not copied (below).

A stream deleted during the export (its topic deleted) is left out.

Import, per stream: create it with the same configuration and ``first_seq`` = F (NATS 2.10+), then publish
the messages in order, one at a time, each checked to land at its original sequence: offsets (sequence - 1)
are kept. Limits: a stream with deleted messages inside it (not only at its head, where retention cuts)
is refused at export (``BackupUnsupported``), since a restore could not keep the sequences after the gap;
pending commit records of the transaction stream are not copied (their appends were not acknowledged),
so a multi-partition append in flight during the export may be in the copy in part; idempotency keys
(``JetStreamIdempotency``) are not copied, so a publish retried across a restore may be stored twice.
"""

from __future__ import annotations

import asyncio
import json
import struct
from functools import partial
from pathlib import Path
from typing import Any

from app.stores.log.jetstream import codec
from app.stores.log.jetstream.client import JetStreamClient, NoStream, while_unsettled
from app.stores.log.protocol import BackupUnsupported, EngineUnavailable, PartitionExtent, UnknownLog

_SEQ = struct.Struct(">Q")
_LEN = struct.Struct(">I")
_BATCH = 256
_BATCH_BYTES = 1 << 20
_RETRIES = 30  # about 10 s of backoff
_ADMIN_TIMEOUT = 30.0


async def export_streams(client: JetStreamClient, names: list[str], dest: Path) -> list[PartitionExtent]:
    """Copy the partition streams ``names`` into the empty directory ``dest`` (the module docstring)."""
    dest.mkdir(parents=True, exist_ok=True)
    extents: list[PartitionExtent] = []
    for name in sorted(names):
        parsed = codec.parse_stream_name(name)
        if parsed is None:
            continue
        try:
            info = await client.api(f"STREAM.INFO.{name}", stream=name)
        except UnknownLog:
            continue  # its topic was deleted since the listing
        state = info["state"]
        if state.get("num_deleted", 0):
            raise BackupUnsupported(
                f"stream {name} has {state['num_deleted']} deleted messages inside it: its sequences "
                "could not be kept by a restore"
            )
        # A stream never written to says first_seq 0: its first message will be 1.
        first, last = max(1, int(state["first_seq"])), int(state["last_seq"])
        try:
            first, last = await _copy_messages(client, name, first, last, dest / f"{name}.records")
        except EngineUnavailable:
            try:
                await client.api(f"STREAM.INFO.{name}", stream=name)
            except UnknownLog:
                (dest / f"{name}.records").unlink(missing_ok=True)
                continue  # deleted while it was copied
            raise
        config = {k: v for k, v in info["config"].items() if k not in ("first_seq", "metadata")}
        (dest / f"{name}.json").write_text(
            json.dumps({"config": config, "first_seq": first, "last_seq": last})
        )
        extents.append(PartitionExtent(parsed[0], parsed[1], first - 1, last))
    return sorted(extents)


async def _copy_messages(
    client: JetStreamClient, name: str, first: int, last: int, path: Path
) -> tuple[int, int]:
    """Write messages ``first..last``; answers the range written (retention may have cut the head since)."""
    seq = first
    start: int | None = None
    with path.open("wb") as out:
        while seq <= last:
            found = await _get(client, name, seq, min(_BATCH, last - seq + 1))
            if not found:
                break
            for number, payload, _ in found:
                if number > last:
                    break
                if number != seq and start is not None:
                    raise BackupUnsupported(f"stream {name} lost message {seq} while it was copied")
                if start is None:
                    start = number  # retention may have cut the head between INFO and the first read
                out.write(_SEQ.pack(number) + _LEN.pack(len(payload)) + payload)
                seq = number + 1
    if start is None:  # empty, or emptied meanwhile: the copy is empty at the stream's end
        return last + 1, last
    return start, seq - 1


async def _get(client: JetStreamClient, name: str, seq: int, count: int) -> list[tuple[int, bytes, Any]]:
    """A batch direct get, asked again while it comes back empty (the replica answering may trail the
    leader, as ``reads`` knows) or unanswered for now, for up to ~10 s."""
    for attempt in range(_RETRIES):
        try:
            found = await client.direct_get(name, seq, count, _BATCH_BYTES)
        except UnknownLog:
            raise
        except EngineUnavailable:
            if attempt == _RETRIES - 1:
                raise
            found = None
        if found:
            return found
        await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
    return []


async def import_streams(client: JetStreamClient, src: Path) -> list[PartitionExtent]:
    """Create every stream ``export_streams`` wrote in ``src`` and publish its messages at their sequences;
    ``FileExistsError`` before anything is created when one of them exists already."""
    names = [p.stem for p in sorted(src.glob("*.json")) if codec.parse_stream_name(p.stem) is not None]
    for name in names:
        try:
            await client.api(f"STREAM.INFO.{name}", stream=name)
        except UnknownLog:
            continue  # absent, as it must be
        raise FileExistsError(f"stream {name} exists already: restore into a cluster without it")
    extents: list[PartitionExtent] = []
    for name in names:
        parsed = codec.parse_stream_name(name)
        assert parsed is not None
        meta = json.loads((src / f"{name}.json").read_text())
        first, last = int(meta["first_seq"]), int(meta["last_seq"])
        config: dict[str, Any] = {**meta["config"], "first_seq": first}
        await client.api(f"STREAM.CREATE.{name}", config, stream=name, timeout=_ADMIN_TIMEOUT)
        subject = config["subjects"][0]
        data = (src / f"{name}.records").read_bytes()
        pos = 0
        while pos < len(data):
            (seq,) = _SEQ.unpack_from(data, pos)
            (size,) = _LEN.unpack_from(data, pos + 8)
            payload = data[pos + 12 : pos + 12 + size]
            pos += 12 + size
            # A stream just created may have no responder yet (its leader not elected): nothing was
            # stored then, and the message is sent again, as the engine's appends do.
            send = partial(client.publish, [(subject, payload, None)], stream=name)
            stored = await while_unsettled(send, NoStream)
            if stored.last_seq != seq:
                raise BackupUnsupported(f"stream {name}: message {seq} landed at {stored.last_seq}")
        extents.append(PartitionExtent(parsed[0], parsed[1], first - 1, last))
    return sorted(extents)
