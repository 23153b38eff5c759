"""The topic page's message browser: a page of one partition from an offset or a time, previous/next by
offset, and a search by key and header within an offset range. Reads go through ``broker.reading``, the
same call as the REST stream read; the filtering here is presentation (what to show of what was read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson

from app.broker import reading
from app.broker.errors import CODED_ERRORS, CodedError
from app.broker.topics import TopicRef
from app.kit.digits import is_ascii_digits
from app.stores.log.protocol import LogEngine

PAGE = 50
# A search reads at most this many messages per request; "Next" goes on from where it stopped.
SCAN_LIMIT = 5000
_SCAN_PAGE = 500


@dataclass
class Browse:
    """What the browser form asked and what it shows."""

    partition: str = "0"
    from_offset: str = ""
    from_time: str = ""
    to_offset: str = ""
    key: str = ""
    header: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    previous: str | None = None  # a query string, or None when there is no such page
    next: str | None = None
    scanned: int = 0

    @property
    def searching(self) -> bool:
        return bool(self.key or self.header)

    def query(self, from_offset: int) -> str:
        """The browser's query for the page starting at ``from_offset``, keeping the search."""
        values = {"partition": self.partition, "from_offset": str(from_offset)}
        values |= {
            k: v for k, v in (("to_offset", self.to_offset), ("key", self.key), ("header", self.header)) if v
        }
        return urlencode(values)


def timestamp(value: str) -> str:
    """A ``datetime-local`` value (UTC, no zone) or ISO-8601/epoch ms as the broker reads it."""
    value = value.strip()
    if is_ascii_digits(value) or value.endswith("Z") or "+" in value[10:]:
        return value
    return value + "Z"


def message_error(error: CodedError) -> str:
    """The error's message, with the details it does not already say."""
    extra = [
        f"{d.get('field')}: {d.get('issue')}"
        for d in (error.details or [])
        if str(d.get("issue")) not in error.message
    ]
    return f"{error.message} ({'; '.join(extra)})" if extra else error.message


def _matches(message: dict[str, Any], key: str, header: str) -> bool:
    if key and message.get("key") != key:
        return False
    if header:
        name, has_value, value = header.partition("=")
        headers = message.get("headers") or {}
        if name.strip() not in headers:
            return False
        if has_value and headers[name.strip()] != value.strip():
            return False
    return True


def _shown(raw: bytes) -> dict[str, Any]:
    message: dict[str, Any] = orjson.loads(raw)
    message["pretty"] = json.dumps(message.get("data"), indent=2, ensure_ascii=False)
    message["pretty_headers"] = json.dumps(message.get("headers") or {}, indent=2, ensure_ascii=False)
    return message


async def browse(log: LogEngine, ref: TopicRef, query: Mapping[str, str]) -> Browse:
    """Read the page the query asks for (``partition`` present), or nothing."""
    found = Browse(
        partition=query.get("partition", "0"),
        from_offset=query.get("from_offset", ""),
        from_time=query.get("from_time", ""),
        to_offset=query.get("to_offset", ""),
        key=query.get("key", "").strip(),
        header=query.get("header", "").strip(),
    )
    if "partition" not in query:
        return found
    try:
        partition = int(found.partition or 0)
        start = int(found.from_offset) if found.from_offset else None
        end = int(found.to_offset) if found.to_offset else None
        since = timestamp(found.from_time) if found.from_time else None
        if found.searching:
            await _search(log, ref, partition, start, since, end, found)
        else:
            await _page(log, ref, partition, start, since, found)
    except ValueError:
        found.error = "Partition and offsets must be whole numbers."
    except CODED_ERRORS as e:
        found.error = message_error(e)
    return found


async def _page(
    log: LogEngine, ref: TopicRef, partition: int, start: int | None, since: str | None, found: Browse
) -> None:
    page = await reading.read_partition(
        log, ref, partition, from_offset=start, from_timestamp=since, limit=PAGE
    )
    found.messages = [_shown(m) for m in page.messages]
    first = found.messages[0]["offset"] if found.messages else page.next_offset
    if first > page.earliest_offset:
        found.previous = found.query(max(page.earliest_offset, first - PAGE))
    latest = (await log.partition_info(ref.id, partition)).latest_offset
    if page.next_offset < latest:
        found.next = found.query(page.next_offset)


async def _search(
    log: LogEngine,
    ref: TopicRef,
    partition: int,
    start: int | None,
    since: str | None,
    end: int | None,
    found: Browse,
) -> None:
    """Scan from the start to ``end`` (exclusive; the partition's end when None), at most SCAN_LIMIT
    messages, keeping the first PAGE that match; ``next`` goes on after the last message scanned."""
    position, scanned = start, 0
    info = await log.partition_info(ref.id, partition)
    stop = min(end, info.latest_offset) if end is not None else info.latest_offset
    timed = since
    while scanned < SCAN_LIMIT and len(found.messages) < PAGE:
        page = await reading.read_partition(
            log, ref, partition, from_offset=position, from_timestamp=timed, limit=_SCAN_PAGE
        )
        timed = None  # the time picks the first offset only
        for raw in page.messages:
            message = orjson.loads(raw)
            if message["offset"] >= stop:
                break
            scanned += 1
            position = message["offset"] + 1
            if _matches(message, found.key, found.header):
                found.messages.append(_shown(raw))
                if len(found.messages) == PAGE:
                    break
        else:
            if page.messages and page.next_offset < stop:
                position = page.next_offset
                continue
        break
    found.scanned = scanned
    if position is not None and position < stop:
        found.next = found.query(position)
