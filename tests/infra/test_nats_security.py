"""A secured NATS cluster (``NatsSecurity``: a user and password, TLS on client and route connections under a
CA ``infra.pki`` makes): QueueCore's JetStream engine connects with the credentials and works; a client
without them, or without TLS, or not trusting the deployment's CA, is refused; so is a route without a
certificate the CA signed. Real servers, one 3-node cluster for the module (the session's cluster stays
open, as the rest of the suite expects)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import nats
import nats.errors
import pytest
from cryptography import x509

from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, NatsLink
from app.stores.log.protocol import RecordIn, TopicLogConfig
from infra.nats_cluster import NatsCluster, NatsSecurity
from infra.pki import ensure_pki
from tests.fixtures.nats import connect_once, free_base_port, round_trip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    root = tmp_path_factory.mktemp("nats-secured")
    security = NatsSecurity.ensure(root / "secrets")
    cluster = NatsCluster(root, base_port=free_base_port(), security=security).start(60)
    try:
        yield cluster
    finally:
        cluster.stop()


def link_of(cluster: NatsCluster) -> NatsLink:
    assert cluster.security is not None
    return NatsLink(
        user=cluster.security.user, password=cluster.security.password, tls_ca=str(cluster.security.pki.ca)
    )


@pytest.fixture
async def engine(secured: NatsCluster) -> AsyncIterator[JetStreamLogEngine]:
    config = JetStreamConfig(servers=tuple(secured.url.split(",")), link=link_of(secured))
    engine = JetStreamLogEngine(config)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()


async def connect(cluster: NatsCluster, **options: object) -> nats.NATS:
    return await connect_once(cluster.url, **options)


def server_info(port: int) -> dict[str, object]:
    """The INFO line a NATS port greets any TCP client with (before TLS)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        line = conn.makefile("rb").readline()
    assert line.startswith(b"INFO ")
    return dict(json.loads(line[5:]))


class TestTheEngineOnASecuredCluster:
    async def test_creates_a_topic_appends_and_reads_with_the_credentials_and_the_ca(self, engine):
        await round_trip(engine, "top_links")
        assert engine.nc is not None and engine.nc.connected_url is not None
        # The connection really is TLS (nats-py upgraded it because the server requires it).
        transport = engine.nc._transport  # nothing public says
        assert transport is not None and transport._io_writer.get_extra_info("ssl_object") is not None

    async def test_describe_names_each_copys_zone_as_the_deployments_user(self, engine, secured):
        # The deployment's one user is an ordinary account's, not the system account's: the servers' zone
        # tags still come (app/stores/log/jetstream/zones.py).
        topic = f"top_zones_{secrets.token_hex(4)}"
        await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))
        [described] = await engine.describe_partitions(topic, 1)
        zones = {f"n{node.index}": node.zone for node in secured.nodes}
        assert {r.server: r.zone for r in described.replicas} == zones
        await engine.delete_topic(topic)

    async def test_a_wrong_password_is_logged_once_and_start_does_not_hang(self, secured, caplog):
        caplog.set_level(logging.INFO, logger="app.stores.log.jetstream.engine")
        link = replace(link_of(secured), password="not-the-password")
        engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(secured.url.split(",")), link=link))
        try:
            # Refused at once (nats-py alone would retry for ever): the engine starts, serving 503s.
            await asyncio.wait_for(engine.start(), 10)
            assert engine.nc is None
            await asyncio.sleep(2.5)  # two more tries in the background, refused again
            assert engine.nc is None
            refusals = [r for r in caplog.records if "refused this process's credentials" in r.getMessage()]
            assert len(refusals) == 1 and refusals[0].levelno == logging.ERROR
            assert "not-the-password" not in caplog.text
        finally:
            await asyncio.wait_for(engine.close(), 10)

    async def test_a_ca_that_did_not_sign_the_servers_is_a_refusal_too(self, secured, tmp_path, caplog):
        caplog.set_level(logging.INFO, logger="app.stores.log.jetstream.engine")
        link = replace(link_of(secured), tls_ca=str(ensure_pki(tmp_path / "other").ca))
        engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(secured.url.split(",")), link=link))
        try:
            await asyncio.wait_for(engine.start(), 10)
            assert engine.nc is None
            assert "refused this process's credentials or TLS (SSLCertVerificationError" in caplog.text
        finally:
            await asyncio.wait_for(engine.close(), 10)


class TestClientsAreRefused:
    async def test_without_credentials(self, secured):
        context = ssl.create_default_context(cafile=str(secured.security.pki.ca))
        with pytest.raises(nats.errors.Error, match="Authorization"):
            await connect(secured, tls=context)

    async def test_with_a_wrong_password(self, secured):
        context = ssl.create_default_context(cafile=str(secured.security.pki.ca))
        with pytest.raises(nats.errors.Error, match="Authorization"):
            await connect(secured, tls=context, user=secured.security.user, password="guess")

    async def test_with_credentials_but_without_tls(self, secured):
        # The server says TLS is required (nats-py then tries TLS with the system's CAs, which fails)...
        assert server_info(secured.nodes[0].client_port)["tls_required"] is True
        with pytest.raises((ssl.SSLError, nats.errors.Error)):
            await connect(secured, user=secured.security.user, password=secured.security.password)

    def test_a_plaintext_connect_with_the_password_is_refused_by_the_server(self, secured):
        # ...and a client that ignores that and sends its CONNECT in the clear is refused by the server.
        node = secured.nodes[0]
        with socket.create_connection(("127.0.0.1", node.client_port), timeout=5) as conn:
            reader = conn.makefile("rb")
            assert reader.readline().startswith(b"INFO ")
            connect_line = {"user": secured.security.user, "pass": secured.security.password, "verbose": True}
            conn.sendall(b"CONNECT " + json.dumps(connect_line).encode() + b"\r\nPING\r\n")
            answer = reader.read(4096)
        assert b"+OK" not in answer and b"PONG" not in answer
        assert b"TLS Required" in answer or answer == b""

    async def test_with_credentials_but_not_trusting_the_deployments_ca(self, secured):
        # The system's CAs only: the servers' certificate is signed by nobody this client trusts.
        with pytest.raises((ssl.SSLCertVerificationError, nats.errors.Error)):
            await connect(
                secured,
                tls=ssl.create_default_context(),
                user=secured.security.user,
                password=secured.security.password,
            )

    async def test_trusting_another_deployments_ca(self, secured, tmp_path: Path):
        other = ensure_pki(tmp_path / "other")
        with pytest.raises((ssl.SSLCertVerificationError, nats.errors.Error)):
            await connect(
                secured,
                tls=ssl.create_default_context(cafile=str(other.ca)),
                user=secured.security.user,
                password=secured.security.password,
            )


class TestRoutes:
    """Routes speak TLS from the first byte and ask for a certificate the deployment's CA signed."""

    def test_a_plaintext_route_gets_nothing_and_is_closed(self, secured):
        with socket.create_connection(("127.0.0.1", secured.nodes[0].cluster_port), timeout=10) as conn:
            conn.sendall(b'CONNECT {"name":"rogue"}\r\nPING\r\n')
            assert conn.recv(4096) == b""  # no INFO, no PONG: closed at the TLS timeout

    def test_a_route_without_a_client_certificate_fails_the_handshake(self, secured):
        context = ssl.create_default_context(cafile=str(secured.security.pki.ca))
        with socket.create_connection(("127.0.0.1", secured.nodes[0].cluster_port), timeout=10) as raw:
            tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
            # TLS 1.3: the server's refusal of a missing certificate arrives with the first read.
            with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
                tls.recv(1024)
            tls.close()

    def test_a_route_with_another_deployments_certificate_fails_the_handshake(self, secured, tmp_path):
        other = ensure_pki(tmp_path / "other")
        context = ssl.create_default_context(cafile=str(secured.security.pki.ca))
        context.load_cert_chain(other.client_cert, other.client_key)
        with socket.create_connection(("127.0.0.1", secured.nodes[0].cluster_port), timeout=10) as raw:
            tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
            with pytest.raises((ssl.SSLError, ConnectionError)):
                if not tls.recv(1024):
                    raise ConnectionError("closed")
            tls.close()

    def test_the_deployments_own_certificate_is_let_in(self, secured):
        # The control: the same handshake with the deployment's client certificate completes.
        pki = secured.security.pki
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(pki.client_cert, pki.client_key)
        raw = socket.create_connection(("127.0.0.1", secured.nodes[0].cluster_port), timeout=10)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.recv(4096).startswith(b"INFO ")


class TestThePki:
    def test_the_server_certificate_names_loopback_and_is_signed_by_the_ca(self, secured):
        pki = secured.security.pki
        cert = x509.load_pem_x509_certificate(pki.server_cert.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1", "::1"}
        assert "localhost" in names.get_values_for_type(x509.DNSName)
        ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
        cert.verify_directly_issued_by(ca)

    def test_secrets_are_owner_only_and_kept_across_restarts(self, secured):
        security = secured.security
        root = security.pki.root.parent
        for path in (root / "nats.password", security.pki.root / "ca.key", security.pki.server_key):
            assert path.stat().st_mode & 0o077 == 0, path
        for node in secured.nodes:
            assert node.config.stat().st_mode & 0o077 == 0
        again = NatsSecurity.ensure(root)
        assert (
            again.password == security.password and again.pki.ca.read_bytes() == security.pki.ca.read_bytes()
        )
        assert security.password not in repr(security)


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A second secured cluster whose client port asks for a certificate too (``verify_clients``)."""
    root = tmp_path_factory.mktemp("nats-mutual")
    security = replace(NatsSecurity.ensure(root / "secrets"), verify_clients=True)
    cluster = NatsCluster(root, base_port=free_base_port(), security=security).start(60)
    try:
        yield cluster
    finally:
        cluster.stop()


class TestClientCertificates:
    """With ``verify_clients`` the client port asks for a certificate too: the engine presents the
    deployment's (``QUEUECORE_NATS_TLS_CERT``/``_KEY``); without one it is refused."""

    async def test_the_engine_with_the_client_certificate_works(self, mutual):
        pki = mutual.security.pki
        link = replace(link_of(mutual), tls_cert=str(pki.client_cert), tls_key=str(pki.client_key))
        engine = JetStreamLogEngine(JetStreamConfig(servers=tuple(mutual.url.split(",")), link=link))
        await asyncio.wait_for(engine.start(), 30)
        try:
            topic = f"top_links_{secrets.token_hex(4)}"
            await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))
            assert await engine.append(topic, {0: [RecordIn(b"x")]}) == {0: 0}
            assert [r.value for r in await engine.read(topic, 0, 0)] == [b"x"]
        finally:
            await engine.close()

    async def test_without_a_client_certificate_the_password_is_not_enough(self, mutual):
        context = ssl.create_default_context(cafile=str(mutual.security.pki.ca))
        with pytest.raises((ssl.SSLError, nats.errors.Error, ConnectionError)):
            nc = await connect(
                mutual, tls=context, user=mutual.security.user, password=mutual.security.password
            )
            # TLS 1.3 reports a missing client certificate after the handshake: at the first exchange.
            await nc.flush(timeout=3)
