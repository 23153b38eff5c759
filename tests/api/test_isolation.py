"""Tenants kept apart: every operation of ``openapi.yaml``, tried with the wrong key.

The matrix is generated from the committed contract, so an endpoint is covered the day it appears. One
tenant (project A, production) owns a topic with messages, a group with a member, a dead letter and an
alert endpoint. Every operation is then called, with A's real ids in its path, by: no key, a revoked key
of A's own environment, A's key of another environment, and another project's key. None of them may see
or change anything of A's: the answer is refused (400/401/403/404/409) or, for calls on collections
(list topics, create a topic), a 2xx that holds nothing of A's. Afterwards A's state is checked whole.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.broker import keys
from tests.fixtures.factories import ProjectKeys

OPERATIONS = [
    (method.upper(), path)
    for path, item in yaml.safe_load(
        Path(__file__).resolve().parents[2].joinpath("openapi.yaml").read_text()
    )["paths"].items()
    for method in item
    if method in ("get", "post", "put", "patch", "delete")
]

# Bodies that would be valid for the owner, so that a refusal is about who asks, not what is asked.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/topics"): {"name": "iso.created"},
    ("PATCH", "/v1/topics/{name}"): {"retention": "1d"},
    ("POST", "/v1/topics/{name}/messages"): {"data": {"n": "intruder"}},
    ("POST", "/v1/topics/{name}/messages/batch"): {"messages": [{"data": {"n": "intruder"}}]},
    ("PUT", "/v1/topics/{name}/groups/{group}"): {"ackTimeout": "5s"},
    ("POST", "/v1/topics/{name}/groups/{group}/reset-offsets"): {"to": "earliest"},
    ("POST", "/v1/topics/{name}/groups/{group}/offsets/seek"): {"partition": 0, "offset": 0},
    ("POST", "/v1/topics/{name}/groups/{group}/offsets/reset"): {"to": "earliest"},
    ("POST", "/v1/topics/{name}/groups/{group}/dlq/replay"): {"messageId": "{dead}"},
    ("POST", "/v1/topics/{name}/groups/{group}/dlq/replay-all"): {},
    ("PUT", "/v1/alerts/endpoint"): {"url": "https://intruder.example/hook"},
    ("POST", "/v1/topics/{name}/groups/{group}/members"): {"memberId": "{member}"},
    ("POST", "/v1/topics/{name}/groups/{group}/members/{member_id}/heartbeat"): {"generationId": 1},
    ("POST", "/v1/topics/{name}/groups/{group}/poll"): {
        "memberId": "{member}",
        "generationId": 1,
        "maxMessages": 10,
        "waitSeconds": 0,
    },
    ("POST", "/v1/topics/{name}/groups/{group}/ack"): {
        "memberId": "{member}",
        "generationId": 1,
        "ids": ["{mid}"],
    },
    ("POST", "/v1/topics/{name}/groups/{group}/nack"): {
        "memberId": "{member}",
        "generationId": 1,
        "id": "{mid}",
    },
    ("POST", "/v1/topics/{name}/groups/{group}/extend"): {
        "memberId": "{member}",
        "generationId": 1,
        "ids": ["{mid}"],
        "seconds": 5,
    },
    ("POST", "/v1/tokens/websocket"): {"topic": "{name}", "group": "{group}"},
    ("PUT", "/v1/admin/projects/{project}/tier"): {"tier": "developer"},
}
REFUSED = {400, 401, 403, 404, 409}
NO_AUTH = {("GET", "/v1/health")}


class Owner:
    """Project A's production environment and everything it made."""

    def __init__(self, tenant: ProjectKeys) -> None:
        self.tenant = tenant
        self.headers = tenant.headers("production")
        self.topic = f"iso.{secrets.token_hex(4)}"
        self.marker = f"marker-{secrets.token_hex(8)}"
        self.hook = f"https://owner-{secrets.token_hex(4)}.example/hook"
        self.ids: list[str] = []
        self.values: dict[str, str] = {}

    async def build(self, client) -> None:
        async def ok(method: str, path: str, body: Any = None) -> Any:
            r = await client.request(method, path, json=body, headers=self.headers)
            assert r.status_code in (200, 201, 202, 204), (method, path, r.text)
            return r.json() if r.content else None

        topic = await ok("POST", "/v1/topics", {"name": self.topic, "partitions": 2})
        batch = {"messages": [{"data": {"secret": self.marker, "n": i}, "partition": 0} for i in range(4)]}
        self.ids = [
            m["id"] for m in (await ok("POST", f"/v1/topics/{self.topic}/messages/batch", batch))["messages"]
        ]
        groups = f"/v1/topics/{self.topic}/groups/g"
        await ok("PUT", groups, {"deadLetter": {"maxRetries": 0, "retryDelay": "0s"}})
        joined = await ok("POST", f"{groups}/members", {"startFrom": "earliest"})
        member = {"memberId": joined["memberId"], "generationId": joined["generationId"]}
        polled = await ok("POST", f"{groups}/poll", {**member, "maxMessages": 2, "waitSeconds": 1})
        dead = polled["messages"][0]["id"]
        await ok("POST", f"{groups}/nack", {**member, "id": dead, "reason": self.marker})
        await ok("PUT", "/v1/alerts/endpoint", {"url": self.hook})
        self.values = {
            "name": self.topic,
            "topic_id": topic["id"],
            "group": "g",
            "member_id": joined["memberId"],
            "member": joined["memberId"],
            "message_id": dead,
            "dead": dead,
            "mid": polled["messages"][1]["id"],
            "partition": "0",
            "project": self.tenant.project_id,
        }

    def fill(self, value: Any) -> Any:
        """A's real ids in place of ``{placeholders}`` (paths and bodies)."""
        if isinstance(value, str):
            for name, real in self.values.items():
                value = value.replace("{" + name + "}", real)
            return value
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return value

    def leaked(self, text: str) -> list[str]:
        secrets_of_a = [self.marker, self.hook, self.values["topic_id"], self.values["member_id"], *self.ids]
        return [s for s in secrets_of_a if s in text]


@pytest.fixture
async def owner(client, tenant) -> Owner:
    owner = Owner(tenant)
    await owner.build(client)
    return owner


async def intruders(deployment, owner: Owner) -> dict[str, dict[str, str]]:
    other = await deployment.project()
    async with deployment.store.unit() as uow:
        spare = await keys.create_key(uow, deployment.secret, owner.tenant.project_id, "production")
    async with deployment.store.unit() as uow:
        await keys.revoke_key(uow, spare.id)
    return {
        "no key": {},
        "a revoked key of the same environment": {"Authorization": f"Bearer {spare.key}"},
        "the same project's development key": owner.tenant.headers("development"),
        "the same project's staging key": owner.tenant.headers("staging"),
        "another project's production key": other.headers("production"),
    }


def test_the_matrix_covers_every_operation_of_the_contract():
    assert len(OPERATIONS) >= 35
    known = {path for _, path in OPERATIONS}
    stale = [op for op in BODIES if op[1] not in known]
    assert not stale, f"bodies for operations the contract no longer has: {stale}"


async def test_no_key_but_the_owners_reaches_the_owners_data(client, deployment, owner):
    who = await intruders(deployment, owner)
    failures: list[str] = []
    for method, template in OPERATIONS:
        if (method, template) in NO_AUTH:
            continue
        path = owner.fill(template)
        body = owner.fill(BODIES.get((method, template)))
        for name, headers in who.items():
            r = await client.request(method, path, json=body, headers=headers)
            leaks = owner.leaked(r.text)
            if leaks:
                failures.append(f"{method} {template} with {name}: {r.status_code} shows {leaks}")
            elif r.status_code not in REFUSED and not (
                200 <= r.status_code < 300 and "{name}" not in template
            ):
                # A 2xx is fine only on a collection (nothing of A's in the path): it saw its own scope.
                failures.append(f"{method} {template} with {name}: {r.status_code} {r.text[:200]}")
            # (The operators' admin API takes its own token, not API keys: any refusal will do there.)
            if (
                name in ("no key", "a revoked key of the same environment")
                and r.status_code != 401
                and not template.startswith("/v1/admin/")
            ):
                failures.append(f"{method} {template} with {name}: {r.status_code}, expected 401")
    assert not failures, "\n".join(failures)
    await assert_untouched(client, owner)


async def assert_untouched(client, owner: Owner) -> None:
    """Everything A made is as A left it."""
    h = owner.headers
    topic = (await client.get(f"/v1/topics/{owner.topic}", headers=h)).json()
    assert (topic["retention"], sum(p["messages"] for p in topic["partitionDetails"])) == ("7d", 4)
    group = (await client.get(f"/v1/topics/{owner.topic}/groups/g", headers=h)).json()
    assert group["config"]["ackTimeout"] == "30s" and group["consumers"] == 1
    dead_letters = (await client.get(f"/v1/topics/{owner.topic}/groups/g/dlq", headers=h)).json()
    assert [e["messageId"] for e in dead_letters["data"]] == [owner.values["dead"]]
    endpoint = (await client.get("/v1/alerts/endpoint", headers=h)).json()
    assert endpoint["url"] == owner.hook
    listed = (await client.get("/v1/topics", headers=h)).json()["data"]
    assert [t["name"] for t in listed] == [owner.topic]
    audit = (await client.get(f"/v1/topics/{owner.topic}/groups/g/dlq/audit", headers=h)).json()
    assert audit["data"] == []
