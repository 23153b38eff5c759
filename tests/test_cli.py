"""The operator CLI, run as customers' operators run it: a real process, real databases."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.fixtures.server import bootstrap, cli, server_env, set_tier


@pytest.fixture(scope="module")
def migrated_sqlite(tmp_path_factory) -> Path:
    """An embedded deployment's data directory migrated once for the module (``migrate`` is a process
    of ~2 s)."""
    data = tmp_path_factory.mktemp("migrated")
    cli(server_env(data), "migrate")
    return data


@pytest.fixture(scope="module")
def migrated_postgres(postgres_database, tmp_path_factory) -> str:
    """The session's Postgres database, migrated once for the module."""
    cli(server_env(tmp_path_factory.mktemp("migrate"), postgres_database), "migrate")
    return postgres_database


@pytest.fixture(params=["sqlite", "postgres"])
def env(request, tmp_path):
    """A migrated deployment's environment: its own copy of the embedded database, or the session's
    Postgres one (the tests name their projects apart)."""
    if request.param == "postgres":
        return server_env(tmp_path, request.getfixturevalue("migrated_postgres"))
    shutil.copytree(request.getfixturevalue("migrated_sqlite"), tmp_path, dirs_exist_ok=True)
    return server_env(tmp_path)


class TestBootstrap:
    def test_creates_project_and_three_keys(self, env):
        name = f"boot-{id(env)}"
        out = bootstrap(env, name)
        assert out["projectId"].startswith("prj_")
        assert set(out["keys"]) == {"development", "staging", "production"}
        assert re.fullmatch(r"pq_live_sk_[0-9A-Za-z]{32}", out["keys"]["production"])
        assert re.fullmatch(r"pq_test_sk_[0-9A-Za-z]{32}", out["keys"]["development"])

    def test_rerun_keeps_at_most_two_active_revoking_oldest(self, env):
        name = f"rerun-{id(env)}"
        first = bootstrap(env, name)
        second = bootstrap(env, name)
        third = bootstrap(env, name)
        assert first["projectId"] == second["projectId"] == third["projectId"]
        listed = json.loads(cli(env, "keys", "list", "--project", name, "--json").stdout)
        active = [k for k in listed if k["status"] == "active" and k["environment"] == "production"]
        assert len(active) == 2
        # No secret is ever listed.
        assert first["keys"]["production"] not in json.dumps(listed)
        assert all(k["display"].startswith("pq_") for k in listed)

    def test_tier_and_demo_user(self, env):
        out = bootstrap(env, f"tiered-{id(env)}", "--tier", "pro", "--demo-user")
        assert out["login"]["email"] == "demo@queuecore.local" and len(out["login"]["password"]) >= 12
        projects = json.loads(cli(env, "projects", "list", "--json").stdout)
        assert {p["id"]: p["tier"] for p in projects}[out["projectId"]] == "pro"

    def test_a_rerun_keeps_the_demo_password_and_says_so_unless_asked(self, env):
        # --reset-password: the login may exist already (the Postgres database is the session's).
        first = bootstrap(env, f"again-{id(env)}", "--demo-user", "--reset-password")
        assert first["login"]["password"] and first["login"]["url"].endswith("/dashboard")
        rerun = cli(env, "bootstrap", "--project", f"again-{id(env)}", "--demo-user").stdout
        assert "Dashboard login: http://127.0.0.1:8080/dashboard" in rerun
        assert "password  unchanged" in rerun and first["login"]["password"] not in rerun
        assert bootstrap(env, f"again-{id(env)}", "--demo-user")["login"]["password"] is None
        reset = bootstrap(env, f"again-{id(env)}", "--demo-user", "--reset-password")
        assert reset["login"]["password"] not in (None, first["login"]["password"])


class TestKeys:
    def test_create_limit_revoke(self, env):
        out = bootstrap(env, f"keys-{id(env)}")
        project = out["projectId"]
        created = json.loads(
            cli(env, "keys", "create", "--project", project, "--environment", "staging", "--json").stdout
        )
        assert created["id"].startswith("key_") and created["key"].startswith("pq_test_sk_")
        refused = cli(env, "keys", "create", "--project", project, "--environment", "staging", check=False)
        assert refused.returncode == 3
        assert "KEY_LIMIT_REACHED" in refused.stderr
        cli(env, "keys", "revoke", "--id", created["id"])
        again = cli(env, "keys", "create", "--project", project, "--environment", "staging", "--json")
        assert json.loads(again.stdout)["key"].startswith("pq_test_sk_")

    def test_unknown_project_and_key(self, env):
        missing = cli(env, "keys", "list", "--project", "no-such-project", check=False)
        assert missing.returncode == 1 and "no-such-project" in missing.stderr
        assert cli(env, "keys", "revoke", "--id", "key_nope", check=False).returncode == 1


class TestProjectsAndUsers:
    def test_create_list_set_tier(self, env):
        name = f"acme-{id(env)}"
        created = json.loads(cli(env, "projects", "create", "--name", name, "--json").stdout)
        assert created["tier"] == "developer"
        dup = cli(env, "projects", "create", "--name", name, check=False)
        assert dup.returncode == 1
        out = set_tier(env, name, "enterprise", "publish=5000,consume=2000,admin=100", "--json")
        assert json.loads(out.stdout)["customLimits"] == {"publish": 5000, "consume": 2000, "admin": 100}
        bad = set_tier(env, name, "pro", "publish=5", check=False)
        assert bad.returncode == 1 and "enterprise" in bad.stderr
        garbled = set_tier(env, created["id"], "enterprise", "publish=lots", check=False)
        assert garbled.returncode == 1

    def test_set_tier_with_quotas(self, env):
        name = f"quota-{id(env)}"
        cli(env, "projects", "create", "--name", name)
        quotas = "publish=5000,topics=10,partitions=40,groups=3,schedules=0,pushGroups=2,storedBytes=5GiB"
        out = set_tier(env, name, "enterprise", quotas, "--json")
        view = json.loads(out.stdout)
        assert view["customLimits"] == {
            "publish": 5000,
            "topics": 10,
            "partitions": 40,
            "groups": 3,
            "schedules": 0,
            "pushGroups": 2,
            "storedBytes": 5 << 30,
        }
        assert view["quotas"] == {
            "topics": 10,
            "partitions": 40,
            "groups": 3,
            "schedules": 0,
            "pushGroups": 2,
            "storedBytes": 5 << 30,
        }
        # Listed with the tier's quotas; a project off enterprise has its tier's table again.
        set_tier(env, name, "developer")
        [listed] = [p for p in json.loads(cli(env, "projects", "list", "--json").stdout) if p["name"] == name]
        assert listed["quotas"]["topics"] == 100 and listed["quotas"]["storedBytes"] == 10 << 30
        for bad in ("topics=-1", "groupsPerTopic=3", "storedBytes=10GB", "topics=2,partitions=lots"):
            result = set_tier(env, name, "enterprise", bad, check=False)
            assert result.returncode == 1 and "limits" in result.stderr, (bad, result.stderr)

    def test_users_create(self, env):
        email = f"ops{id(env)}@example.com"
        out = json.loads(
            cli(env, "users", "create", "--email", email, "--password", "correct horse", "--json").stdout
        )
        assert out["id"].startswith("usr_")
        assert (
            cli(env, "users", "create", "--email", email, "--password", "another one", check=False).returncode
            == 1
        )
        assert (
            cli(
                env, "users", "create", "--email", "not-an-email", "--password", "long enough", check=False
            ).returncode
            == 1
        )

    def test_users_disable_and_enable(self, env):
        email = f"gone{id(env)}@example.com"
        cli(env, "users", "create", "--email", email, "--password", "correct horse")
        out = json.loads(cli(env, "users", "disable", "--email", email.upper(), "--json").stdout)
        assert out["email"] == email and out["disabled"] is True and out["sessionsEnded"] == 0
        again = json.loads(cli(env, "users", "disable", "--email", email, "--json").stdout)
        assert again["disabled"] is True  # idempotent
        assert json.loads(cli(env, "users", "enable", "--email", email, "--json").stdout)["disabled"] is False
        unknown = cli(env, "users", "disable", "--email", "nobody@example.com", check=False)
        assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr

    def test_set_tier_takes_a_connection_cap(self, env):
        name = f"conn-{id(env)}"
        cli(env, "projects", "create", "--name", name)
        limits = "publish=10,consume=10,admin=10,connections=3"
        out = json.loads(set_tier(env, name, "enterprise", limits, "--json").stdout)
        assert out["customLimits"]["connections"] == 3


class TestBadArguments:
    @pytest.mark.parametrize(
        "args",
        [
            [],
            ["nope"],
            ["keys"],
            ["keys", "create", "--project", "x"],
            ["keys", "create", "--project", "x", "--environment", "prod"],
            ["projects", "set-tier", "--project", "x", "--tier", "platinum"],
        ],
    )
    def test_usage_errors_exit_2(self, tmp_path, args):
        # Refused by the argument parser, before any database is opened: one store is enough.
        result = cli(server_env(tmp_path), *args, check=False)
        assert result.returncode == 2
        assert "usage:" in result.stderr

    def test_production_without_secret_refuses(self, tmp_path):
        env = server_env(tmp_path, QUEUECORE_ENVIRONMENT="production")
        result = cli(env, "migrate", check=False)
        assert result.returncode == 2 and "QUEUECORE_SECRET_KEY" in result.stderr
