"""The operators' admin API: tiers and custom limits over HTTP, applied without a restart."""

from __future__ import annotations

from app.broker.rate_limits import Tier
from tests.api.test_errors import assert_envelope
from tests.api.test_rate_limits import limit_seen

TOKEN = "operator-token-" + "z" * 24


def admin(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class TestAdminApi:
    async def test_disabled_without_token(self, client, deployment, tenant):
        assert not deployment.settings.admin_token.get_secret_value()
        r = await client.get(f"/v1/admin/projects/{tenant.project_id}", headers=admin())
        assert_envelope(r, 403, "FORBIDDEN")

    async def test_set_tier_and_limits_apply_without_a_restart(self, client, deployment, monkeypatch):
        monkeypatch.setattr(deployment.settings, "admin_token", type(deployment.settings.admin_token)(TOKEN))
        project = await deployment.project(tier=Tier.developer)
        key = project.headers("production")
        assert_envelope(
            await client.get(f"/v1/admin/projects/{project.project_id}", headers=admin("wrong")),
            401,
            "INVALID_API_KEY",
        )
        # A project key is not an admin token.
        assert_envelope(
            await client.get(f"/v1/admin/projects/{project.project_id}", headers=key), 401, "INVALID_API_KEY"
        )
        got = (await client.get(f"/v1/admin/projects/{project.name}", headers=admin())).json()
        assert got["tier"] == "developer" and got["limits"] == {"publish": 100, "consume": 50, "admin": 10}
        body = {"tier": "enterprise", "limits": {"publish": 5000, "consume": 2000, "admin": 33}}
        r = await client.put(f"/v1/admin/projects/{project.project_id}/tier", json=body, headers=admin())
        assert r.status_code == 200, r.text
        assert r.json()["limits"] == {"publish": 5000, "consume": 2000, "admin": 33}
        # Applied by every process once its key cache (0.5 s TTL) lets go; how soon is the benchmarks' business.
        assert await limit_seen(client, key, "33"), "the new limits never arrived"

    async def test_bad_input(self, client, deployment, tenant, monkeypatch):
        monkeypatch.setattr(deployment.settings, "admin_token", type(deployment.settings.admin_token)(TOKEN))
        url = f"/v1/admin/projects/{tenant.project_id}/tier"
        for body in (
            {"tier": "platinum"},
            {"tier": "pro", "limits": {"publish": 5}},
            {"tier": "enterprise", "limits": {"publish": 0}},
            {"tier": "enterprise", "limits": {"x": 1}},
            {"tier": "enterprise", "extra": 1},
        ):
            assert_envelope(await client.put(url, json=body, headers=admin()), 400, "INVALID_REQUEST")
        assert_envelope(await client.get("/v1/admin/projects/nope", headers=admin()), 404, "NOT_FOUND")
