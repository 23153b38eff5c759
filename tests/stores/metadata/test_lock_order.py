"""The lock order on real Postgres: group → members → partitions → leases, with the group row's lock leaving
its children's foreign-key checks free (and a topic's deletion taking its locks in that order too).

The interleaving a consumer's stop on the cluster met (Postgres's log: ``deadlock detected``, one side an
``INSERT INTO group_leases`` "while locking tuple … in relation consumer_groups", the other an ``UPDATE
group_partitions``): a member releasing a partition locks the partition row, then inserts its lease rows,
whose foreign key takes ``FOR KEY SHARE`` on the group row; a leave of the same group locks the group row,
then updates that partition row. With the group locked ``FOR UPDATE`` the two waited on each other until
Postgres aborted one after ``deadlock_timeout`` (1 s), which the stop paid.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import LeaseState, MemberRow
from app.stores.metadata.topic_repositories import TopicRepository
from tests.stores.metadata.conftest import Rows


async def test_a_release_and_a_leave_of_one_group_both_commit(metadata: SqlMetadataStore, rows: Rows) -> None:
    if metadata.engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises every write unit of work (BEGIN IMMEDIATE): no row locks to order")
    topic = await rows.topic(partitions=1)
    group_id = await rows.group(topic, partitions=1, name="lock-order")
    partition_locked, group_locked = asyncio.Event(), asyncio.Event()

    async def release() -> None:  # as checkpoints.release: the partition row, then lease rows
        async with metadata.session() as session:
            await PartitionRepository.from_session(session).lock_partitions(group_id, numbers=[0])
            partition_locked.set()
            await group_locked.wait()
            await LeaseRepository.from_session(session).put_leases(
                group_id, [LeaseState(0, 7, None, 1, 1_000, False)]
            )

    async def leave() -> None:  # as membership.leave: the group row, then the partition rows
        await partition_locked.wait()
        async with metadata.session() as session:
            group = await GroupRepository.from_session(session).get(topic.id, "lock-order", for_update=True)
            assert group is not None
            group_locked.set()
            await PartitionRepository.from_session(session).set_owners(group_id, {0: None})

    # Before the fix one of the two ended in DeadlockDetectedError; the bound only keeps a hang from
    # blocking the suite (a deadlock is broken by Postgres within its 1 s deadlock_timeout).
    await asyncio.wait_for(asyncio.gather(release(), leave()), 30)
    async with metadata.session(readonly=True) as session:
        stored = await session.execute(
            text('SELECT partition, "offset" FROM group_leases WHERE group_id = :g'), {"g": group_id}
        )
        assert [tuple(row) for row in stored] == [(0, 7)]


async def test_a_deadlock_the_database_breaks_is_run_again_not_raised(
    metadata: SqlMetadataStore, rows: Rows
) -> None:
    """Two units of work locking two partition rows in opposite orders: Postgres fails one with
    ``deadlock detected``; ``run_unit`` runs that one again, and both end written. A plain ``session``
    answers the same conflict as ``StoreConflict`` (a 503 at the edge), never as an unknown error."""
    if metadata.engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises every write unit of work (BEGIN IMMEDIATE): no row locks to order")
    topic = await rows.topic(partitions=2)
    group_id = await rows.group(topic, partitions=2, name="deadlock")
    first_locked = {"a": asyncio.Event(), "b": asyncio.Event()}
    runs = {"a": 0, "b": 0}

    def crossing(name: str, mine: int, other: int, offset: int):
        async def work(uow) -> None:
            runs[name] += 1
            partition_rows = uow.partitions
            await partition_rows.lock_partitions(group_id, numbers=[mine])
            if runs[name] == 1:  # only the first run waits for the other: the retry goes straight through
                first_locked[name].set()
                await first_locked["b" if name == "a" else "a"].wait()
            await partition_rows.lock_partitions(group_id, numbers=[other])
            await partition_rows.set_offsets(group_id, {mine: offset, other: offset})

        return work

    await asyncio.wait_for(
        asyncio.gather(
            metadata.run_unit(crossing("a", 0, 1, 10)), metadata.run_unit(crossing("b", 1, 0, 20))
        ),
        30,
    )
    assert sorted(runs.values()) == [1, 2]  # one side lost the deadlock once and ran again
    async with metadata.session(readonly=True) as session:
        stored = await session.execute(
            text("SELECT committed FROM group_partitions WHERE group_id = :g"), {"g": group_id}
        )
        assert {row[0] for row in stored} in ({10}, {20})  # whole units of work, one after the other

    # Without the retry, the conflict is a StoreConflict (503), not a bare database error (500).
    from app.stores.errors import StoreConflict

    for event in first_locked.values():
        event.clear()
    runs.update(a=0, b=0)

    async def once(work) -> None:
        async with metadata.unit() as uow:
            await work(uow)

    outcomes = await asyncio.wait_for(
        asyncio.gather(once(crossing("a", 0, 1, 30)), once(crossing("b", 1, 0, 40)), return_exceptions=True),
        30,
    )
    assert [type(o) for o in outcomes if o is not None] == [StoreConflict]


async def test_a_poll_and_the_deletion_of_its_topic_both_commit(
    metadata: SqlMetadataStore, rows: Rows
) -> None:
    """A poll locks its member row (its heartbeat), then inserts lease rows, whose foreign key takes
    ``FOR KEY SHARE`` on the group row. The topic's deletion used to lock the group row for delete (the
    cascade) and then wait for the member row: the two deadlocked and the DELETE answered 500."""
    if metadata.engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises every write unit of work (BEGIN IMMEDIATE): no row locks to order")
    topic = await rows.topic(partitions=1)
    group_id = await rows.group(topic, partitions=1, name="deleted-under-a-poll")
    async with metadata.session() as session:
        await GroupRepository.from_session(session).add_member(
            MemberRow(
                group_id=group_id,
                id="csr_polling",
                session_timeout="30s",
                session_timeout_ms=30_000,
                expires_at_ms=2**62,
                joined_at=datetime.now(UTC),
            )
        )
    member_locked = asyncio.Event()

    async def poll() -> None:  # as leases.poll_once: the member row, then lease rows
        async with metadata.session() as session:
            assert await GroupRepository.from_session(session).touch_member(group_id, "csr_polling", 1, 2**62)
            member_locked.set()
            await asyncio.sleep(0.3)  # the deletion takes its first locks meanwhile
            await LeaseRepository.from_session(session).put_leases(
                group_id, [LeaseState(0, 7, "csr_polling", 1, 1_000, False)]
            )

    async def delete_topic() -> None:
        await member_locked.wait()
        async with metadata.session() as session:
            await TopicRepository.from_session(session).remove(topic.id)

    await asyncio.wait_for(asyncio.gather(poll(), delete_topic()), 30)
    async with metadata.session(readonly=True) as session:
        for table in ("topics", "consumer_groups", "group_members", "group_leases"):
            left = await session.execute(
                text(f"SELECT count(*) FROM {table} WHERE {_key(table)} = :k"),
                {"k": topic.id if table in ("topics", "consumer_groups") else group_id},
            )
            assert left.scalar_one() == 0, table


def _key(table: str) -> str:
    return {"topics": "id", "consumer_groups": "topic_id"}.get(table, "group_id")
