"""Histories of what clients did, and the checker that reads them for anomalies.

A history is an append-only list of operations, one JSON object per line on disk, as the clients saw them:

* ``{"type": "topic", "topic", "delivery"}`` and ``{"type": "group", "topic", "group", "expectAll"}``
  describe the run (``expectAll``: the group reads from the earliest offset and must see every message);
* ``{"type": "publish", "client", "topic", "value", "seq", "batch", "invoke", "complete", "outcome",
  "partition", "offset", "id"}``: one per message, a batch being one op per item with one ``batch`` id.
  ``value`` is unique per publish (so that a value stored twice is a duplicate), ``seq`` the client's own
  order of sending; ``outcome`` is ``ok`` (2xx), ``fail`` (an error answer: not stored) or ``unknown``
  (the answer was lost: stored or not);
* ``{"type": "session", "client", "topic", "group", "member", "generation", "time"}``: a member's view of
  the group begins anew (join, rejoin, rebalance frame, seek); offsets may go back across sessions;
* ``{"type": "deliver", "client", "topic", "group", "member", "generation", "partition", "offset", "id",
  "value", "attempt", "invoke", "time"}``: a message received (``invoke``: when the poll that brought it
  was sent; for a push consumer the moment it arrived);
* ``{"type": "ack" | "nack" | "dead-letter", "client", "topic", "group", "member", "ids", "invoke",
  "complete", "outcome"}``: ``ok`` only for the ids the server confirmed;
* ``{"type": "read", "client", "topic", "partition", "offset", "value", "id", "time"}``: a stream read
  (replay) of one message, by offset;
* ``{"type": "fault", "name", "invoke", "complete", "note"}``: a fault the run injected (for reading a history;
  the checker does not need it);
* ``{"type": "offsets", "group", "at", "partitions"}``: a group's offsets as the drain read them (``current``,
  ``latest``, ``lag`` per partition; for reading a history).

``check(history, final_reads)`` compares it with the full read of every partition after the run
(``{topic: {partition: [{"offset", "value", "id"}, ...]}}``) and reports, per partition, the anomalies of
Jepsen's Kafka workload (``lost-write``, ``duplicate``, ``poll-skip``, ``nonmonotonic-poll``, ``unseen``)
and those of this product's promises (``reorder``, ``partial-batch``, ``acked-then-redelivered``,
``two-owner``, ``never-redelivered``). What is *not* an anomaly: a redelivery after a nack, a lease
timeout or a crash on an at-least-once topic; a publish whose answer was lost being stored, or not (but
once stored, a group that expects every message must see it); a message delivered again to a new session
below the offsets the old one saw.
"""

from __future__ import annotations

import json
import threading
import time
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Op = dict[str, Any]
FinalReads = Mapping[str, Mapping[int, list[dict[str, Any]]]]

KINDS = (
    "lost-write",
    "duplicate",
    "reorder",
    "nonmonotonic-poll",
    "poll-skip",
    "partial-batch",
    "acked-then-redelivered",
    "two-owner",
    "unseen",
    "never-redelivered",
)


class Recorder:
    """Appends operations to a history in memory and, if given a path, to a JSON-lines file as they come
    (a run that dies still leaves what it did). Safe to share between tasks and threads."""

    def __init__(self, path: Path | None = None) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8") if path is not None else None

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def record(self, op_type: str, **fields: Any) -> Op:
        op: Op = {"type": op_type, **fields}
        with self._lock:
            self.ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op, separators=(",", ":")) + "\n")
        return op

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load(path: Path) -> list[Op]:
    """A history written by ``Recorder``."""
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


@dataclass(frozen=True)
class Anomaly:
    kind: str
    topic: str
    partition: int | None
    detail: str


@dataclass
class Report:
    anomalies: list[Anomaly] = field(default_factory=list)
    operations: int = 0

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def kinds(self) -> set[str]:
        return {a.kind for a in self.anomalies}

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        for a in self.anomalies:
            counts[a.kind] += 1
        return counts

    def summary(self, most: int = 20) -> str:
        lines = [f"{a.kind} {a.topic}/{a.partition}: {a.detail}" for a in self.anomalies[:most]]
        if len(self.anomalies) > most:
            lines.append(f"… and {len(self.anomalies) - most} more")
        return "\n".join(lines) or "no anomalies"

    def add(self, kind: str, topic: str, partition: int | None, detail: str) -> None:
        self.anomalies.append(Anomaly(kind, topic, partition, detail))


def check(history: Iterable[Op], final_reads: FinalReads) -> Report:
    """Every anomaly the history and the final reads of the partitions show (see the module's text)."""
    ops = list(history)
    report = Report(operations=len(ops))
    by_type: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_type[op["type"]].append(op)
    stored = _stored(final_reads)
    _check_writes(by_type["publish"], stored, report)
    _check_polls(by_type, stored, report)
    _check_groups(by_type, stored, report)
    return report


@dataclass(frozen=True)
class _Place:
    partition: int
    offset: int
    id: str | None


def _stored(final_reads: FinalReads) -> dict[tuple[str, Any], list[_Place]]:
    """(topic, value) → every place that value is stored at."""
    places: dict[tuple[str, Any], list[_Place]] = defaultdict(list)
    for topic, partitions in final_reads.items():
        for partition, messages in partitions.items():
            for m in messages:
                places[(topic, _key(m["value"]))].append(_Place(int(partition), m["offset"], m.get("id")))
    return places


def _key(value: Any) -> Any:
    """Values as dict keys (a JSON object or list is compared by its text)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def _check_writes(publishes: list[Op], stored: dict[tuple[str, Any], list[_Place]], report: Report) -> None:
    batches: dict[tuple[str, str], list[Op]] = defaultdict(list)
    by_client: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in publishes:
        topic, places = op["topic"], stored.get((op["topic"], _key(op["value"])), [])
        if op["outcome"] == "ok" and not places:
            report.add(
                "lost-write",
                topic,
                op.get("partition"),
                f"{op['value']!r} answered at offset "
                f"{op.get('offset')} (id {op.get('id')}) is not in the partition",
            )
        if op["outcome"] == "ok" and places and op.get("offset") is not None:
            answered = _Place(op["partition"], op["offset"], op.get("id"))
            if all((p.partition, p.offset) != (answered.partition, answered.offset) for p in places):
                report.add(
                    "lost-write",
                    topic,
                    op["partition"],
                    f"{op['value']!r} answered at offset "
                    f"{op['offset']} is stored at {[(p.partition, p.offset) for p in places]} only",
                )
        if len(places) > 1:
            report.add(
                "duplicate",
                topic,
                places[0].partition,
                f"{op['value']!r} stored at {[(p.partition, p.offset) for p in places]}",
            )
        if op.get("batch") is not None:
            batches[(topic, op["batch"])].append(op)
        if op["outcome"] == "ok" and op.get("offset") is not None:
            by_client[(topic, op["client"])].append(op)
    for (topic, batch), items in batches.items():
        present = [bool(stored.get((topic, _key(op["value"])))) for op in items]
        if any(present) and not all(present):
            report.add(
                "partial-batch",
                topic,
                items[0].get("partition"),
                f"batch {batch}: {sum(present)} of {len(items)} values stored",
            )
    # One producer's acknowledged publishes, sent one after the other, are stored in that order.
    for (topic, client), items in by_client.items():
        last: dict[int, Op] = {}
        for op in sorted(items, key=lambda o: (o["seq"], o.get("offset", 0))):
            before = last.get(op["partition"])
            if before is not None and op["offset"] <= before["offset"]:
                report.add(
                    "reorder",
                    topic,
                    op["partition"],
                    f"{client}: {op['value']!r} (seq {op['seq']}) "
                    f"at offset {op['offset']} after {before['value']!r} (seq {before['seq']}) "
                    f"at {before['offset']}",
                )
            last[op["partition"]] = op


def _check_polls(
    by_type: dict[str, list[Op]], stored: dict[tuple[str, Any], list[_Place]], report: Report
) -> None:
    """Within one member session, first deliveries of a partition go up one stored offset at a time."""
    offsets_stored: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (topic, _value), places in stored.items():
        for p in places:
            offsets_stored[(topic, p.partition)].append(p.offset)
    for offsets in offsets_stored.values():
        offsets.sort()
    first_delivery: dict[tuple[str, str, str], float] = {}  # (topic, group, id) → earliest receipt
    for op in by_type["deliver"]:
        k = (op["topic"], op["group"], op["id"])
        first_delivery[k] = min(first_delivery.get(k, op["time"]), op["time"])
    id_at: dict[tuple[str, int, int], str | None] = {}
    for (topic, _value), places in stored.items():
        for p in places:
            id_at[(topic, p.partition, p.offset)] = p.id
    # A session ends where the member's next one (or another event of it) begins: key the deliveries by
    # the session counter of their member.
    session_of: dict[tuple[str, str, str], int] = defaultdict(int)
    last: dict[tuple[str, str, str, int, int], Op] = {}
    events = sorted(by_type["session"] + by_type["deliver"], key=lambda o: o["time"])
    for op in events:
        member = (op["topic"], op["group"], op["member"])
        if op["type"] == "session":
            session_of[member] += 1
            continue
        if op.get("attempt", 1) != 1:
            continue  # a retry comes back below the offsets after it: promised, not an anomaly
        k = (*member, session_of[member], op["partition"])
        before = last.get(k)
        last[k] = op
        if before is None:
            continue
        topic, partition = op["topic"], op["partition"]
        if op["offset"] <= before["offset"]:
            report.add(
                "nonmonotonic-poll",
                topic,
                partition,
                f"member {op['member']} of {op['group']}: "
                f"offset {op['offset']} after {before['offset']} in one session",
            )
            continue
        stored_here = offsets_stored[(topic, partition)]
        lo, hi = bisect_right(stored_here, before["offset"]), bisect_left(stored_here, op["offset"])
        for skipped in stored_here[lo:hi]:
            mid = id_at.get((topic, partition, skipped))
            seen = first_delivery.get((topic, op["group"], mid)) if mid is not None else None
            if seen is None or seen > op["time"]:
                report.add(
                    "poll-skip",
                    topic,
                    partition,
                    f"member {op['member']} of {op['group']}: "
                    f"offset {before['offset']} then {op['offset']}, {skipped} never delivered before",
                )


def _check_groups(
    by_type: dict[str, list[Op]], stored: dict[tuple[str, Any], list[_Place]], report: Report
) -> None:
    exactly_once = {op["topic"] for op in by_type["topic"] if op["delivery"] == "exactly-once"}
    settled: dict[tuple[str, str, str], float] = {}  # (topic, group, id) → when its ack was confirmed
    maybe_settled: set[tuple[str, str, str]] = set()  # acked/dead-lettered, or an ack whose answer was lost
    for op in by_type["ack"] + by_type["dead-letter"]:
        for mid in op["ids"]:
            k = (op["topic"], op["group"], mid)
            if op["outcome"] in ("ok", "unknown"):
                maybe_settled.add(k)
            if op["outcome"] == "ok" and op["type"] == "ack":
                settled[k] = min(settled.get(k, op["complete"]), op["complete"])
    deliveries: dict[tuple[str, str, str], list[Op]] = defaultdict(list)
    for op in by_type["deliver"]:
        deliveries[(op["topic"], op["group"], op["id"])].append(op)
        acked_at = settled.get((op["topic"], op["group"], op["id"]))
        if op["topic"] in exactly_once and acked_at is not None and op["invoke"] > acked_at:
            report.add(
                "acked-then-redelivered",
                op["topic"],
                op["partition"],
                f"{op['id']} delivered to "
                f"{op['member']} of {op['group']} (attempt {op['attempt']}) after its ack was confirmed",
            )
    _check_owners(by_type["deliver"], report)
    for k, ops in deliveries.items():
        if k not in maybe_settled:
            topic, group, mid = k
            last = max(ops, key=lambda o: o["time"])
            report.add(
                "never-redelivered",
                topic,
                last["partition"],
                f"{mid} delivered to {group} "
                f"{len(ops)} time(s), last to {last['member']}, never acked nor delivered again",
            )
    delivered_values = {(op["topic"], op["group"], _key(op["value"])) for op in by_type["deliver"]}
    for g in by_type["group"]:
        if not g.get("expectAll"):
            continue
        for op in by_type["publish"]:
            # A publish whose answer was lost is stored or not; if it is, the group must see it too (the
            # drain ends with no lag once what was committed late has settled: ``load.run``).
            if op["topic"] != g["topic"] or op["outcome"] == "fail":
                continue
            if stored.get((op["topic"], _key(op["value"]))) and (
                (op["topic"], g["group"], _key(op["value"])) not in delivered_values
            ):
                report.add(
                    "unseen",
                    op["topic"],
                    op.get("partition"),
                    f"{op['value']!r} at offset {op.get('offset')} never delivered to {g['group']}",
                )


def _check_owners(deliveries: list[Op], report: Report) -> None:
    """Two members receiving one partition's messages at overlapping times under one generation."""
    spans: dict[tuple[str, str, int, Any], dict[str, list[float]]] = defaultdict(dict)
    for op in deliveries:
        span = spans[(op["topic"], op["group"], op["partition"], op.get("generation"))].setdefault(
            op["member"], [op["time"], op["time"]]
        )
        span[0], span[1] = min(span[0], op["time"]), max(span[1], op["time"])
    for (topic, group, partition, generation), members in spans.items():
        ordered = sorted(members.items(), key=lambda kv: kv[1][0])
        for i, (a, (_a0, a1)) in enumerate(ordered):
            for b, (b0, _b1) in ordered[i + 1 :]:
                if b0 > a1:
                    break
                report.add(
                    "two-owner",
                    topic,
                    partition,
                    f"{a} and {b} of {group} both received messages in generation {generation}",
                )
