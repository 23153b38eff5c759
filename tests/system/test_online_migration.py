"""An expand migration applied while three API processes serve under load (#36, "online migrations"):
a new migration, written the way ``docs/conventions.md`` says (a bounded ``lock_timeout``, a nullable
column, an index built ``CONCURRENTLY``), is upgraded to on the shared Postgres while every API process
publishes and a group consumes and acks. No request fails, nothing acknowledged goes missing, and the
processes go on serving on the new schema (the code they run never reads the new column: expand first,
code second)."""

from __future__ import annotations

import asyncio
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from tests.fixtures.database import create_database, database_url, drop_database
from tests.system.test_scaleout import ScaleOut, start_scaleout

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

MIGRATION = '''
"""online drill: a nullable column on a hot table and an index built concurrently

Revision ID: {revision}
Revises: {down}
"""

import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Wait at most 5 s for a table lock (then fail and be retried), never queue the API behind it.
    op.execute("SET lock_timeout = '5s'")
    op.add_column("group_partitions", sa.Column("drill_note", sa.Text(), nullable=True))
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_group_leases_drill", "group_leases", ["group_id", "partition", "deadline_ms"],
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ix_group_leases_drill", "group_leases", postgresql_concurrently=True)
    op.drop_column("group_partitions", "drill_note")
'''


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[ScaleOut, str]]:
    name = f"qc_test_online_{secrets.token_hex(4)}"
    asyncio.run(create_database(name))
    scaleout = start_scaleout(tmp_path, database_url(name), api_nodes=3)
    try:
        yield scaleout, database_url(name)
    finally:
        for node in scaleout.nodes:
            node.stop()
        scaleout.cluster.stop()
        asyncio.run(drop_database(name))


def _upgrade_with_drill(url: str, versions: Path) -> str:
    """Write the drill's migration after the current head and upgrade to it; its revision."""
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("version_locations", f"{ROOT / 'migrations' / 'versions'}:{versions}")
    config.attributes["url"] = url
    head = ScriptDirectory.from_config(config).get_current_head()
    revision = f"drill{secrets.token_hex(4)}"
    versions.mkdir(parents=True, exist_ok=True)
    (versions / f"{revision}_online_drill.py").write_text(
        textwrap.dedent(MIGRATION).format(revision=revision, down=head)
    )
    command.upgrade(config, "heads")
    return revision


async def test_an_expand_migration_under_load_fails_no_request(deployment, tmp_path: Path) -> None:
    scaleout, url = deployment
    clients = [scaleout.http(i) for i in range(3)]
    topic = f"online-{secrets.token_hex(4)}"
    created = await clients[0].post("/v1/topics", json={"name": topic, "partitions": 3, "replicas": 3})
    assert created.status_code == 201, created.text
    stored: set[tuple[int, int]] = set()
    received: set[tuple[int, int]] = set()
    failures: list[str] = []
    stop = asyncio.Event()

    async def publish(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            r = await clients[i].post(f"/v1/topics/{topic}/messages", json={"data": {"node": i, "n": n}})
            if r.status_code != 201:
                failures.append(f"publish via node {i}: {r.status_code} {r.text[:200]}")
                continue
            stored.add((r.json()["partition"], r.json()["offset"]))

    async def consume() -> None:
        api = clients[1]
        joined = (
            await api.post(f"/v1/topics/{topic}/groups/g/members", json={"startFrom": "earliest"})
        ).json()
        member = {"memberId": joined["memberId"], "generationId": joined["generationId"]}
        while not stop.is_set() or not stored <= received:
            if stop.is_set() and failures:
                return  # what failed is the test's answer; a member gone with it would never catch up
            r = await api.post(
                f"/v1/topics/{topic}/groups/g/poll", json={**member, "maxMessages": 200, "waitSeconds": 1}
            )
            if r.status_code != 200:
                failures.append(f"poll: {r.status_code} {r.text[:200]}")
                await asyncio.sleep(0.1)
                continue
            messages: list[dict[str, Any]] = r.json()["messages"]
            received.update((m["partition"], m["offset"]) for m in messages)
            if messages:
                acked = await api.post(
                    f"/v1/topics/{topic}/groups/g/ack", json={**member, "ids": [m["id"] for m in messages]}
                )
                if acked.status_code != 200 or acked.json()["failed"]:
                    failures.append(f"ack: {acked.status_code} {acked.text[:200]}")
            if stop.is_set() and not messages and stored <= received:
                return

    tasks = [asyncio.create_task(publish(i)) for i in range(3)] + [asyncio.create_task(consume())]
    try:
        await asyncio.sleep(2)
        before = len(stored)
        revision = await asyncio.to_thread(_upgrade_with_drill, url, tmp_path / "versions")
        await asyncio.sleep(2)  # serving on the new schema
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        for c in clients:
            await c.aclose()

    assert failures == []
    assert len(stored) > before > 0  # publishes before, during and after the migration
    assert stored <= received
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            version = (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).scalar_one()
            columns = await conn.execute(
                sa.text(
                    "SELECT 1 FROM information_schema.columns WHERE table_name = 'group_partitions'"
                    " AND column_name = 'drill_note'"
                )
            )
            assert columns.first() is not None
            valid = await conn.execute(
                sa.text(
                    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                    " WHERE c.relname = 'ix_group_leases_drill'"
                )
            )
            assert valid.scalar_one() is True
    finally:
        await engine.dispose()
    assert version == revision
