"""The push store (``protocol.PushStore``) as push groups use it: an endpoint as a frozen row, its config,
secrets and breaker written back, the deployment's targets, and the recent attempts; on SQLite and
Postgres."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from app.stores.errors import AlreadyExists
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.protocol import NewPushAttempt, PushConfig, PushEndpointRow
from tests.stores.metadata.conftest import Rows, now

CONFIG = PushConfig(
    url="https://hooks.example.com/in",
    max_concurrency=16,
    rate=None,
    timeout="10s",
    timeout_ms=10_000,
    ordered=False,
    mode="binary",
)


def _endpoint(group_id: str, *, secret: str = "sealed-one") -> PushEndpointRow:
    at = now()
    return PushEndpointRow(
        group_id=group_id,
        url=CONFIG.url,
        max_concurrency=CONFIG.max_concurrency,
        rate=CONFIG.rate,
        timeout=CONFIG.timeout,
        timeout_ms=CONFIG.timeout_ms,
        ordered=CONFIG.ordered,
        mode=CONFIG.mode,
        secret=secret,
        previous_secret=None,
        previous_until_ms=None,
        breaker_failures=0,
        breaker_open_until_ms=None,
        created_at=at,
        updated_at=at,
    )


def _same_moment(a, b) -> bool:  # SQLite hands back naive datetimes
    return a.replace(tzinfo=None) == b.replace(tzinfo=None)


class TestEndpoints:
    async def test_an_endpoint_reads_back_as_a_frozen_row(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group()
        endpoint = _endpoint(group_id)
        async with metadata.unit() as uow:
            assert await uow.push.get(group_id) is None  # no push group yet
            await uow.push.add(endpoint)
        async with metadata.unit(readonly=True) as uow:
            found = await uow.push.get(group_id)
        assert found is not None
        assert dataclasses.replace(found, created_at=endpoint.created_at, updated_at=endpoint.updated_at) == (
            endpoint
        )
        assert _same_moment(found.created_at, endpoint.created_at)
        assert found.config == CONFIG

    async def test_a_group_has_one_endpoint(self, metadata: SqlMetadataStore, rows: Rows):
        group_id = await rows.group()
        async with metadata.unit() as uow:
            await uow.push.add(_endpoint(group_id))
        with pytest.raises(AlreadyExists):
            async with metadata.unit() as uow:
                await uow.push.add(_endpoint(group_id, secret="sealed-two"))
        async with metadata.unit(readonly=True) as uow:
            kept = await uow.push.get(group_id)
        assert kept is not None and kept.secret == "sealed-one"

    async def test_a_config_change_keeps_the_breaker_unless_told_to_close_it(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group()
        later = now() + timedelta(minutes=1)
        async with metadata.unit() as uow:
            await uow.push.add(_endpoint(group_id))
            await uow.push.set_breaker(group_id, 5, 123_000)
        changed = dataclasses.replace(CONFIG, max_concurrency=4, rate=2.5, timeout="1s", timeout_ms=1000)
        async with metadata.unit() as uow:
            await uow.push.set_config(group_id, changed, later)
            kept = await uow.push.get(group_id)
        assert kept is not None and kept.config == changed
        assert (kept.breaker_failures, kept.breaker_open_until_ms) == (5, 123_000)
        assert _same_moment(kept.updated_at, later)
        moved = dataclasses.replace(
            changed, url="https://elsewhere.example.com/", ordered=True, mode="structured"
        )
        async with metadata.unit() as uow:
            await uow.push.set_config(group_id, moved, later, reset_breaker=True)
        async with metadata.unit(readonly=True) as uow:
            reset = await uow.push.get(group_id)
        assert reset is not None and reset.config == moved
        assert (reset.breaker_failures, reset.breaker_open_until_ms) == (0, None)
        assert reset.secret == "sealed-one"  # the config is not the secrets

    async def test_a_rotation_keeps_the_current_secret_as_the_previous(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id = await rows.group()
        at = now() + timedelta(minutes=1)
        async with metadata.unit() as uow:
            await uow.push.add(_endpoint(group_id))
        async with metadata.unit() as uow:
            await uow.push.rotate_secret(group_id, "sealed-two", 86_400_000, at)
        async with metadata.unit() as uow:
            rotated = await uow.push.get(group_id)
            assert (group_id, "sealed-two", "sealed-one") in await uow.push.sealed_secrets()
            await uow.push.replace_secrets(group_id, "resealed-two", "resealed-one")
        assert rotated is not None
        assert (rotated.secret, rotated.previous_secret, rotated.previous_until_ms) == (
            "sealed-two",
            "sealed-one",
            86_400_000,
        )
        assert _same_moment(rotated.updated_at, at)
        async with metadata.unit(readonly=True) as uow:
            resealed = await uow.push.get(group_id)
        assert resealed is not None
        assert (resealed.secret, resealed.previous_secret, resealed.previous_until_ms) == (
            "resealed-two",
            "resealed-one",
            86_400_000,
        )

    async def test_targets_name_each_push_group_with_its_topic_until_removed(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        topic = await rows.topic(partitions=3)
        group_id = await rows.group(topic, name="hooks")
        await rows.group(topic, name="not-pushed")
        async with metadata.unit() as uow:
            await uow.push.add(_endpoint(group_id))
        async with metadata.unit(readonly=True) as uow:
            (target,) = [t for t in await uow.push.targets() if t.topic_id == topic.id]
        assert (target.group_id, target.group_name, target.topic_name, target.partitions) == (
            group_id,
            "hooks",
            topic.name,
            3,
        )
        assert (target.url, target.timeout_ms, target.secret) == (CONFIG.url, 10_000, "sealed-one")
        async with metadata.unit() as uow:
            assert await uow.push.remove(group_id)
            assert not await uow.push.remove(group_id)
        async with metadata.unit(readonly=True) as uow:
            assert await uow.push.get(group_id) is None
            assert [t for t in await uow.push.targets() if t.topic_id == topic.id] == []


class TestCount:
    async def test_push_groups_are_counted_per_project_environment(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        project = await rows.project()
        one, two = await rows.topic(project.id), await rows.topic(project.id)
        staged = await rows.topic(project.id, environment="staging")
        pushing = [
            await rows.group(one),
            await rows.group(one),
            await rows.group(two),
            await rows.group(staged),
        ]
        await rows.group(one)  # a plain group counts for nothing
        elsewhere = await rows.group()  # another project's push group
        async with metadata.unit() as uow:
            for group_id in [*pushing, elsewhere]:
                await uow.push.add(_endpoint(group_id))
        async with metadata.unit(readonly=True) as uow:
            counts = [
                await uow.push.count(project.id, env) for env in ("production", "staging", "development")
            ]
        assert counts == [3, 1, 0]
        async with metadata.unit() as uow:
            assert await uow.push.remove(pushing[0])
            assert await uow.push.count(project.id, "production") == 2


class TestAttempts:
    async def test_recent_attempts_newest_first_by_start_and_trimmed_per_group(
        self, metadata: SqlMetadataStore, rows: Rows
    ):
        group_id, other = await rows.group(), await rows.group()
        start = now()

        def attempt(group: str, n: int, seconds: int) -> NewPushAttempt:
            return NewPushAttempt(
                group_id=group,
                message_id=f"msg_{n}",
                attempt=1,
                at=start + timedelta(seconds=seconds),
                status=500 if n % 2 else 204,
                latency_ms=n,
                error="HTTP 500" if n % 2 else None,
            )

        async with metadata.unit() as uow:
            # Written in the order they ended, not began: the third began first.
            await uow.push.add_attempts(
                [attempt(group_id, 1, 1), attempt(group_id, 2, 2), attempt(group_id, 3, 0)]
            )
            await uow.push.add_attempts([attempt(other, 4, 0)])
            await uow.push.add_attempts([])
        async with metadata.unit(readonly=True) as uow:
            recent = await uow.push.recent_attempts(group_id, 10)
            assert [a.message_id for a in await uow.push.recent_attempts(group_id, 2)] == ["msg_2", "msg_1"]
        assert [a.message_id for a in recent] == ["msg_2", "msg_1", "msg_3"]
        newest = recent[0]
        assert (newest.group_id, newest.attempt, newest.status, newest.latency_ms, newest.error) == (
            group_id,
            1,
            204,
            2,
            None,
        )
        assert _same_moment(newest.at, start + timedelta(seconds=2))
        assert (recent[1].status, recent[1].error) == (500, "HTTP 500")
        async with metadata.unit() as uow:
            await uow.push.trim_attempts([group_id, other], 1)  # the newest written is kept
        async with metadata.unit(readonly=True) as uow:
            assert [a.message_id for a in await uow.push.recent_attempts(group_id, 10)] == ["msg_3"]
            assert [a.message_id for a in await uow.push.recent_attempts(other, 10)] == ["msg_4"]
