"""API keys (``app/broker/keys.py``): issuing (the secret shown once, only its HMAC stored), the limit of
two active keys per environment, revocation, and ``KeyAuthenticator``: good, revoked, unknown and
malformed keys, keys bound to their environment and to the server secret, the cache honouring a
revocation, last-used times written in a batch.

On the SQLite and Postgres deployments; ``tenant`` (``tests/conftest.py``) is a fresh project with one key
per environment.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select, update

from app.broker import keys
from app.broker.errors import ApiKeyNotFound, InvalidRequest, KeyLimitReached, ProjectNotFound
from app.stores.metadata.database import SqlMetadataStore
from app.stores.metadata.models import ApiKey
from tests.broker.conftest import ON_DATABASES
from tests.conftest import Deployment
from tests.fixtures.factories import GENEROUS_LIMITS

MALFORMED = [
    "",
    "pq_live_sk_short",
    "pq_live_sk_" + "A" * 33,
    "pq_prod_sk_" + "A" * 32,
    "pq_live_sk_" + "!" * 32,
    "Bearer pq_live_sk_" + "A" * 32,
    "x" * 10_000,
]


@pytest.fixture
async def authenticator(deployment: Deployment) -> AsyncIterator[keys.KeyAuthenticator]:
    """An authenticator over the deployment's store whose cache never expires during a test."""
    auth = keys.KeyAuthenticator(deployment.store, deployment.secret, cache_ttl=3600.0)
    yield auth
    await auth.close()


async def issue(deployment: Deployment, project_id: str, environment: str) -> keys.IssuedKey:
    async with deployment.store.unit() as uow:
        return await keys.create_key(uow, deployment.secret, project_id, environment)


async def revoke(store: SqlMetadataStore, key_id: str) -> None:
    async with store.unit() as uow:
        await keys.revoke_key(uow, key_id)


async def active(deployment: Deployment, project_id: str, environment: str) -> list[str]:
    async with deployment.store.unit(readonly=True) as uow:
        rows = await uow.keys.active_for(project_id, environment)
    return [row.id for row in rows]


@ON_DATABASES
class TestIssue:
    async def test_the_secret_is_shown_once_and_only_its_hash_prefix_and_last_four_are_kept(
        self, deployment, tenant
    ):
        issued = await issue(deployment, tenant.project_id, "staging")
        assert re.fullmatch(r"pq_test_sk_[0-9A-Za-z]{32}", issued.key)
        assert (issued.environment, issued.project_id) == ("staging", tenant.project_id)
        async with deployment.store.unit(readonly=True) as uow:
            row = await uow.keys.get(issued.id)
            assert row is not None
            assert row.key_hash == keys.hash_key(deployment.secret, issued.key)
            assert (row.prefix, row.last_four) == ("pq_test_sk_", issued.key[-4:])
            view = keys.key_view(row)
        async with deployment.store.session(readonly=True) as session:
            # Every column of the stored row, as the database has it.
            stored_row = (await session.execute(select(ApiKey.__table__).where(ApiKey.id == issued.id))).one()
            stored = [str(value) for value in stored_row]
            assert not any(issued.key[11:] in value for value in stored)
        assert view["display"] == f"pq_test_sk_…{issued.key[-4:]}"
        assert (view["status"], view["revokedAt"], view["lastUsedAt"]) == ("active", None, None)
        assert issued.key[11:] not in repr(view)

    async def test_production_keys_are_live_and_the_others_test_keys(self, deployment, tenant):
        prefixes = {env: (await issue(deployment, tenant.project_id, env)).key[:11] for env in tenant.keys}
        assert prefixes == {
            "production": "pq_live_sk_",
            "staging": "pq_test_sk_",
            "development": "pq_test_sk_",
        }

    async def test_two_keys_never_share_a_secret(self, deployment, tenant):
        first = await issue(deployment, tenant.project_id, "production")
        assert first.key != tenant.keys["production"]
        assert first.key[-32:] != tenant.keys["production"][-32:]

    async def test_an_unknown_environment_or_project_is_refused(self, deployment, tenant):
        async with deployment.store.unit() as uow:
            with pytest.raises(InvalidRequest) as refused:
                await keys.create_key(uow, deployment.secret, tenant.project_id, "prod")
            assert refused.value.code == "INVALID_REQUEST"
            assert [d["field"] for d in refused.value.details or []] == ["environment"]
            with pytest.raises(ProjectNotFound):
                await keys.create_key(uow, deployment.secret, "prj_nosuchproject", "production")

    async def test_keys_are_listed_by_project_id_or_name_without_secrets(self, deployment, tenant):
        async with deployment.store.unit(readonly=True) as uow:
            by_id = await keys.list_keys(uow, tenant.project_id)
            by_name = await keys.list_keys(uow, tenant.name)
            views = [keys.key_view(row) for row in by_id]
        assert {row.id for row in by_id} == {row.id for row in by_name} == set(tenant.key_ids.values())
        assert {v["environment"] for v in views} == {"production", "staging", "development"}
        for secret in tenant.keys.values():
            assert secret[11:] not in repr(views)


@ON_DATABASES
class TestLimits:
    async def test_a_third_active_key_in_an_environment_is_refused(self, deployment, tenant):
        second = await issue(deployment, tenant.project_id, "production")
        with pytest.raises(KeyLimitReached) as refused:
            await issue(deployment, tenant.project_id, "production")
        assert refused.value.code == "KEY_LIMIT_REACHED"
        assert await active(deployment, tenant.project_id, "production") == [
            tenant.key_ids["production"],
            second.id,
        ]
        # Other environments have their own two.
        await issue(deployment, tenant.project_id, "development")

    async def test_revoking_one_frees_its_place(self, deployment, tenant):
        await issue(deployment, tenant.project_id, "staging")
        await revoke(deployment.store, tenant.key_ids["staging"])
        third = await issue(deployment, tenant.project_id, "staging")
        assert tenant.key_ids["staging"] not in await active(deployment, tenant.project_id, "staging")
        assert third.id in await active(deployment, tenant.project_id, "staging")

    async def test_rotating_with_two_active_revokes_the_oldest(self, deployment, tenant):
        second = await issue(deployment, tenant.project_id, "production")
        async with deployment.store.unit() as uow:
            rotated = await keys.rotate_key(uow, deployment.secret, tenant.project_id, "production")
        assert await active(deployment, tenant.project_id, "production") == [second.id, rotated.id]

    async def test_revoking_is_idempotent_and_an_unknown_key_is_not_found(self, deployment, tenant):
        key_id = tenant.key_ids["development"]
        async with deployment.store.unit() as uow:
            first = keys.key_view(await keys.revoke_key(uow, key_id))
        async with deployment.store.unit() as uow:
            again = keys.key_view(await keys.revoke_key(uow, key_id))
            assert again["revokedAt"] == first["revokedAt"] is not None  # not moved by the second call
            assert again["status"] == "revoked"
            with pytest.raises(ApiKeyNotFound) as missing:
                await keys.revoke_key(uow, "key_nosuchkey0000000")
        assert missing.value.code == "NOT_FOUND"


@ON_DATABASES
class TestAuthenticate:
    async def test_a_good_key_answers_its_key_project_environment_and_limits(
        self, deployment, tenant, authenticator
    ):
        for environment, secret in tenant.keys.items():
            principal = await authenticator.authenticate(secret)
            assert principal == keys.Principal(
                key_id=tenant.key_ids[environment],
                project_id=tenant.project_id,
                environment=environment,
                tier="enterprise",
                custom_limits=GENEROUS_LIMITS,
            )

    @pytest.mark.parametrize("presented", MALFORMED)
    async def test_a_malformed_key_is_refused(self, authenticator, presented):
        assert await authenticator.authenticate(presented) is None

    async def test_an_unknown_or_revoked_key_is_refused(self, deployment, tenant, authenticator):
        assert await authenticator.authenticate("pq_live_sk_" + "A" * 32) is None
        await revoke(deployment.store, tenant.key_ids["staging"])
        assert await authenticator.authenticate(tenant.keys["staging"]) is None
        assert await authenticator.principal_by_id(tenant.key_ids["staging"]) is None
        assert (await authenticator.principal_by_id(tenant.key_ids["production"])).environment == "production"

    async def test_a_key_is_bound_to_its_environments_prefix(self, deployment, tenant, authenticator):
        live = tenant.keys["production"]
        assert await authenticator.authenticate("pq_test_sk_" + live[11:]) is None
        # A row whose environment disagrees with its key's prefix is refused too (defence in depth:
        # the hash already differs for a swapped prefix).
        async with deployment.store.session() as session:
            changed = await session.execute(
                update(ApiKey)
                .where(ApiKey.id == tenant.key_ids["production"])
                .values(environment="development")
            )
            assert getattr(changed, "rowcount", 0) == 1
        assert await authenticator.authenticate(live) is None

    async def test_a_key_is_bound_to_the_server_secret(self, deployment, tenant):
        other = keys.KeyAuthenticator(deployment.store, b"another-server-secret-" + b"y" * 32)
        assert await other.authenticate(tenant.keys["production"]) is None


@ON_DATABASES
class TestCache:
    async def test_answers_come_from_the_cache_until_it_is_forgotten(self, deployment, tenant, authenticator):
        secret = tenant.keys["production"]
        assert await authenticator.authenticate(secret) is not None
        await revoke(deployment.store, tenant.key_ids["production"])
        # The TTL is an hour: the cached answer stands, which is what spares a read per request ...
        assert await authenticator.authenticate(secret) is not None
        authenticator.forget()  # ... until this process revokes a key itself and drops it
        assert await authenticator.authenticate(secret) is None

    async def test_a_revocation_by_another_process_is_honoured_once_the_ttl_passes(self, deployment, tenant):
        auth = keys.KeyAuthenticator(deployment.store, deployment.secret, cache_ttl=0.05)
        secret = tenant.keys["development"]
        assert await auth.authenticate(secret) is not None
        # Revoked through another store handle, as the operator CLI or another API node would.
        other = SqlMetadataStore(deployment.settings.resolved_database_url, pool_size=1)
        try:
            await revoke(other, tenant.key_ids["development"])
        finally:
            await other.close()
        answers = []
        for _ in range(200):  # 20 ms apart: the TTL many times over
            answers.append(await auth.authenticate(secret))
            if answers[-1] is None:
                break
            await asyncio.sleep(0.02)
        assert answers[-1] is None, f"the revoked key is still accepted after {len(answers)} looks"

    async def test_the_cache_keeps_at_most_cache_size_answers(self, deployment, tenant):
        auth = keys.KeyAuthenticator(deployment.store, deployment.secret, cache_size=2)
        for secret in tenant.keys.values():
            assert await auth.authenticate(secret) is not None
        assert len(auth._cache) == 2
        # The evicted key still authenticates: from the store again.
        assert await auth.authenticate(tenant.keys["development"]) is not None


@ON_DATABASES
class TestLastUsed:
    async def test_last_used_times_are_written_at_the_flush_not_per_request(
        self, deployment, tenant, authenticator
    ):
        async def last_used() -> dict[str, object]:
            async with deployment.store.unit(readonly=True) as uow:
                rows = await keys.list_keys(uow, tenant.project_id)
                return {row.environment: keys.key_view(row)["lastUsedAt"] for row in rows}

        await authenticator.flush()  # nothing pending: nothing written
        for _ in range(3):
            await authenticator.authenticate(tenant.keys["staging"])
        assert await last_used() == {"production": None, "staging": None, "development": None}
        await authenticator.flush()
        used = await last_used()
        assert used["staging"] is not None
        assert (used["production"], used["development"]) == (None, None)


@ON_DATABASES
class TestStanding:
    """What the live-revocation sweep reads (``connections.ConnectionRegistry``): one query for many keys."""

    async def test_active_keys_answer_their_plan_and_fallen_ones_are_absent(self, deployment, tenant):
        revoked = await issue(deployment, tenant.project_id, "staging")
        await revoke(deployment.store, revoked.id)
        asked = [*tenant.key_ids.values(), revoked.id, "key_nonexistent"]
        async with deployment.store.unit(readonly=True) as uow:
            standing = await uow.keys.standing_of(asked)
        assert len(standing) == 3 and set(standing) == set(tenant.key_ids.values())
        assert {plan.tier for plan in standing.values()} == {"enterprise"}
