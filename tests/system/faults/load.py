"""Continuous load against a real server while faults are injected, recorded as a history for the checker.

One exactly-once topic; single and batch publishers (every message carries a unique value); two push
(WebSocket) members in group ``push`` and two pull members in group ``pull``, both reading from the earliest
offset, acking everything and (pull) nacking one message in ten once. ``run`` starts the load, applies the
faults one after the other with load between them, then lets the consumers drain both groups to lag 0, reads
every partition in full and returns the history, the final reads and the checker's report. Used by
tests/system/faults/test_short_faults.py and bench/faults.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from infra.nats_cluster import NatsCluster
from tests.fixtures.postgres import PrivatePostgres
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import ServerProcess, bootstrap, cli, free_port, set_tier
from tests.system.faults.history import Recorder, Report, check
from tests.system.faults.latency_proxy import ProxyThread
from tests.system.faults.lazyfs import LazyFS
from tests.system.faults.network import Links, Party

TOPIC = "history"
PARTITIONS = 3
GROUPS = ("push", "pull")
ACK_TIMEOUT = "2s"
SESSION_TIMEOUT = "2s"
SESSION_TIMEOUT_S = 2.0


@dataclass
class Target:
    """What a fault acts on: the API process and, on the JetStream deployment, the NATS cluster and the
    parties whose links can be cut (tests/system/faults/network.py): the API process and each NATS node; on a
    deployment with limits in Redis, its own ``redis-server`` (tests/system/faults/redis_faults.py); under a
    power loss, the lazy file systems its processes store data on (tests/system/faults/power_faults.py)."""

    server: ServerProcess | None = None  # set once the API process is made (it starts in ``api``'s cgroup)
    redis: RedisServer | None = None
    # Between the API process and ``redis`` when a fault slows Redis down (latency_proxy.py).
    redis_proxy: ProxyThread | None = None
    cluster: NatsCluster | None = None
    links: Links | None = None
    api: Party | None = None
    nodes: list[Party] = field(default_factory=list)
    disks: list[LazyFS] = field(default_factory=list)
    # The metadata's Postgres, when it is the run's own (a power loss takes it down with the rest).
    postgres: PrivatePostgres | None = None

    @property
    def api_server(self) -> ServerProcess:
        assert self.server is not None, "the target's API process is not set"
        return self.server


def prepare_server(env: dict[str, str], root: Path, cgroup: Path | None = None) -> tuple[ServerProcess, str]:
    """A migrated, bootstrapped deployment's API process (not started; its data and log under ``root``) and
    a production key of an enterprise project whose limits are out of the way: a refused request in a
    fault run would be noise, not a finding."""
    cli(env, "migrate")
    key = bootstrap(env, "faults", "--tier", "enterprise")["keys"]["production"]
    set_tier(env, "faults", "enterprise", "publish=100000,consume=100000,admin=10000")
    server = ServerProcess(
        env=env, port=free_port(), data_dir=root / "data", log_path=root / "srv.log", cgroup=cgroup
    )
    return server, key


@dataclass
class Fault:
    """One fault: a name for the results table and what it does to the deployment (it returns once the
    fault is over: the process back, the link healed, or never away)."""

    name: str
    # What it did, when there is more to say than its name (which node, what the others saw meanwhile).
    apply: Callable[[Target], Awaitable[str | None]]


async def _sigkill_restart(target: Target) -> str | None:
    server = target.api_server
    server.stop(signal.SIGKILL)
    await asyncio.to_thread(server.start)
    return None


async def _sigstop_past_session(target: Target) -> str | None:
    server = target.api_server
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    await asyncio.sleep(SESSION_TIMEOUT_S + 1.5)  # longer than the groups' sessionTimeout
    server.process.send_signal(signal.SIGCONT)
    return None


SIGKILL = Fault("sigkill+restart", _sigkill_restart)
SIGSTOP = Fault("sigstop>sessionTimeout", _sigstop_past_session)


@dataclass
class Load:
    server: ServerProcess
    key: str
    recorder: Recorder
    publishing: bool = True
    consuming: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def http(self, timeout: float = 10) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.server.url, headers=self.headers, timeout=timeout)

    # --- publishers ---------------------------------------------------------------------------------

    async def publisher(self, client: str, batch: bool) -> None:
        """Publishes back to back, one after the other (so that one client's acknowledged publishes to a
        partition must be stored in the order sent); single messages or batches of 2-8."""
        seq = 0
        async with self.http() as http:
            while self.publishing:
                size = 2 + seq % 7 if batch else 1
                items = [(seq + i, f"{client}-{seq + i}") for i in range(size)]
                seq += size
                batch_id = f"{client}-b{items[0][0]}" if batch else None
                invoke = Recorder.now()
                outcome, placed = await self._send(http, [v for _, v in items], batch)
                complete = Recorder.now()
                for (n, value), where in zip(items, placed, strict=True):
                    self.recorder.record(
                        "publish",
                        client=client,
                        topic=TOPIC,
                        value=value,
                        seq=n,
                        batch=batch_id,
                        invoke=invoke,
                        complete=complete,
                        outcome=outcome,
                        **where,
                    )
                self.count(f"publish {outcome}", size)
                if outcome != "ok":
                    await asyncio.sleep(0.2)

    async def _send(
        self, http: httpx.AsyncClient, values: list[str], batch: bool
    ) -> tuple[str, list[dict[str, Any]]]:
        nowhere: list[dict[str, Any]] = [{"partition": None, "offset": None, "id": None} for _ in values]
        try:
            if batch:
                body = {"messages": [{"data": {"v": v}} for v in values]}
                r = await http.post(f"/v1/topics/{TOPIC}/messages/batch", json=body)
            else:
                r = await http.post(f"/v1/topics/{TOPIC}/messages", json={"data": {"v": values[0]}})
        except httpx.ConnectError:
            return "fail", nowhere  # never sent
        except httpx.TransportError:
            return "unknown", nowhere  # sent; the answer was lost
        if r.status_code == 201:
            answered = r.json()["messages"] if batch else [r.json()]
            return "ok", [
                {"partition": m["partition"], "offset": m["offset"], "id": m["id"]} for m in answered
            ]
        # A 5xx may come from a write that went through in part of the way (a timeout after the append).
        return ("unknown" if r.status_code >= 500 else "fail"), nowhere

    # --- consumers ----------------------------------------------------------------------------------

    def _deliver(
        self, client: str, group: str, ident: dict[str, Any], m: dict[str, Any], invoke: float
    ) -> None:
        self.recorder.record(
            "deliver",
            client=client,
            topic=TOPIC,
            group=group,
            member=ident["memberId"],
            generation=ident["generationId"],
            partition=m["partition"],
            offset=m["offset"],
            id=m["id"],
            value=m["data"]["v"],
            attempt=m["attempt"],
            invoke=invoke,
            time=Recorder.now(),
        )
        self.count(f"delivered {group}")

    def _session(self, client: str, group: str, ident: dict[str, Any]) -> None:
        self.recorder.record(
            "session",
            client=client,
            topic=TOPIC,
            group=group,
            member=ident["memberId"],
            generation=ident["generationId"],
            time=Recorder.now(),
        )

    def _settled(
        self, kind: str, client: str, group: str, member: str, ids: list[str], invoke: float, outcome: str
    ) -> None:
        if ids:
            self.recorder.record(
                kind,
                client=client,
                topic=TOPIC,
                group=group,
                member=member,
                ids=ids,
                invoke=invoke,
                complete=Recorder.now(),
                outcome=outcome,
            )

    async def push_member(self, client: str) -> None:
        """A WebSocket member of ``push``: acks every message by a frame; reconnects after any failure."""
        url = self.server.url.replace("http://", "ws://")
        url += f"/v1/topics/{TOPIC}/consume?group=push&startFrom=earliest&maxInFlight=100"
        while self.consuming:
            sent: dict[str, float] = {}  # ack ids on the wire → when sent
            ident: dict[str, Any] = {}
            try:
                async with connect(url, additional_headers=self.headers, open_timeout=5) as ws:
                    while self.consuming:
                        try:
                            raw = await asyncio.wait_for(ws.recv(), 0.5)
                        except TimeoutError:
                            continue
                        now = Recorder.now()
                        frame = json.loads(raw)
                        kind = frame.get("type")
                        if kind in ("welcome", "rebalance"):
                            ident = {
                                "memberId": frame.get("memberId", ident.get("memberId")),
                                "generationId": frame["generationId"],
                            }
                            self._session(client, "push", ident)
                        elif kind in ("message", "messages"):
                            batch = frame["messages"] if kind == "messages" else [frame]
                            for m in batch:
                                self._deliver(client, "push", ident, m, now)
                            ids = [m["id"] for m in batch]
                            sent.update(dict.fromkeys(ids, Recorder.now()))
                            await ws.send(json.dumps({"type": "ack", "ids": ids}))
                        elif kind == "acked":
                            member = ident["memberId"]
                            for mid in frame["ids"]:
                                self._settled("ack", client, "push", member, [mid], sent.pop(mid, now), "ok")
                            for failed in frame.get("failed", []):
                                mid = failed["id"]
                                self._settled(
                                    "ack", client, "push", member, [mid], sent.pop(mid, now), "fail"
                                )
                        elif kind == "error":
                            self.count("push error frames")
            except (OSError, TimeoutError, Exception) as exc:  # noqa: BLE001 - any end of the connection
                self.count(f"push reconnects ({type(exc).__name__})")
            finally:
                for mid, at in sent.items():  # the connection ended before their answer
                    self._settled("ack", client, "push", ident.get("memberId", "?"), [mid], at, "unknown")
            if self.consuming:
                await asyncio.sleep(0.2)

    async def pull_member(self, client: str) -> None:
        """A pull member of ``pull``: polls, nacks one message in ten on its first attempt, acks the rest."""
        base = f"/v1/topics/{TOPIC}/groups/pull"
        ident: dict[str, Any] | None = None
        member: str | None = None
        async with self.http() as http:
            while self.consuming:
                try:
                    if ident is None:
                        ident = await self._join(http, base, member)
                        if ident is None:
                            await asyncio.sleep(0.2)
                            continue
                        member = ident["memberId"]
                        self._session(client, "pull", ident)
                    ident = await self._poll_once(http, base, client, ident)
                except httpx.TransportError:
                    self.count("pull transport errors")
                    if ident is not None:
                        # A poll whose answer was lost (the server killed or paused mid-answer) may
                        # have leased records this member never saw; they come back as retries. The
                        # checker's poll-skip looks within one unbroken run of answers: a new one begins.
                        self._session(client, "pull", ident)
                    await asyncio.sleep(0.2)
            if member is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await http.delete(f"{base}/members/{member}")

    async def _join(self, http: httpx.AsyncClient, base: str, member: str | None) -> dict[str, Any] | None:
        """Join, as ``member`` again after a rebalance (a new member only if that one is gone): joining
        anew each time would rebalance the group again and again."""
        body: dict[str, Any] = {"startFrom": "earliest", "sessionTimeout": SESSION_TIMEOUT}
        if member is not None:
            r = await http.post(f"{base}/members", json=body | {"memberId": member})
            if r.status_code == 200:
                return {"memberId": r.json()["memberId"], "generationId": r.json()["generationId"]}
        r = await http.post(f"{base}/members", json=body)
        if r.status_code != 200:
            self.count(f"pull join {r.status_code}")
            return None
        return {"memberId": r.json()["memberId"], "generationId": r.json()["generationId"]}

    async def _poll_once(
        self, http: httpx.AsyncClient, base: str, client: str, ident: dict[str, Any]
    ) -> dict[str, Any] | None:
        invoke = Recorder.now()
        r = await http.post(f"{base}/poll", json={**ident, "maxMessages": 50, "waitSeconds": 1})
        if r.status_code in (404, 409):
            return None  # expired or rebalanced: join again (a new session)
        if r.status_code != 200:
            self.count(f"pull poll {r.status_code}")
            await asyncio.sleep(0.2)
            return ident
        messages = r.json()["messages"]
        for m in messages:
            self._deliver(client, "pull", ident, m, invoke)
        nacks = [m["id"] for m in messages if m["attempt"] == 1 and m["data"]["v"].endswith("7")]
        acks = [m["id"] for m in messages if m["id"] not in nacks]
        for kind, ids in (("ack", acks), ("nack", nacks)):
            for chunk in [ids] if kind == "ack" else [[i] for i in ids]:
                if not chunk:
                    continue
                body = (
                    {**ident, "ids": chunk} if kind == "ack" else {**ident, "id": chunk[0], "reason": "test"}
                )
                at = Recorder.now()
                try:
                    answer = await http.post(f"{base}/{kind}", json=body)
                except httpx.TransportError:
                    self._settled(kind, client, "pull", ident["memberId"], chunk, at, "unknown")
                    raise
                done = answer.json().get("ids", []) if answer.status_code == 200 else []
                self._settled(kind, client, "pull", ident["memberId"], done, at, "ok")
                self._settled(
                    kind, client, "pull", ident["memberId"], [i for i in chunk if i not in done], at, "fail"
                )
        return ident

    # --- the end ------------------------------------------------------------------------------------

    async def lags(self) -> dict[str, int]:
        """Each group's total lag (-1 when unanswered); each answer is recorded (``offsets``), so a history
        shows what the drain saw: ``current`` and ``latest`` per partition."""
        async with self.http() as http:
            lags = {}
            for group in GROUPS:
                r = await http.get(f"/v1/topics/{TOPIC}/groups/{group}/offsets")
                lags[group] = sum(p["lag"] for p in r.json()["data"]) if r.status_code == 200 else -1
                if r.status_code == 200:
                    self.recorder.record(
                        "offsets", group=group, at=Recorder.now(), partitions=r.json()["data"]
                    )
            return lags

    async def final_reads(self) -> dict[str, dict[int, list[dict[str, Any]]]]:
        """Every partition read in full by offset (stream mode)."""
        reads: dict[int, list[dict[str, Any]]] = {}
        async with self.http(timeout=30) as http:
            for p in range(PARTITIONS):
                rows: list[dict[str, Any]] = []
                offset = 0
                while True:
                    r = await http.get(
                        f"/v1/topics/{TOPIC}/partitions/{p}/messages",
                        params={"fromOffset": offset, "limit": 1000},
                    )
                    if r.status_code == 404:  # the topic's log is gone (a power loss took it): nothing
                        self.notes.append(f"final read of partition {p}: 404 {r.json()['error']['code']}")
                        break  # stored, so every acknowledged publish to it is a lost write
                    assert r.status_code == 200, r.text
                    page = r.json()
                    rows += [
                        {"offset": m["offset"], "value": m["data"]["v"], "id": m["id"]} for m in page["data"]
                    ]
                    if not page["data"]:
                        break
                    offset = page["nextOffset"]
                reads[p] = rows
        return {TOPIC: reads}


async def setup(server: ServerProcess, key: str, recorder: Recorder) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as http:
        topic = {"name": TOPIC, "partitions": PARTITIONS, "delivery": "exactly-once"}
        r = await http.post("/v1/topics", json=topic)
        assert r.status_code == 201, r.text
        recorder.record("topic", topic=TOPIC, delivery="exactly-once")
        for group in GROUPS:
            r = await http.put(
                f"/v1/topics/{TOPIC}/groups/{group}",
                json={"ackTimeout": ACK_TIMEOUT, "sessionTimeout": SESSION_TIMEOUT},
            )
            assert r.status_code == 200, r.text
            recorder.record("group", topic=TOPIC, group=group, expectAll=True)


@dataclass
class Outcome:
    report: Report
    history: list[dict[str, Any]]
    final_reads: dict[str, dict[int, list[dict[str, Any]]]]
    counts: dict[str, int]
    lags: dict[str, int]
    notes: list[str] = field(default_factory=list)


async def run(
    server: ServerProcess | Target,
    key: str,
    recorder: Recorder,
    faults: Sequence[Fault],
    between: float = 3.0,
    drain_seconds: float = 40.0,
    settle_seconds: float = 0.0,
) -> Outcome:
    """Load; each fault after ``between`` seconds of it; load again; then drain both groups and check.

    ``settle_seconds`` pass, the consumers still consuming, between the last publish and the drain: on
    JetStream a batch committed but cut mid-apply (503 to its publisher), or whose commit reached the
    cluster late (sent before a link cut, delivered when it healed), is finished by its node or rolled
    forward by recovery within ``recover_after`` + an interval; the groups drain the state it settles in.
    (They once stopped before the settle: nats-mixed at 407743f took such a batch in a last poll and
    reported one of its messages nacked and never redelivered, docs/reliability.md.)"""
    target = server if isinstance(server, Target) else Target(server)
    server = target.api_server
    await setup(server, key, recorder)
    load = Load(server, key, recorder)
    tasks = [
        asyncio.create_task(load.publisher("single-1", batch=False)),
        asyncio.create_task(load.publisher("batch-1", batch=True)),
        asyncio.create_task(load.push_member("push-1")),
        asyncio.create_task(load.push_member("push-2")),
        asyncio.create_task(load.pull_member("pull-1")),
        asyncio.create_task(load.pull_member("pull-2")),
    ]
    for fault in faults:
        await asyncio.sleep(between)
        invoke = Recorder.now()
        note = await fault.apply(target)
        recorder.record("fault", name=fault.name, invoke=invoke, complete=Recorder.now(), note=note)
        load.count(f"fault {fault.name}")
        if note:
            load.notes.append(f"{fault.name}: {note}")
    await asyncio.sleep(between)
    publishers, consumers = tasks[:2], tasks[2:]
    load.publishing = False
    await asyncio.gather(*publishers)
    # No more faults nor publishes. The consumers go on through the settle (what was committed but
    # applied late is stored meanwhile, and they take it), then until both groups are done.
    await asyncio.sleep(settle_seconds)
    deadline = time.monotonic() + drain_seconds
    lags = await load.lags()
    while any(lag != 0 for lag in lags.values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        lags = await load.lags()
    await asyncio.sleep(1)  # the last acks' answers
    load.consuming = False
    await asyncio.gather(*consumers)
    # Read again once they have stopped: anything stored after the drain shows as lag (not drained),
    # rather than as a message a member took in its last poll and had no turn to finish.
    lags = await load.lags()
    final = await load.final_reads()
    recorder.close()
    return Outcome(check(recorder.ops, final), recorder.ops, final, load.counts, lags, load.notes)
