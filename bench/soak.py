"""Crash soak: SIGKILL a real ``queuecore-server`` again and again under mixed load, and check after every
restart that nothing it promised was broken.

For each configuration (log engine x metadata store; ``--engines local``, ``--stores sqlite,postgres``):
a fresh data dir (and, for Postgres, a fresh database on the machine's server), one exactly-once topic of
3 partitions, and ``--kills`` rounds of: mixed load for a random 0.4-1.6 s, ``SIGKILL``, restart, check.

Load (asyncio tasks in this process, each stops at the kill and starts again after the restart):
  * publishers: single messages with and without ``Idempotency-Key``, batches (2-20) with and without
    per-item ``idempotencyKey``; a publish in flight at the kill has an unknown outcome; a keyed one is
    sent again after the restart, with the same key;
  * group ``push``: a WebSocket consumer acking everything it receives;
  * group ``pull``: a REST pull consumer acking everything;
  * group ``retry``: a pull consumer of a group with a DLQ (``maxRetries`` 3, ``retryDelay`` 100ms): it
    nacks "poison" messages at every attempt (they must end in the DLQ), nacks "flaky" ones once with
    ``delay`` 500ms (then acks them), acks the rest. ``ackTimeout`` is 1s (3s for ``retry``).

Checks (a failed one is a violation; the run's figure must be 0):
  after every restart
  * every 2xx publish is readable at its partition and offset, same id, same data (JSON-equal);
  * no batch is visible in part (acknowledged or not: every batch is all there or not at all);
  * no idempotency key is in the log twice; a keyed publish whose outcome was unknown, sent again, answers
    2xx and, if the first one was written, its original id and offset; a few acknowledged keyed publishes
    sent again answer their original id and offset with ``Idempotent-Replayed: true``;
  while consuming
  * no message whose ack was confirmed (in ``acked`` ids) is delivered to that group again (exactly-once);
  * a message whose nack was confirmed is not delivered again before its retry delay (-10 % jitter);
  after the last restart, consuming until every group is done (no kills)
  * every message in the log was delivered to every group at least once, and every group's lag is 0 as
    the server sees it (everything acked or dead-lettered); an ack whose answer the kill cut counts as
    the server says (its message is either committed or delivered again);
  * for ``retry``: every poison message is in the DLQ, none is in it twice, none that was acked is in it.

A second log engine is one more entry in ``ENGINES`` (the env that selects it, and a context manager
that provides what it needs, e.g. a NATS cluster for ``QUEUECORE_LOG_ENGINE=jetstream``).

    .venv/bin/python bench/soak.py [--kills 100] [--stores sqlite,postgres] [--engines local] [--seed 1]
                                   [--no-write]

Writes bench/results/soak.md (and soak.json) unless ``--no-write``; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from tests.fixtures.database import create_database, database_url, drop_database
from tests.fixtures.server import ServerProcess, bootstrap, cli, server_env

TOPIC = "soak"
PARTITIONS = 3
ACK_TIMEOUT = "1s"
RETRY_ACK_TIMEOUT = (
    "3s"  # its consumer nacks one by one: a timeout is a failed attempt, and would dead-letter
)
RETRY = {"maxRetries": 3, "retryDelay": "100ms"}
RETRY_DELAY_S = 0.1
GROUPS = ("push", "pull", "retry")
FLAKY_DELAY_S = 0.5
JITTER = 0.9  # retry delays are +-10 %
CLOCK_SLACK_S = 0.05
PORTS = range(19150, 19200)  # this soak's port range


@dataclass(frozen=True)
class Engine:
    """A log engine the soak can run on: the env that selects it and what it needs running."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    provide: Callable[[], contextlib.AbstractContextManager[dict[str, str]]] | None = None


ENGINES: dict[str, Engine] = {"local": Engine("local")}


@contextlib.contextmanager
def metadata_store(kind: str) -> Iterator[str]:
    """The database URL of a fresh metadata store of ``kind`` ('' = the embedded SQLite file)."""
    if kind == "sqlite":
        yield ""
        return
    name = f"qc_soak_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    try:
        yield database_url(name)
    finally:
        asyncio.run(drop_database(name))


_TAKEN: set[int] = set()  # ports handed out here (configurations may run side by side)
_TAKEN_LOCK = threading.Lock()


def free_port() -> int:
    with _TAKEN_LOCK:
        return _free_port()


def _free_port() -> int:
    for port in random.sample(PORTS, len(PORTS)):
        if port in _TAKEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _TAKEN.add(port)
            return port
    raise RuntimeError(f"no free port in {PORTS}")


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


# -- load ---------------------------------------------------------------------------------------------


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


def audit(ledger: Ledger, stored: dict[str, dict[str, Any]]) -> None:
    """The log as read back (``id -> message``) against what was acknowledged: every 2xx publish in place
    and unchanged, no batch in part, no idempotency key twice."""
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
    for tag, indexes in batches.items():
        ledger.counts["batch checks"] += 1
        if sorted(indexes) != list(range(sizes[tag])):
            ledger.violation(f"batch {tag} is partial: {len(indexes)} of {sizes[tag]}")
    for key, count in keys.items():
        if count > 1:
            ledger.violation(f"idempotency key {key} is in the log {count} times")


async def check_log(http: httpx.AsyncClient, ledger: Ledger) -> None:
    stored = await read_log(http)
    audit(ledger, stored)
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
    dlq = await dlq_entries(http)
    for group in GROUPS:
        never = stored - ledger.seen[group]
        if never:
            ledger.violation(f"{group}: {len(never)} messages never delivered, e.g. {sorted(never)[:3]}")
        if lag[group]:
            ledger.violation(f"{group}: lag {lag[group]} at the end: not everything was acked")
        # Every message this soak did not see a confirmed ack for, it did send one for (whose answer the
        # kill cut; the server committed it, as the lag says) - or it is dead-lettered.
        loose = (
            stored - ledger.acked[group] - ledger.ack_sent[group] - (set(dlq) if group == "retry" else set())
        )
        if loose:
            ledger.violation(
                f"{group}: {len(loose)} messages neither acked nor dead-lettered, e.g. {sorted(loose)[:3]}"
            )
        ledger.counts[f"acks cut by a kill, committed anyway {group}"] = len(
            stored - ledger.acked[group] - (set(dlq) if group == "retry" else set())
        )
    ledger.counts["dlq entries"] = len(dlq)
    twice = [m for m, n in Counter(dlq).items() if n > 1]
    if twice:
        ledger.violation(f"retry: {len(twice)} messages in the DLQ twice, e.g. {twice[:3]}")
    acked_and_dead = set(dlq) & ledger.acked["retry"]
    if acked_and_dead:
        ledger.violation(f"retry: acked messages in the DLQ: {sorted(acked_and_dead)[:3]}")
    poison = {mid for mid, m in ledger.stored.items() if m["data"].get("role") == "poison"}
    ledger.counts["poison messages"] = len(poison)
    if poison - set(dlq):
        ledger.violation(f"retry: poison messages not in the DLQ: {sorted(poison - set(dlq))[:3]}")
    ledger.counts["non-poison in DLQ (ack timeouts)"] = len(set(dlq) - poison)


def done(ledger: Ledger, lag: dict[str, int]) -> bool:
    stored = set(ledger.stored)
    return all(stored <= ledger.seen[g] for g in GROUPS) and not any(lag.values())


# -- the run ------------------------------------------------------------------------------------------


_CUT = (httpx.TransportError, OSError, WebSocketException, asyncio.CancelledError)


@contextlib.asynccontextmanager
async def running(
    tasks: list[asyncio.Task[None]], ledger: Ledger, killed: bool = True
) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if killed:
            # The server is gone: let every task see its connection cut (what was in flight is recorded
            # as unknown), then stop what is left.
            await asyncio.wait(tasks, timeout=3)
        for task in tasks:
            task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            # Connections cut by the kill end a task; anything else is a finding.
            if isinstance(result, Exception) and not isinstance(result, _CUT):
                ledger.violation(f"a load task failed: {result!r}")


def restart(server: ServerProcess, ledger: Ledger) -> None:
    """Start the killed server again. ``ServerProcess.start`` waits 30 s for a healthy answer; on a loaded
    machine (health checks time out under load) it may take longer: a live process gets 120 s more."""
    started = time.monotonic()
    try:
        server.start()
    except AssertionError:
        if server.process is None or server.process.poll() is not None:
            raise
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/v1/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    took = time.monotonic() - started
    ledger.counts["slowest restart (ms)"] = max(ledger.counts["slowest restart (ms)"], round(took * 1000))


async def soak(server: ServerProcess, ledger: Ledger, kills: int, log: Callable[[str], None]) -> None:
    key = server.keys["production"]
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=15, limits=limits) as http:
        created = await http.post(
            "/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS, "delivery": "exactly-once"}
        )
        created.raise_for_status()
        for group, config in (("push", {}), ("pull", {}), ("retry", {"deadLetter": RETRY})):
            answer = await http.put(
                f"/v1/topics/{TOPIC}/groups/{group}",
                json={"ackTimeout": RETRY_ACK_TIMEOUT if group == "retry" else ACK_TIMEOUT, **config},
            )
            answer.raise_for_status()
    started = time.monotonic()
    for round_ in range(1, kills + 1):
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=15, limits=limits) as http:
            tasks = [
                asyncio.create_task(publisher(http, ledger, kind))
                for kind in ("single", "single-keyed", "batch", "batch-keyed")
            ]
            tasks += [
                asyncio.create_task(push_consumer(server.url, key, ledger)),
                asyncio.create_task(pull_consumer(http, ledger, "pull")),
                asyncio.create_task(pull_consumer(http, ledger, "retry")),
            ]
            async with running(tasks, ledger):
                await asyncio.sleep(ledger.rng.uniform(0.4, 1.6))
                server.stop(signal.SIGKILL)
                ledger.counts["kills"] += 1
        await asyncio.to_thread(restart, server, ledger)
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30, limits=limits) as http:
            await check_log(http, ledger)
        if round_ % 10 == 0 or round_ == kills:
            log(
                f"  kill {round_}/{kills} at {time.monotonic() - started:.0f}s: {len(ledger.stored)} messages in the log,"
                f" {ledger.counts['violations']} violations"
            )
    # Drain: consume without kills until every group is done.
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30, limits=limits) as http:
        tasks = [
            asyncio.create_task(push_consumer(server.url, key, ledger)),
            asyncio.create_task(pull_consumer(http, ledger, "pull")),
            asyncio.create_task(pull_consumer(http, ledger, "retry")),
        ]
        deadline = time.monotonic() + 180
        async with running(tasks, ledger, killed=False):
            while time.monotonic() < deadline:
                await asyncio.sleep(1)
                if done(ledger, await lags(http)):
                    break
        await check_log(http, ledger)
        await final_checks(http, ledger)


def run_config(
    engine: Engine, store: str, kills: int, seed: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """One engine x store configuration: a fresh server, ``kills`` rounds, the final checks."""
    ledger = Ledger(rng=random.Random(seed))
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(metadata_store(store))
        extra = dict(engine.env)
        if engine.provide is not None:
            extra.update(stack.enter_context(engine.provide()))
        data = Path(tempfile.mkdtemp(prefix=f"qc-soak-{engine.name}-{store}-"))
        env = server_env(data, url, **extra, QUEUECORE_LOG_LEVEL="WARNING")
        cli(env, "migrate")
        project = f"soak-{secrets.token_hex(3)}"
        keys = bootstrap(env, project, "--tier", "enterprise")["keys"]
        cli(
            env,
            "projects",
            "set-tier",
            "--project",
            project,
            "--tier",
            "enterprise",
            "--limits",
            "publish=100000,consume=100000,admin=10000",
        )
        server = ServerProcess(env=env, port=free_port(), data_dir=data, log_path=data / "server.log")
        server.keys = keys
        server.start()
        try:
            asyncio.run(soak(server, ledger, kills, log))
        except BaseException:
            log(f"the soak stopped; the data dir and server log are kept in {data}")
            raise
        finally:
            server.stop()
            errors = [line for line in server.log_path.read_text().splitlines() if '"level":"error"' in line]
            ledger.counts["server ERROR log lines"] = len(errors)
        if ledger.violations:
            log(f"violations: the data dir and server log are kept in {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)
    return {
        "engine": engine.name,
        "store": store,
        "seed": seed,
        "seconds": round(time.monotonic() - started),
        "counts": dict(ledger.counts),
        "messages in the log": len(ledger.stored),
        "violations": ledger.violations,
    }


def write_results(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    out = ROOT / "bench" / "results"
    (out / "soak.json").write_text(json.dumps(results, indent=2) + "\n")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True, cwd=ROOT
    ).stdout.strip() or os.environ.get("SOAK_COMMIT", "?")  # run from an exported snapshot: no git there
    lines = [
        "# Crash soak",
        "",
        (
            f"Generated by `bench/soak.py --kills {args.kills} --stores {args.stores} --engines {args.engines}"
            f" --seed {args.seed}` at commit {commit}, on {platform.platform()}, {os.cpu_count()} CPUs."
        ),
        "Every round: mixed load for 0.4-1.6 s, SIGKILL of the server, restart, checks (see the script's docstring",
        "and docs/reliability.md).",
        "",
        (
            "| engine | metadata | kills | 2xx publishes | messages in the log | message checks | batch checks |"
            " deliveries push / pull / retry | confirmed acks push / pull / retry | nacks | DLQ entries (poison)"
            " | violations |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---|---|---:|---|---:|",
    ]
    for r in results:
        c = Counter(r["counts"])
        lines.append(
            f"| {r['engine']} | {r['store']} | {c['kills']} | {c['published (2xx)']:,} | {r['messages in the log']:,} |"
            f" {c['message checks']:,} | {c['batch checks']:,} |"
            f" {c['deliveries push']:,} / {c['deliveries pull']:,} / {c['deliveries retry']:,} |"
            f" {c['acks push']:,} / {c['acks pull']:,} / {c['acks retry']:,} | {c['nacks retry']:,} |"
            f" {c['dlq entries']:,} ({c['poison messages']:,}) | {c['violations']} |"
        )
    lines += ["", "Other counts per configuration:", ""]
    for r in results:
        rest = {k: v for k, v in sorted(r["counts"].items())}
        lines.append(
            f"- {r['engine']} / {r['store']} ({r['seconds']} s): "
            + ", ".join(f"{k} {v:,}" for k, v in rest.items())
        )
    (out / "soak.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs per configuration")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--engines", default="local", help=f"of {', '.join(ENGINES)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print only; do not write bench/results")
    parser.add_argument("--serial", dest="parallel", action="store_false", help="one configuration at a time")
    args = parser.parse_args()
    configs = [(e, store) for e in args.engines.split(",") for store in args.stores.split(",")]

    def one(config: tuple[str, str]) -> dict[str, Any]:
        engine_name, store = config
        say = lambda line: print(f"[{engine_name}/{store}] {line.strip()}", flush=True)
        say(f"{args.kills} kills")
        result = run_config(ENGINES[engine_name], store, args.kills, args.seed, say)
        say(f"done in {result['seconds']} s: counts {result['counts']}")
        for v in result["violations"][:20]:
            say(f"VIOLATION {v}")
        return result

    # Configurations side by side (each has its own server, data dir and database).
    with ThreadPoolExecutor(len(configs) if args.parallel else 1) as pool:
        results = list(pool.map(one, configs))
    if not args.no_write:
        write_results(results, args)
    return 1 if any(r["counts"].get("violations") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
