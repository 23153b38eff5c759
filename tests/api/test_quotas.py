"""Per-tier quotas through the real app, on SQLite, Postgres and Postgres + JetStream: each refused at its
limit with the exact envelope, nothing made in part, no overshoot under concurrent creates, custom and
changed tiers applied at once."""

from __future__ import annotations

import asyncio
import time

from app.broker import quotas, tenancy
from app.broker.rate_limits import Tier
from tests.api.test_errors import assert_envelope
from tests.fixtures.factories import GENEROUS_LIMITS


def assert_quota(response, quota: str, limit: int, used: int) -> dict:
    """The refusal PRODUCT.md gives: 403 ``QUOTA_EXCEEDED``, details naming the quota, limit and use."""
    error = assert_envelope(response, 403, "QUOTA_EXCEEDED")
    assert error["details"] == [{"field": quota, "issue": f"limit {limit}, used {used}"}]
    return error


async def project_with(deployment, **quotas: int):
    """An enterprise project with generous rate limits and the given custom quotas."""
    project = await deployment.project(limits={**GENEROUS_LIMITS, **quotas})
    return project, project.headers("production")


async def topic_names(client, headers) -> list[str]:
    r = await client.get("/v1/topics?limit=1000", headers=headers)
    assert r.status_code == 200, r.text
    return [t["name"] for t in r.json()["data"]]


class TestTopicsQuota:
    async def test_the_topic_past_the_quota_is_refused_and_not_made(self, client, deployment):
        _, prod = await project_with(deployment, topics=2)
        for name in ("a", "b"):
            assert (await client.post("/v1/topics", json={"name": name}, headers=prod)).status_code == 201
        r = await client.post("/v1/topics", json={"name": "c"}, headers=prod)
        error = assert_quota(r, "topics", 2, 2)
        assert "topics per environment" in error["message"]
        assert await topic_names(client, prod) == ["a", "b"]
        assert_envelope(await client.get("/v1/topics/c", headers=prod), 404, "TOPIC_NOT_FOUND")

    async def test_per_environment(self, client, deployment):
        project, prod = await project_with(deployment, topics=1)
        staging = project.headers("staging")
        assert (await client.post("/v1/topics", json={"name": "a"}, headers=prod)).status_code == 201
        assert (await client.post("/v1/topics", json={"name": "a"}, headers=staging)).status_code == 201
        assert_quota(await client.post("/v1/topics", json={"name": "b"}, headers=staging), "topics", 1, 1)

    async def test_a_deleted_topic_frees_its_place(self, client, deployment):
        _, prod = await project_with(deployment, topics=1)
        assert (await client.post("/v1/topics", json={"name": "a"}, headers=prod)).status_code == 201
        assert_quota(await client.post("/v1/topics", json={"name": "b"}, headers=prod), "topics", 1, 1)
        assert (await client.delete("/v1/topics/a", headers=prod)).status_code == 204
        assert (await client.post("/v1/topics", json={"name": "b"}, headers=prod)).status_code == 201

    async def test_a_taken_name_is_still_409(self, client, deployment):
        _, prod = await project_with(deployment, topics=1)
        assert (await client.post("/v1/topics", json={"name": "a"}, headers=prod)).status_code == 201
        assert_envelope(
            await client.post("/v1/topics", json={"name": "a"}, headers=prod), 409, "TOPIC_ALREADY_EXISTS"
        )

    async def test_concurrent_creates_do_not_overshoot(self, client, deployment):
        _, prod = await project_with(deployment, topics=3)
        assert (await client.post("/v1/topics", json={"name": "first"}, headers=prod)).status_code == 201
        answers = await asyncio.gather(
            *(
                client.post("/v1/topics", json={"name": f"t{i}", "partitions": 1}, headers=prod)
                for i in range(8)
            )
        )
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [201, 201] + [403] * 6, [r.text for r in answers]
        for r in answers:
            if r.status_code == 403:
                assert_quota(r, "topics", 3, 3)
        assert len(await topic_names(client, prod)) == 3


class TestPartitionsQuota:
    async def test_a_create_past_the_partitions_makes_nothing(self, client, deployment):
        _, prod = await project_with(deployment, partitions=10)
        r = await client.post("/v1/topics", json={"name": "a", "partitions": 8}, headers=prod)
        assert r.status_code == 201, r.text
        r = await client.post("/v1/topics", json={"name": "b", "partitions": 3}, headers=prod)
        error = assert_quota(r, "partitions", 10, 8)
        assert "would add 3" in error["message"]
        assert await topic_names(client, prod) == ["a"]
        # What fits is made.
        r = await client.post("/v1/topics", json={"name": "b", "partitions": 2}, headers=prod)
        assert r.status_code == 201, r.text
        assert_quota(
            await client.post("/v1/topics", json={"name": "c", "partitions": 1}, headers=prod),
            "partitions",
            10,
            10,
        )

    async def test_an_increase_past_the_partitions_changes_nothing(self, client, deployment):
        _, prod = await project_with(deployment, partitions=6)
        assert (
            await client.post("/v1/topics", json={"name": "a", "partitions": 2}, headers=prod)
        ).status_code == 201
        assert (
            await client.post("/v1/topics", json={"name": "b", "partitions": 2}, headers=prod)
        ).status_code == 201
        r = await client.patch("/v1/topics/a", json={"partitions": 5, "retention": "1d"}, headers=prod)
        assert_quota(r, "partitions", 6, 4)
        described = (await client.get("/v1/topics/a", headers=prod)).json()
        assert (described["partitions"], described["retention"]) == (2, "7d")
        assert len(described["partitionDetails"]) == 2
        r = await client.patch("/v1/topics/a", json={"partitions": 4}, headers=prod)
        assert r.status_code == 200 and r.json()["partitions"] == 4, r.text
        # Retention alone is no partition change.
        r = await client.patch("/v1/topics/a", json={"retention": "1d"}, headers=prod)
        assert r.status_code == 200, r.text

    async def test_concurrent_increases_do_not_overshoot(self, client, deployment):
        _, prod = await project_with(deployment, partitions=8)
        for name in ("a", "b", "c", "d"):
            r = await client.post("/v1/topics", json={"name": name, "partitions": 1}, headers=prod)
            assert r.status_code == 201, r.text
        # Each asks for 2 more; 4 are left: two may grow.
        answers = await asyncio.gather(
            *(client.patch(f"/v1/topics/{n}", json={"partitions": 3}, headers=prod) for n in "abcd")
        )
        assert sorted(r.status_code for r in answers) == [200, 200, 403, 403], [r.text for r in answers]
        listed = (await client.get("/v1/topics", headers=prod)).json()["data"]
        assert sum(t["partitions"] for t in listed) == 8


class TestGroupsQuota:
    async def _topic(self, client, prod, name: str = "t") -> str:
        r = await client.post("/v1/topics", json={"name": name, "partitions": 2}, headers=prod)
        assert r.status_code == 201, r.text
        return f"/v1/topics/{name}/groups"

    async def test_a_config_put_past_the_quota_is_refused(self, client, deployment):
        _, prod = await project_with(deployment, groups=2)
        groups = await self._topic(client, prod)
        for g in ("g1", "g2"):
            assert (await client.put(f"{groups}/{g}", json={}, headers=prod)).status_code == 200
        r = await client.put(f"{groups}/g3", json={"ackTimeout": "10s"}, headers=prod)
        error = assert_quota(r, "groups", 2, 2)
        assert "consumer groups per topic" in error["message"]
        listed = (await client.get(groups, headers=prod)).json()["data"]
        assert [g["name"] for g in listed] == ["g1", "g2"]
        assert_envelope(await client.get(f"{groups}/g3", headers=prod), 404, "GROUP_NOT_FOUND")
        # A group that exists is configured as before.
        r = await client.put(f"{groups}/g1", json={"ackTimeout": "10s"}, headers=prod)
        assert r.status_code == 200 and r.json()["config"]["ackTimeout"] == "10s", r.text

    async def test_per_topic(self, client, deployment):
        _, prod = await project_with(deployment, groups=1)
        first = await self._topic(client, prod, "one")
        second = await self._topic(client, prod, "two")
        assert (await client.put(f"{first}/g", json={}, headers=prod)).status_code == 200
        assert (await client.put(f"{second}/g", json={}, headers=prod)).status_code == 200
        assert_quota(await client.put(f"{second}/h", json={}, headers=prod), "groups", 1, 1)

    async def test_a_join_that_would_create_a_group_is_refused(self, client, deployment):
        _, prod = await project_with(deployment, groups=1)
        groups = await self._topic(client, prod)
        r = await client.post(f"{groups}/g1/members", json={}, headers=prod)
        assert r.status_code == 200, r.text
        r = await client.post(f"{groups}/g2/members", json={}, headers=prod)
        assert_quota(r, "groups", 1, 1)
        assert [g["name"] for g in (await client.get(groups, headers=prod)).json()["data"]] == ["g1"]
        # Joining the group that exists still works.
        r = await client.post(f"{groups}/g1/members", json={}, headers=prod)
        assert r.status_code == 200, r.text

    async def test_concurrent_creates_do_not_overshoot(self, client, deployment):
        _, prod = await project_with(deployment, groups=3)
        groups = await self._topic(client, prod)
        answers = await asyncio.gather(
            *(client.put(f"{groups}/p{i}", json={}, headers=prod) for i in range(4)),
            *(client.post(f"{groups}/j{i}/members", json={}, headers=prod) for i in range(4)),
        )
        assert sorted(r.status_code for r in answers) == [200] * 3 + [403] * 5, [r.text for r in answers]
        for r in answers:
            if r.status_code == 403:
                assert_quota(r, "groups", 3, 3)
        assert len((await client.get(groups, headers=prod)).json()["data"]) == 3

    async def test_concurrent_joins_of_one_new_group_all_succeed(self, client, deployment):
        """The creators of one group wait for each other; the ones after the first find it made."""
        _, prod = await project_with(deployment, groups=1)
        groups = await self._topic(client, prod)
        answers = await asyncio.gather(
            *(client.post(f"{groups}/same/members", json={}, headers=prod) for _ in range(4))
        )
        assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]


PUSH = {"url": "http://127.0.0.1:9/hook"}  # a push group's URL; nothing is published to call it


async def put_group(client, headers, path: str, **config):
    return await client.put(path, json=config, headers=headers)


class TestPushGroupsQuota:
    """A group becomes a push group when a config ``PUT`` sets ``push``."""

    async def _topic(self, client, headers, name: str = "t") -> str:
        r = await client.post("/v1/topics", json={"name": name, "partitions": 1}, headers=headers)
        assert r.status_code == 201, r.text
        return f"/v1/topics/{name}/groups"

    async def test_the_push_group_past_the_quota_is_refused_and_nothing_changes(self, client, deployment):
        _, prod = await project_with(deployment, pushGroups=2)
        groups = await self._topic(client, prod)
        for g in ("h1", "h2"):
            assert (await put_group(client, prod, f"{groups}/{g}", push=PUSH)).status_code == 200
        assert (await put_group(client, prod, f"{groups}/plain", ackTimeout="45s")).status_code == 200
        # A group that exists keeps its config: the refused PUT's ackTimeout is not applied either.
        r = await put_group(client, prod, f"{groups}/plain", push=PUSH, ackTimeout="50s")
        error = assert_quota(r, "pushGroups", 2, 2)
        assert "push groups per environment" in error["message"]
        config = (await client.get(f"{groups}/plain", headers=prod)).json()["config"]
        assert (config["push"], config["ackTimeout"]) == (None, "45s")
        # A group the refused PUT would have made is not made.
        assert_quota(await put_group(client, prod, f"{groups}/fresh", push=PUSH), "pushGroups", 2, 2)
        assert_envelope(await client.get(f"{groups}/fresh", headers=prod), 404, "GROUP_NOT_FOUND")
        # Changing a push group's config at the limit makes no new one.
        r = await put_group(client, prod, f"{groups}/h1", push={"maxConcurrency": 4})
        assert r.status_code == 200 and r.json()["config"]["push"]["maxConcurrency"] == 4, r.text
        # Turning push off frees its place.
        assert (await put_group(client, prod, f"{groups}/h2", push=None)).status_code == 200
        assert (await put_group(client, prod, f"{groups}/plain", push=PUSH)).status_code == 200

    async def test_per_environment_over_its_topics(self, client, deployment):
        project, prod = await project_with(deployment, pushGroups=1)
        staging = project.headers("staging")
        one, two = await self._topic(client, prod, "one"), await self._topic(client, prod, "two")
        staged = await self._topic(client, staging, "one")
        assert (await put_group(client, prod, f"{one}/h", push=PUSH)).status_code == 200
        assert (await put_group(client, staging, f"{staged}/h", push=PUSH)).status_code == 200
        # Another topic of the same environment counts with the first.
        assert_quota(await put_group(client, prod, f"{two}/h", push=PUSH), "pushGroups", 1, 1)
        assert_quota(await put_group(client, staging, f"{staged}/h2", push=PUSH), "pushGroups", 1, 1)

    async def test_concurrent_push_groups_do_not_overshoot(self, client, deployment):
        """Groups that exist already, on two topics: no topic or group lock serialises their PUTs, only
        the project's."""
        _, prod = await project_with(deployment, pushGroups=3)
        topics = [await self._topic(client, prod, "a"), await self._topic(client, prod, "b")]
        assert (await put_group(client, prod, f"{topics[0]}/first", push=PUSH)).status_code == 200
        plain = [f"{t}/p{i}" for t in topics for i in range(4)]
        for path in plain:
            assert (await put_group(client, prod, path)).status_code == 200
        answers = await asyncio.gather(*(put_group(client, prod, path, push=PUSH) for path in plain))
        assert sorted(r.status_code for r in answers) == [200] * 2 + [403] * 6, [r.text for r in answers]
        for r in answers:
            if r.status_code == 403:
                assert_quota(r, "pushGroups", 3, 3)
        pushing = [
            path
            for path in plain
            if (await client.get(path, headers=prod)).json()["config"]["push"] is not None
        ]
        assert len(pushing) == 2, pushing

    async def test_the_usage_counts_the_environments_push_groups(self, client, deployment):
        project, prod = await project_with(deployment, pushGroups=5)
        groups = await self._topic(client, prod)
        for g in ("h1", "h2"):
            assert (await put_group(client, prod, f"{groups}/{g}", push=PUSH)).status_code == 200
        assert (await put_group(client, prod, f"{groups}/plain")).status_code == 200
        limits = quotas.QuotaLimits(Tier.enterprise, {"pushGroups": 5})
        async with deployment.store.unit(readonly=True) as uow:
            used = {
                env: {q.quota: q for q in await quotas.usage(uow, project.project_id, env, limits, 0)}
                for env in ("production", "staging")
            }
        assert (used["production"]["pushGroups"].used, used["production"]["pushGroups"].limit) == (2, 5)
        assert used["staging"]["pushGroups"].used == 0


class TestTiers:
    async def test_the_developer_table_applies(self, client, deployment):
        project = await deployment.project(tier=Tier.developer)
        prod = project.headers("production")
        r = await client.post("/v1/topics", json={"name": "a", "partitions": 256}, headers=prod)
        assert r.status_code == 201, r.text
        r = await client.post("/v1/topics", json={"name": "b", "partitions": 245}, headers=prod)
        assert_quota(r, "partitions", 500, 256)

    async def test_a_tier_change_applies_at_once(self, client, deployment):
        project, prod = await project_with(deployment, topics=1)
        assert (await client.post("/v1/topics", json={"name": "a"}, headers=prod)).status_code == 201
        assert_quota(await client.post("/v1/topics", json={"name": "b"}, headers=prod), "topics", 1, 1)
        async with deployment.store.unit() as uow:
            await tenancy.set_tier(uow, project.project_id, Tier.enterprise, {**GENEROUS_LIMITS, "topics": 2})
        # Quotas are read from the project row, locked, at each create: no cache to wait for.
        assert (await client.post("/v1/topics", json={"name": "b"}, headers=prod)).status_code == 201
        assert_quota(await client.post("/v1/topics", json={"name": "c"}, headers=prod), "topics", 2, 2)
        # Lowered under what exists: what is there stays, nothing more is made.
        async with deployment.store.unit() as uow:
            await tenancy.set_tier(uow, project.project_id, Tier.enterprise, {**GENEROUS_LIMITS, "topics": 0})
        assert_quota(await client.post("/v1/topics", json={"name": "c"}, headers=prod), "topics", 0, 2)
        assert await topic_names(client, prod) == ["a", "b"]

    async def test_enterprise_without_custom_quotas_has_pro_ones(self, client, deployment):
        _, prod = await project_with(deployment)
        r = await client.post("/v1/topics", json={"name": "a", "partitions": 256}, headers=prod)
        assert r.status_code == 201, r.text
        r = await client.post("/v1/topics", json={"name": "b", "partitions": 256}, headers=prod)
        assert r.status_code == 201, r.text  # 512: past developer's 500, within pro's 20,000


class TestStoredBytesQuota:
    async def test_publishes_are_refused_once_the_project_stores_its_quota(self, client, deployment):
        project, prod = await project_with(deployment, storedBytes=4096)
        assert (
            await client.post("/v1/topics", json={"name": "t", "partitions": 1}, headers=prod)
        ).status_code == 201
        big = {"data": {"blob": "x" * 6000}}
        assert (await client.post("/v1/topics/t/messages", json=big, headers=prod)).status_code == 201
        # Measured off the publish path, every few seconds per project: refused within that.
        refresh = deployment.settings.stored_bytes_refresh_seconds
        deadline = time.monotonic() + refresh * 3 + 5
        while True:
            r = await client.post("/v1/topics/t/messages", json={"data": 1}, headers=prod)
            if r.status_code == 403 or time.monotonic() > deadline:
                break
            assert r.status_code == 201, r.text
            await asyncio.sleep(0.2)
        error = assert_envelope(r, 403, "QUOTA_EXCEEDED")
        [detail] = error["details"]
        assert detail["field"] == "storedBytes"
        limit, used = detail["issue"].removeprefix("limit ").split(", used ")
        assert int(limit) == 4096 and int(used) >= 6000, detail
        # Batches too, and every environment of the project (the quota is the project's).
        r = await client.post(
            "/v1/topics/t/messages/batch", json={"messages": [{"data": 1}, {"data": 2}]}, headers=prod
        )
        assert_envelope(r, 403, "QUOTA_EXCEEDED")
        staging = project.headers("staging")
        assert (
            await client.post("/v1/topics", json={"name": "s", "partitions": 1}, headers=staging)
        ).status_code == 201
        assert_envelope(
            await client.post("/v1/topics/s/messages", json={"data": 1}, headers=staging),
            403,
            "QUOTA_EXCEEDED",
        )
        # Nothing was appended by the refusals.
        described = (await client.get("/v1/topics/t", headers=prod)).json()
        assert described["partitionDetails"][0]["messages"] < 100
        # A bad body is still a 400.
        assert_envelope(
            await client.post("/v1/topics/t/messages", json={"nodata": 1}, headers=prod),
            400,
            "INVALID_REQUEST",
        )


class TestAdminAnswer:
    async def test_the_project_answer_shows_its_quotas(self, client, deployment, monkeypatch):
        from tests.api.test_admin import TOKEN, admin

        monkeypatch.setattr(deployment.settings, "admin_token", type(deployment.settings.admin_token)(TOKEN))
        project = await deployment.project(tier=Tier.developer)
        got = (await client.get(f"/v1/admin/projects/{project.project_id}", headers=admin())).json()
        assert got["quotas"] == {
            "topics": 100,
            "partitions": 500,
            "groups": 20,
            "schedules": 25,
            "pushGroups": 10,
            "storedBytes": 10 << 30,
        }
        body = {"tier": "enterprise", "limits": {"publish": 5000, "topics": 7, "storedBytes": 5 << 40}}
        r = await client.put(f"/v1/admin/projects/{project.project_id}/tier", json=body, headers=admin())
        assert r.status_code == 200, r.text
        assert r.json()["quotas"] == {
            "topics": 7,
            "partitions": 20_000,
            "groups": 500,
            "schedules": 1000,
            "pushGroups": 250,
            "storedBytes": 5 << 40,
        }
        for bad in ({"topics": -1}, {"storedBytes": "1GiB"}, {"groupsPerTopic": 3}):
            r = await client.put(
                f"/v1/admin/projects/{project.project_id}/tier",
                json={"tier": "enterprise", "limits": bad},
                headers=admin(),
            )
            assert_envelope(r, 400, "INVALID_REQUEST")
