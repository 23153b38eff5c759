"""The crash soak's ledger and checks (``bench/soak.py`` drives them): what the soak knows across kills, and
every check of a promise against it.

The checks, each a violation when it fails:
  * ``audit``, after every restart: every 2xx publish is readable at its partition and offset, same id,
    same data (JSON-equal); no batch is visible in part (acknowledged or not); no idempotency key is in the
    log twice;
  * ``delivered``, while consuming: no message whose ack was confirmed is delivered to that group again
    (exactly-once), and a message whose nack was confirmed is not delivered before its retry delay (less
    the 10 % jitter);
  * ``final_checks``, after the last restart and a drain without kills: every message in the log was
    delivered to every group at least once and every group's lag is 0 as the server sees it (an ack whose
    answer the kill cut counts as the server says); every poison message is in the DLQ, none twice, none
    that was acked.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx

TOPIC = "soak"
PARTITIONS = 3
ACK_TIMEOUT = "1s"
RETRY_ACK_TIMEOUT = (
    "3s"  # its consumer nacks one by one: a timeout is a failed attempt, and would dead-letter
)
# No DLQ breaker: a kill times out every lease the retrying consumer held (up to a poll's 200), each a
# failed attempt as the product counts them, and the default breaker (100 ended deliveries in 60 s, over
# half failed) then pauses the group, as it should; this soak checks crash promises, the breaker has its
# own tests (tests/api/test_pause_and_dead_letter_history.py, tests/system/test_pause_nodes.py). A group paused anyway
# is reported at the end.
RETRY = {"maxRetries": 3, "retryDelay": "100ms", "breaker": None}
RETRY_DELAY_S = 0.1
GROUPS = ("push", "pull", "retry")
FLAKY_DELAY_S = 0.5
JITTER = 0.9  # retry delays are +-10 %
CLOCK_SLACK_S = 0.05


@dataclass
class Ledger:
    """Everything the soak knows, across kills."""

    rng: random.Random
    published: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> {partition, offset, data}
    keyed: dict[str, str] = field(default_factory=dict)  # idempotency key -> id (2xx answers)
    unsure: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)  # keyed, outcome unknown
    acked: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # confirmed acks
    ack_sent: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # answered or not
    seen: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # delivered at least once
    nack_due: dict[str, float] = field(default_factory=dict)  # id -> earliest redelivery (monotonic)
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> message, last read
    counts: Counter[str] = field(default_factory=Counter)
    # Engines that apply a cross-partition batch partition by partition (JetStream) show a batch the kill
    # cut in part until recovery rolls it forward: tag -> when it was first seen partial (monotonic).
    partial: dict[str, float] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    seq: int = 0

    def violation(self, text: str) -> None:
        if len(self.violations) < 1000:
            self.violations.append(text)
        self.counts["violations"] += 1

    def tag(self) -> str:
        self.seq += 1
        return f"{self.seq}"

    def role(self) -> str:
        roll = self.rng.random()
        return "poison" if roll < 0.02 else "flaky" if roll < 0.06 else "plain"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def delivered(ledger: Ledger, group: str, message: dict[str, Any]) -> None:
    """Check one delivery against what was confirmed before it."""
    ledger.counts[f"deliveries {group}"] += 1
    mid = message["id"]
    ledger.seen[group].add(mid)
    if mid in ledger.acked[group]:
        ledger.violation(f"{group}: acked message {mid} delivered again (attempt {message.get('attempt')})")
    due = ledger.nack_due.pop(f"{group}/{mid}", None)
    if due is not None and time.monotonic() < due:
        ledger.violation(f"{group}: {mid} redelivered {due - time.monotonic():.3f}s before its retry time")


def confirmed_acks(ledger: Ledger, group: str, answer: dict[str, Any]) -> None:
    ledger.acked[group].update(answer.get("ids", []))
    ledger.counts[f"acks {group}"] += len(answer.get("ids", []))


# -- checks after a restart ---------------------------------------------------------------------------


async def read_log(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    stored: dict[str, dict[str, Any]] = {}
    for p in range(PARTITIONS):
        offset = 0
        while True:
            page = await http.get(
                f"/v1/topics/{TOPIC}/partitions/{p}/messages", params={"fromOffset": offset, "limit": 1000}
            )
            page.raise_for_status()
            body = page.json()
            for m in body["data"]:
                stored[m["id"]] = m
            if not body["data"]:
                break
            offset = body["nextOffset"]
    return stored


def audit(ledger: Ledger, stored: dict[str, dict[str, Any]], roll_forward_s: float = 0.0) -> None:
    """The log as read back (``id -> message``) against what was acknowledged: every 2xx publish in place
    and unchanged, no batch in part, no idempotency key twice.

    ``roll_forward_s`` > 0 (JetStream): a batch may be seen in part for that long after it was first seen
    so, since the engine applies a batch partition by partition and rolls one the kill cut forward from
    its commit record after a while (an acknowledged batch is checked whole all the same, message by
    message); seen in part later than that, it is a violation, and at the end any is (``final_checks``)."""
    ledger.stored = stored
    by_place = {(m["partition"], m["offset"]): m for m in stored.values()}
    for mid, want in ledger.published.items():
        got = by_place.get((want["partition"], want["offset"]))
        ledger.counts["message checks"] += 1
        if got is None or got["id"] != mid or not _same(got["data"], want["data"]):
            ledger.violation(
                f"acknowledged {mid} at {want['partition']}/{want['offset']} is {got and got['id']}"
            )
    batches: dict[str, list[int]] = defaultdict(list)
    sizes: dict[str, int] = {}
    keys: Counter[str] = Counter()
    for m in stored.values():
        data = m["data"]
        if "b" in data:
            batches[data["b"]].append(data["i"])
            sizes[data["b"]] = data["of"]
        if "ik" in data:
            keys[data["ik"]] += 1
    now = time.monotonic()
    for tag, indexes in batches.items():
        ledger.counts["batch checks"] += 1
        if sorted(indexes) == list(range(sizes[tag])):
            if ledger.partial.pop(tag, None) is not None:
                ledger.counts["batches seen in part, then rolled forward whole"] += 1
            continue
        since = ledger.partial.setdefault(tag, now)
        if now - since >= roll_forward_s:
            ledger.violation(
                f"batch {tag} is partial: {len(indexes)} of {sizes[tag]}"
                + (f", {now - since:.0f} s after it was first seen so" if roll_forward_s else "")
            )
    for key, count in keys.items():
        if count > 1:
            ledger.violation(f"idempotency key {key} is in the log {count} times")


async def dlq_entries(http: httpx.AsyncClient) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        page = await http.get(f"/v1/topics/{TOPIC}/groups/retry/dlq", params=params)
        page.raise_for_status()
        body = page.json()
        ids += [e["messageId"] for e in body["data"]]
        cursor = body.get("nextCursor")
        if not cursor or not body["data"]:
            return ids


async def lags(http: httpx.AsyncClient) -> dict[str, int]:
    """Each group's total lag as the server sees it (0: everything committed, acked or dead-lettered)."""
    out: dict[str, int] = {}
    for group in GROUPS:
        answer = await http.get(f"/v1/topics/{TOPIC}/groups/{group}/offsets")
        answer.raise_for_status()
        out[group] = sum(p["lag"] for p in answer.json()["data"])
    return out


async def final_checks(http: httpx.AsyncClient, ledger: Ledger) -> None:
    stored = set(ledger.stored)
    lag = await lags(http)
    dead_letters = await dlq_entries(http)
    for group in GROUPS:
        described = await http.get(f"/v1/topics/{TOPIC}/groups/{group}")
        if described.status_code == 200 and described.json().get("paused"):
            ledger.violation(f"{group}: paused at the end ({described.json().get('pausedReason')})")
        never = stored - ledger.seen[group]
        if never:
            ledger.violation(f"{group}: {len(never)} messages never delivered, e.g. {sorted(never)[:3]}")
        if lag[group]:
            ledger.violation(f"{group}: lag {lag[group]} at the end: not everything was acked")
        # Every message this soak did not see a confirmed ack for, it did send one for (whose answer the
        # kill cut; the server committed it, as the lag says) - or it is dead-lettered.
        loose = (
            stored
            - ledger.acked[group]
            - ledger.ack_sent[group]
            - (set(dead_letters) if group == "retry" else set())
        )
        if loose:
            ledger.violation(
                f"{group}: {len(loose)} messages neither acked nor dead-lettered, e.g. {sorted(loose)[:3]}"
            )
        ledger.counts[f"acks cut by a kill, committed anyway {group}"] = len(
            stored - ledger.acked[group] - (set(dead_letters) if group == "retry" else set())
        )
    if ledger.partial:
        ledger.violation(
            f"{len(ledger.partial)} batches still partial at the end: {sorted(ledger.partial)[:3]}"
        )
    ledger.counts["dlq entries"] = len(dead_letters)
    twice = [m for m, n in Counter(dead_letters).items() if n > 1]
    if twice:
        ledger.violation(f"retry: {len(twice)} messages in the DLQ twice, e.g. {twice[:3]}")
    acked_and_dead = set(dead_letters) & ledger.acked["retry"]
    if acked_and_dead:
        ledger.violation(f"retry: acked messages in the DLQ: {sorted(acked_and_dead)[:3]}")
    poison = {mid for mid, m in ledger.stored.items() if m["data"].get("role") == "poison"}
    ledger.counts["poison messages"] = len(poison)
    if poison - set(dead_letters):
        ledger.violation(f"retry: poison messages not in the DLQ: {sorted(poison - set(dead_letters))[:3]}")
    ledger.counts["non-poison in DLQ (ack timeouts)"] = len(set(dead_letters) - poison)


def done(ledger: Ledger, lag: dict[str, int]) -> bool:
    stored = set(ledger.stored)
    return all(stored <= ledger.seen[g] for g in GROUPS) and not any(lag.values())
