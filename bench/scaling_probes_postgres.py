"""The Postgres section of ``bench/scaling_probes.py``: the metadata store's unit costs (see its docstring).

An in-process app over a fresh, migrated Postgres database (``qc_scaling_probe_<pid>``, dropped after) on
the local log engine: push checkpoints from 1, 4 and 16 connections, a push member's beat, and pull cycles
through the broker's own functions (no HTTP), each with the CPU its Postgres backends and the WAL writer
used.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from scaling_probes import ADMIN_DSN, medians, timed


async def postgres_pids(dsn: str, database: str) -> list[int]:
    """Backends connected to ``database`` and the server's WAL writer: the Postgres work a probe causes
    (other sessions share this server; their backends are left out)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 OR backend_type = 'walwriter'", database
        )
        return [int(r["pid"]) for r in rows]
    finally:
        await conn.close()


async def probe_postgres(rounds: int, seconds: float) -> dict[str, Any]:
    import asyncpg
    import httpx

    from app.broker import keys, tenancy
    from app.broker.delivery import checkpoints as push_checkpoints
    from app.broker.delivery import membership
    from app.broker.rate_limits import Tier
    from app.broker.topics import Scope
    from app.cli import migrate
    from app.main import create_app
    from app.settings import Settings

    name = f"qc_scaling_probe_{os.getpid()}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    base = ADMIN_DSN.rsplit("/", 1)[0]
    url = f"{base.replace('postgresql://', 'postgresql+asyncpg://', 1)}/{name}"
    data_dir = Path(tempfile.mkdtemp(prefix="qc-scaling-probe-"))
    out: dict[str, Any] = {}
    try:
        settings = Settings(
            data_dir=data_dir,
            database_url=url,
            secret_key="probe-secret-" + "x" * 32,
            key_last_used_flush_seconds=3600.0,
        )  # type: ignore[call-arg]
        await asyncio.to_thread(migrate, settings)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            services = app.state.services
            metadata = services.metadata
            async with metadata.session() as session:
                project = await tenancy.create_project(
                    session, f"probe-{secrets.token_hex(4)}", Tier.enterprise
                )
                await tenancy.set_tier(
                    session, project.id, Tier.enterprise, {"publish": 10**6, "consume": 10**6, "admin": 10**4}
                )
                key = await keys.create_key(session, settings.server_secret(), project.id, "production")
            headers = {"Authorization": f"Bearer {key.key}"}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://probe", headers=headers
            ) as http:
                topic_name = "probe"
                r = await http.post("/v1/topics", json={"name": topic_name, "partitions": 16})
                r.raise_for_status()
                topic = await services.publisher.topics.resolve(Scope(project.id, "production"), topic_name)
                # Enough records for every pull round: 4 partitions x 100 per poll x polls.
                for p in range(4):
                    for _ in range(40):
                        body = {"messages": [{"data": {"n": i}, "partition": p} for i in range(1000)]}
                        (
                            await http.post(f"/v1/topics/{topic_name}/messages/batch", json=body)
                        ).raise_for_status()

            # Checkpoints: a push member owns the partitions; each writer checkpoints its own partition.
            joined = await membership.join(metadata, services.log, topic, "push", start_from="earliest")
            group_id, epochs = await _group_epochs(base, name, "push")
            dialect = metadata.engine.dialect
            for writers in (1, 4, 16):
                express = [commit_connection(url.replace("+asyncpg", ""), dialect) for _ in range(writers)]

                async def checkpoints(ws: list[Any] = express) -> int:
                    done = 0
                    stop = time.perf_counter() + seconds

                    async def writer(i: int, w: Any) -> None:
                        nonlocal done
                        position = 0
                        while time.perf_counter() < stop:
                            position += 1
                            fenced = await checkpoint_express(
                                w, group_id, joined.member_id, [(i, epochs[i], position)]
                            )
                            assert not fenced, "the probe's checkpoint was fenced"
                            done += 1

                    await asyncio.gather(*(writer(i, w) for i, w in enumerate(ws)))
                    return done

                for i, w in enumerate(express):  # connect first: their backends are counted from the start
                    await checkpoint_express(w, group_id, joined.member_id, [(i, epochs[i], 0)])
                runs = [await timed(checkpoints, await postgres_pids(ADMIN_DSN, name)) for _ in range(rounds)]
                for w in express:
                    await w.close()
                out[f"checkpoint_express_w{writers}"] = medians(runs)

            # A push member's beat (every 0.5 s per WebSocket member, push.BEAT_EVERY): the heartbeat and
            # due-lease scan (``poll_once(fresh=False)``, a write) and the claim read of ``_reconcile``.
            beaters = [
                await membership.join(metadata, services.log, topic, f"beat{i}", start_from="earliest")
                for i in range(4)
            ]
            beat_ids = [(await _group_epochs(base, name, f"beat{i}"))[0] for i in range(4)]

            async def beats() -> int:
                done = 0
                stop = time.perf_counter() + seconds

                async def member(i: int, m: Any) -> None:
                    nonlocal done
                    while time.perf_counter() < stop:
                        await poll_once(
                            metadata, services.log, topic, f"beat{i}", m, 100, heartbeat=True, fresh=False
                        )
                        async with metadata.session(readonly=True) as session:
                            await push_checkpoints.read_claim(session, beat_ids[i], m.member_id)
                        done += 1

                await asyncio.gather(*(member(i, m) for i, m in enumerate(beaters)))
                return done

            runs = [await timed(beats, await postgres_pids(ADMIN_DSN, name)) for _ in range(rounds)]
            out["push_beat_4_groups"] = medians(runs)

            # Pull: 4 members on a 4-partition topic, poll 100 then ack them, for ``seconds``.
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://probe", headers=headers
            ) as http:
                r = await http.post("/v1/topics", json={"name": "pull", "partitions": 4})
                r.raise_for_status()
                for p in range(4):
                    for _ in range(60):
                        body = {"messages": [{"data": {"n": i}, "partition": p} for i in range(1000)]}
                        (await http.post("/v1/topics/pull/messages/batch", json=body)).raise_for_status()
            pull_topic = await services.publisher.topics.resolve(Scope(project.id, "production"), "pull")
            members = [
                await membership.join(metadata, services.log, pull_topic, "pull", start_from="earliest")
                for _ in range(4)
            ]
            members = [
                await membership.join(metadata, services.log, pull_topic, "pull", member_id=m.member_id)
                for m in members
            ]
            messages = 0
            poll_ms: list[float] = []
            ack_ms: list[float] = []

            async def pull_cycles() -> int:
                nonlocal messages
                cycles = 0
                stop = time.perf_counter() + seconds

                async def member(m: Any) -> None:
                    nonlocal cycles, messages
                    while time.perf_counter() < stop:
                        t0 = time.perf_counter()
                        polled = await poll_once(metadata, services.log, pull_topic, "pull", m, 100)
                        if not polled.ids:
                            return
                        t1 = time.perf_counter()
                        await ack(metadata, pull_topic, "pull", m, polled.ids)
                        poll_ms.append((t1 - t0) * 1000)
                        ack_ms.append((time.perf_counter() - t1) * 1000)
                        cycles += 1
                        messages += len(polled.ids)

                await asyncio.gather(*(member(m) for m in members))
                return cycles

            runs = []
            for _ in range(rounds):
                messages = 0
                run = await timed(pull_cycles, await postgres_pids(ADMIN_DSN, name))
                run["msgs_per_s"] = messages / run["seconds"]
                run["poll_p50_ms"] = statistics.median(poll_ms)
                run["ack_p50_ms"] = statistics.median(ack_ms)
                poll_ms.clear()
                ack_ms.clear()
                runs.append(run)
            out["pull_poll100_ack_4_members"] = medians(runs)
            out["pull_poll100_ack_4_members"]["note"] = "per_s counts poll+ack cycles (2 transactions each)"
    finally:
        admin = await asyncpg.connect(ADMIN_DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


def commit_connection(url: str, dialect: Any) -> Any:
    """The metadata store's dedicated checkpoint connection (``CommitConnection`` in
    ``checkpoint_writer`` since the delivery restructuring, ``ExpressWriter`` in ``express`` before it)."""
    try:
        from app.stores.metadata.checkpoint_writer import CommitConnection
    except ImportError:
        from app.stores.metadata.express import ExpressWriter  # type: ignore[import-not-found]

        return ExpressWriter(url, dialect)
    return CommitConnection(url, dialect)


async def checkpoint_express(
    w: Any, group_id: str, member_id: str, positions: list[tuple[int, int, int]]
) -> set[int]:
    """What a push checkpoint of positions only runs on that connection: one ``UPDATE`` per
    ``(partition, epoch, position)``, one transaction; the partitions fenced."""
    from app.stores.metadata import partition_repositories as rows

    statement = getattr(rows, "CHECKPOINT", None)
    if statement is None:
        return set(await rows.checkpoint_express(w, group_id, member_id, positions))  # type: ignore[attr-defined]
    counts = await w.execute_each(
        statement, [{"g": group_id, "p": p, "m": member_id, "e": e, "pos": pos} for p, e, pos in positions]
    )
    return {p for (p, _, _), count in zip(positions, counts, strict=True) if not count}


def poll_once(metadata: Any, log: Any, topic: Any, group: str, m: Any, n: int, **options: Any) -> Any:
    """``leases.poll_once`` for a joined member, whether the delivery calls take a ``MemberRef`` (since the
    delivery restructuring) or the topic, group, member id and generation one by one (before it)."""
    from app.broker.delivery import leases, membership

    if hasattr(membership, "MemberRef"):
        member = membership.MemberRef(topic, group, m.member_id, m.generation)
        return leases.poll_once(metadata, log, member, n, **options)
    return leases.poll_once(metadata, log, topic, group, m.member_id, m.generation, n, **options)


def ack(metadata: Any, topic: Any, group: str, m: Any, ids: list[str]) -> Any:
    """``leases.ack`` for a joined member (either calling convention, as ``poll_once``)."""
    from app.broker.delivery import leases, membership

    if hasattr(membership, "MemberRef"):
        return leases.ack(metadata, membership.MemberRef(topic, group, m.member_id, m.generation), ids)
    return leases.ack(metadata, topic, group, m.member_id, m.generation, ids)


async def _group_epochs(base: str, database: str, group: str) -> tuple[str, dict[int, int]]:
    """A group's id and the epoch of each of its partitions (what a checkpoint must name)."""
    import asyncpg

    conn = await asyncpg.connect(f"{base}/{database}")
    try:
        group_id = str(await conn.fetchval("SELECT id FROM consumer_groups WHERE name = $1", group))
        rows = await conn.fetch("SELECT partition, epoch FROM group_partitions WHERE group_id = $1", group_id)
        return group_id, {int(r["partition"]): int(r["epoch"]) for r in rows}
    finally:
        await conn.close()
