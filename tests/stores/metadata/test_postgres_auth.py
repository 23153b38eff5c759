"""Postgres with a password and ``sslmode``: a role of the test's own with a SCRAM password, the metadata
store and ``queuecore-server migrate`` on a URL that carries it, and ``QUEUECORE_DATABASE_SSLMODE``
reaching asyncpg.

What this machine can and cannot show. Its ``pg_hba.conf`` trusts every connection from 127.0.0.1 (and it
is not ours to change), and its server runs without SSL. So: that a URL with a password and
``sslmode=disable``/``prefer`` is accepted and the password never shown, yes; that ``sslmode=require``
really reaches asyncpg (the server's refusal of the SSL upgrade proves it), yes; that a wrong password
is refused, and an encrypted session, not on that server: those two tests run only against a server whose
pg_hba asks 127.0.0.1 for a password (``md5``/``scram-sha-256``) or that has SSL on, and are skipped here,
saying why. ``TestAServerThatAsksForAPassword`` shows both on a Postgres of the test's own
(tests/fixtures/postgres.py: SCRAM for TCP connections, SSL with a certificate of infra/pki.py).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text

from app.main import build_metadata_store
from app.settings import Settings
from infra.pki import ensure_pki
from tests.fixtures.database import ADMIN_DSN
from tests.fixtures.postgres import PrivatePostgres
from tests.fixtures.server import cli, server_env


@dataclass(frozen=True)
class Role:
    name: str
    password: str
    database: str

    def url(self, password: str | None = None, query: str = "") -> str:
        secret = self.password if password is None else password
        return f"postgresql+asyncpg://{self.name}:{secret}@127.0.0.1:5432/{self.database}{query}"


@pytest.fixture(scope="module")
async def role() -> AsyncIterator[Role]:
    """A login role with a password (hashed as the server's password_encryption says) owning a database of
    its own; both dropped afterwards."""
    suffix = secrets.token_hex(4)
    made = Role(f"qc_links_{suffix}", secrets.token_urlsafe(24), f"qc_links_{suffix}")
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        await admin.execute(f"CREATE ROLE {made.name} LOGIN PASSWORD '{made.password}'")
        await admin.execute(f'CREATE DATABASE "{made.database}" OWNER {made.name}')
        yield made
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{made.database}" WITH (FORCE)')
        await admin.execute(f"DROP ROLE IF EXISTS {made.name}")
        await admin.close()


async def admin_value(query: str, *args: object) -> object:
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        return await admin.fetchval(query, *args)
    finally:
        await admin.close()


async def loopback_auth_method() -> str:
    """How pg_hba authenticates TCP connections from 127.0.0.1 (the first matching host line)."""
    method = await admin_value(
        "SELECT auth_method FROM pg_hba_file_rules WHERE type LIKE 'host%' "
        "AND (address IS NULL OR address::text IN ('127.0.0.1', 'all', '0.0.0.0')) ORDER BY line_number LIMIT 1"
    )
    return str(method or "none")


class TestAPasswordInTheUrl:
    async def test_the_password_is_stored_as_a_scram_or_md5_hash(self, role):
        stored = str(await admin_value("SELECT rolpassword FROM pg_authid WHERE rolname = $1", role.name))
        assert stored.startswith(("SCRAM-SHA-256$", "md5")) and role.password not in stored

    @pytest.mark.parametrize("sslmode", ["disable", "prefer"])
    async def test_the_metadata_store_connects_as_the_role(self, role, tmp_path, sslmode):
        settings = Settings(data_dir=tmp_path, database_url=role.url(), database_sslmode=sslmode)
        assert role.password not in repr(settings)
        store = build_metadata_store(settings)
        try:
            assert await store.check()
            async with store.engine.connect() as conn:
                assert (await conn.execute(text("SELECT current_user"))).scalar() == role.name
        finally:
            await store.close()

    def test_migrate_runs_as_the_role_and_prints_no_password(self, role, tmp_path):
        env = server_env(tmp_path, role.url(query="?sslmode=prefer"), QUEUECORE_LOG_LEVEL="DEBUG")
        done = cli(env, "migrate")
        assert role.password not in done.stdout + done.stderr

    async def test_a_wrong_password_is_refused(self, role, tmp_path):
        method = await loopback_auth_method()
        if method == "trust":
            pytest.skip("pg_hba.conf here trusts 127.0.0.1: any password is accepted (not ours to change)")
        store = build_metadata_store(Settings(data_dir=tmp_path, database_url=role.url(password="guess")))
        try:
            assert not await store.check()
        finally:
            await store.close()


class TestSslmode:
    async def test_require_reaches_asyncpg(self, role, tmp_path):
        if await admin_value("SHOW ssl") == "on":
            pytest.skip("this server has SSL on: require would succeed (see the encrypted test)")
        settings = Settings(data_dir=tmp_path, database_url=role.url(), database_sslmode="require")
        store = build_metadata_store(settings)
        try:
            # The server has no SSL: asyncpg, told to require it, refuses to go on in the clear.
            with pytest.raises(Exception, match="(?i)ssl") as refused:
                async with store.engine.connect():
                    pass
            assert role.password not in str(refused.value)
        finally:
            await store.close()

    async def test_require_gives_an_encrypted_session(self, role, tmp_path):
        if await admin_value("SHOW ssl") != "on":
            pytest.skip("this server runs without SSL (ssl = off): no encrypted session to show")
        store = build_metadata_store(
            Settings(data_dir=tmp_path, database_url=role.url(), database_sslmode="require")
        )
        try:
            async with store.engine.connect() as conn:
                encrypted = await conn.execute(
                    text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                )
                assert encrypted.scalar() is True
        finally:
            await store.close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePostgres]:
    """A private Postgres that asks TCP connections for the superuser's SCRAM password and serves SSL."""
    pki = ensure_pki(tmp_path_factory.mktemp("pg-pki"))
    server = PrivatePostgres(password=secrets.token_urlsafe(18), pki=pki)
    server.start()
    try:
        yield server
    finally:
        server.remove()


def _with_password(server: PrivatePostgres, password: str) -> str:
    assert server.password is not None
    return server.url.replace(f":{server.password}@", f":{password}@")


@pytest.mark.slow
class TestAServerThatAsksForAPassword:
    async def test_a_wrong_password_is_refused_and_not_shown(self, guarded: PrivatePostgres, tmp_path: Path):
        wrong = secrets.token_urlsafe(12)
        store = build_metadata_store(Settings(data_dir=tmp_path, database_url=_with_password(guarded, wrong)))
        try:
            assert not await store.check()
            with pytest.raises(Exception, match="(?i)password authentication failed") as refused:
                async with store.engine.connect():
                    pass
            assert wrong not in str(refused.value)
        finally:
            await store.close()
        done = cli(server_env(tmp_path, _with_password(guarded, wrong)), "migrate", check=False)
        assert done.returncode != 0
        assert wrong not in done.stdout + done.stderr

    async def test_the_right_password_migrates_and_connects(self, guarded: PrivatePostgres, tmp_path: Path):
        assert guarded.password is not None
        done = cli(server_env(tmp_path, guarded.url, QUEUECORE_LOG_LEVEL="DEBUG"), "migrate")
        assert guarded.password not in done.stdout + done.stderr
        store = build_metadata_store(Settings(data_dir=tmp_path, database_url=guarded.url))
        try:
            assert await store.check()
        finally:
            await store.close()

    @pytest.mark.parametrize(
        ("sslmode", "encrypted"), [("require", True), ("prefer", True), ("disable", False)]
    )
    async def test_sslmode_decides_whether_the_session_is_encrypted(
        self, guarded: PrivatePostgres, tmp_path: Path, sslmode: str, encrypted: bool
    ):
        store = build_metadata_store(
            Settings(data_dir=tmp_path, database_url=guarded.url, database_sslmode=sslmode)
        )
        try:
            async with store.engine.connect() as conn:
                ssl = await conn.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"))
                assert ssl.scalar() is encrypted
        finally:
            await store.close()

    async def test_verify_full_with_the_deployments_ca_migrates_connects_and_checkpoints(
        self, guarded: PrivatePostgres, tmp_path: Path
    ):
        assert guarded.pki is not None
        checked = {
            "QUEUECORE_DATABASE_SSLMODE": "verify-full",
            "QUEUECORE_DATABASE_TLS_CA": str(guarded.pki.ca),
        }
        cli(server_env(tmp_path, guarded.url, **checked), "migrate")
        store = build_metadata_store(
            Settings(
                data_dir=tmp_path,
                database_url=guarded.url,
                database_sslmode="verify-full",
                database_tls_ca=str(guarded.pki.ca),
            )
        )
        try:
            assert await store.check()
            async with store.engine.connect() as conn:
                ssl = await conn.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"))
                assert ssl.scalar() is True
            # The push checkpoints' own connection (asyncpg's, not the pool's) checks the server the same way.
            own = await store.checkpoint_writer.connection._connect()
            assert await own.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") is True
        finally:
            await store.close()

    @pytest.mark.parametrize("sslmode", ["verify-ca", "verify-full"])
    async def test_a_server_certificate_another_ca_signed_is_refused(
        self, guarded: PrivatePostgres, tmp_path: Path, sslmode: str
    ):
        stranger = ensure_pki(tmp_path / "another-ca")
        store = build_metadata_store(
            Settings(
                data_dir=tmp_path,
                database_url=guarded.url,
                database_sslmode=sslmode,
                database_tls_ca=str(stranger.ca),
            )
        )
        try:
            assert not await store.check()
            with pytest.raises(Exception, match="(?i)certificate verify failed"):
                async with store.engine.connect():
                    pass
        finally:
            await store.close()
        checked = {"QUEUECORE_DATABASE_SSLMODE": sslmode, "QUEUECORE_DATABASE_TLS_CA": str(stranger.ca)}
        done = cli(server_env(tmp_path, guarded.url, **checked), "migrate", check=False)
        assert done.returncode != 0
        assert "certificate verify failed" in (done.stdout + done.stderr).lower()
