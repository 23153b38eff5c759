"""The lock order on real Postgres: group → partitions → leases, with the group row's lock leaving its
children's foreign-key checks free.

The interleaving a consumer's stop on the cluster met (Postgres's log: ``deadlock detected``, one side an
``INSERT INTO group_leases`` "while locking tuple … in relation consumer_groups", the other an ``UPDATE
group_partitions``): a member releasing a partition locks the partition row, then inserts its lease rows,
whose foreign key takes ``FOR KEY SHARE`` on the group row; a leave of the same group locks the group row,
then updates that partition row. With the group locked ``FOR UPDATE`` the two waited on each other until
Postgres aborted one after ``deadlock_timeout`` (1 s), which the stop paid.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from app.stores.metadata.database import MetadataStore
from app.stores.metadata.group_repositories import GroupRepository
from app.stores.metadata.lease_repositories import LeaseRepository
from app.stores.metadata.partition_repositories import PartitionRepository
from app.stores.metadata.protocol import LeaseState
from tests.stores.metadata.conftest import Rows


async def test_a_release_and_a_leave_of_one_group_both_commit(metadata: MetadataStore, rows: Rows) -> None:
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
