"""A Redis that wants a password (``--requirepass``, and an ACL user): it refuses a client without one, and
the limiter and the token buckets work with the password in ``QUEUECORE_REDIS_URL`` (nothing falls back
to per-process counting). And a Redis that speaks only TLS: ``rediss://`` with ``QUEUECORE_REDIS_TLS_CA``.
``redis-server``s of the test's own; the suite's shared one is never changed."""

from __future__ import annotations

import secrets
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, AuthenticationWrongNumberOfArgsError, ResponseError

from app.main import build_limiter, build_token_buckets
from app.settings import Settings
from app.stores.limits.redis import RedisRateLimiter
from infra.pki import Pki, ensure_pki
from tests.fixtures.redis import RedisServer
from tests.fixtures.server import free_port

PASSWORD = secrets.token_urlsafe(24)
ACL_USER, ACL_PASSWORD = "queuecore", secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def redis_with_password(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(
        free_port(),
        tmp_path_factory.mktemp("redis-auth"),
        "--requirepass", PASSWORD,
        # An ACL user as well (Redis 6+): ``redis://user:password@``.
        "--user", ACL_USER, "on", f">{ACL_PASSWORD}", "~*", "+@all",
    )  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.kill()


def url_with(server: RedisServer, userinfo: str) -> str:
    return f"redis://{userinfo}@127.0.0.1:{server.port}/0"


@pytest.fixture
async def admin(redis_with_password: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(url_with(redis_with_password, f":{PASSWORD}"))
    try:
        yield client
    finally:
        await client.aclose()


class TestRefused:
    async def test_a_client_without_the_password(self, redis_with_password):
        client = Redis.from_url(redis_with_password.url)
        try:
            with pytest.raises(
                (AuthenticationError, ResponseError), match="NOAUTH|authenticated|Authentication"
            ):
                await client.set("qc:forged", "1")
        finally:
            await client.aclose()

    async def test_a_client_with_a_wrong_password(self, redis_with_password):
        client = Redis.from_url(url_with(redis_with_password, ":guess"))
        try:
            with pytest.raises((AuthenticationError, AuthenticationWrongNumberOfArgsError, ResponseError)):
                await client.ping()
        finally:
            await client.aclose()

    async def test_a_limiter_without_the_password_is_degraded_not_silently_redis(self, redis_with_password):
        limiter = RedisRateLimiter(redis_with_password.url, key_prefix="qc:test:auth:")
        try:
            assert await limiter.status() == "degraded"
        finally:
            await limiter.close()


class TestWithThePasswordInTheUrl:
    @pytest.mark.parametrize(
        "userinfo", [f":{PASSWORD}", f"{ACL_USER}:{ACL_PASSWORD}"], ids=["requirepass", "acl"]
    )
    async def test_the_limiter_counts_in_redis(self, redis_with_password, admin, userinfo, tmp_path: Path):
        prefix = f"qc:test:auth:{secrets.token_hex(4)}:"
        settings = Settings(
            data_dir=tmp_path, redis_url=url_with(redis_with_password, userinfo), rate_limit_prefix=prefix
        )
        limiter = build_limiter(settings)
        try:
            decisions = [await limiter.acquire("bucket", limit=2) for _ in range(3)]
            assert [d.allowed for d in decisions] == [True, True, False]
            assert await limiter.status() == "ok"
            assert await admin.zcard(f"{prefix}bucket") == 2  # counted in Redis, not in this process
        finally:
            await limiter.close()

    async def test_the_token_buckets_take_from_redis(self, redis_with_password, admin, tmp_path: Path):
        prefix = f"qc:test:auth:{secrets.token_hex(4)}:"
        settings = Settings(
            data_dir=tmp_path,
            redis_url=url_with(redis_with_password, f":{PASSWORD}"),
            rate_limit_prefix=prefix,
        )
        buckets = build_token_buckets(settings)
        try:
            await buckets.take("group", rate=10.0, burst=10.0, want=3)
            assert [key async for key in admin.scan_iter(f"{prefix}tb:*")]
        finally:
            await buckets.close()


@pytest.fixture(scope="module")
def redis_over_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Pki]]:
    """A redis-server that speaks only TLS (``--port 0 --tls-port``), its certificate signed by a CA made
    with ``infra.pki``, and a password; (its port, that PKI)."""
    root = tmp_path_factory.mktemp("redis-tls")
    pki = ensure_pki(root / "tls")
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
         "--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "no",
         "--requirepass", PASSWORD, "--save", "", "--appendonly", "no", "--dir", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        context = ssl.create_default_context(cafile=str(pki.ca))
        deadline = time.monotonic() + 10
        while True:
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=1)
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.sendall(b"PING\r\n")
                    if tls.recv(64):
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port, pki
    finally:
        process.kill()
        process.wait(10)


class TestRedissWithTheDeploymentsCa:
    async def test_the_limiter_counts_over_tls_trusting_the_ca(self, redis_over_tls, tmp_path: Path):
        port, pki = redis_over_tls
        settings = Settings(
            data_dir=tmp_path,
            redis_url=f"rediss://:{PASSWORD}@127.0.0.1:{port}/0",
            redis_tls_ca=str(pki.ca),
            rate_limit_prefix=f"qc:test:tls:{secrets.token_hex(4)}:",
        )
        limiter = build_limiter(settings)
        try:
            assert (await limiter.acquire("bucket", limit=1)).allowed
            assert not (await limiter.acquire("bucket", limit=1)).allowed
            assert await limiter.status() == "ok"
        finally:
            await limiter.close()

    async def test_without_the_ca_the_servers_certificate_is_not_trusted(self, redis_over_tls, tmp_path):
        port, _ = redis_over_tls
        settings = Settings(data_dir=tmp_path, redis_url=f"rediss://:{PASSWORD}@127.0.0.1:{port}/0")
        limiter = build_limiter(settings)
        try:
            assert await limiter.status() == "degraded"
        finally:
            await limiter.close()

    async def test_a_plaintext_client_gets_nothing(self, redis_over_tls, tmp_path):
        port, _ = redis_over_tls
        settings = Settings(data_dir=tmp_path, redis_url=f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
        limiter = build_limiter(settings)
        try:
            assert await limiter.status() == "degraded"
        finally:
            await limiter.close()
