"""Push group secrets at rest: sealed, and sealed again under a rotated server secret."""

from __future__ import annotations

import pytest

from app.broker import push_groups
from app.kit import standard_webhooks
from app.kit.sealing import Sealer
from tests.api.test_pull import make_topic


class _RolledBack(Exception):
    """Ends a unit of work without committing it."""


class TestReseal:
    async def test_secrets_sealed_under_the_previous_key_are_sealed_again(self, client, prod, deployment):
        await make_topic(client, prod, "orders")
        r = await client.put(
            "/v1/topics/orders/groups/hooks", json={"push": {"url": "http://127.0.0.1:9/x"}}, headers=prod
        )
        secret = r.json()["config"]["push"]["secret"]
        r = await client.post("/v1/topics/orders/groups/hooks/push/rotate-secret", headers=prod)
        rotated = r.json()["secret"]
        old = deployment.app.state.services.push_policy.sealer
        new = Sealer(b"a-new-server-secret-of-32-bytes!", previous=deployment.secret)
        with pytest.raises(_RolledBack):  # the deployment keeps its own key
            async with deployment.store.unit() as uow:
                rows = {g: (s, p) for g, s, p in await uow.push.sealed_secrets()}
                mine = [g for g, (s, p) in rows.items() if old.open(s) == rotated]
                assert len(mine) == 1 and old.open(rows[mine[0]][1] or "") == secret  # sealed, never clear
                assert rotated not in rows[mine[0]][0] and new.stale(rows[mine[0]][0])
                assert await push_groups.reseal(uow, new) >= 1
                again = {g: (s, p) for g, s, p in await uow.push.sealed_secrets()}
                stored, previous = again[mine[0]]
                assert not new.stale(stored) and previous is not None and not new.stale(previous)
                assert (new.open(stored), new.open(previous)) == (rotated, secret)
                assert standard_webhooks.key_of(new.open(stored))  # still a whsec_ secret
                raise _RolledBack

    @pytest.mark.parametrize("secret", ["whsec_" + "A" * 32])
    def test_masking_shows_only_the_last_four(self, secret):
        assert push_groups.mask(secret) == "whsec_…AAAA"
