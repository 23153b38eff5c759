"""A NATS cluster in operator mode (decentralised JWT auth, ``tests/fixtures/nats_accounts.py``): QueueCore's
JetStream engine signs in with a creds file (``QUEUECORE_NATS_CREDS``: a user JWT and its nkey seed) and
works; a client without credentials, or with a user the servers cannot trust (revoked, signed by a key
that is not its account's, of an account they do not know, expired, or proving a JWT with another seed),
is refused. Real servers, one 3-node cluster for the module; the password-and-TLS deployment is
tests/infra/test_nats_security.py."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nacl.signing
import nats
import nats.errors
import nkeys
import pytest

from app.main import build_log_engine
from app.settings import JetStreamSettings, LogEngineKind, Settings
from app.stores.log.jetstream import JetStreamConfig, JetStreamLogEngine, NatsLink
from app.stores.log.protocol import RecordIn, TopicLogConfig
from infra.nats_cluster import NatsCluster
from tests.fixtures.nats import connect_once, free_base_port, round_trip
from tests.fixtures.nats_accounts import HEADER, NKey, Operator, decode_claims


@dataclass(frozen=True)
class Deployment:
    cluster: NatsCluster
    operator: Operator
    # Creds files by name: "engine" (the application account's user) and the refused ones.
    creds: dict[str, Path]

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(self.cluster.url.split(","))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("nats-operator")
    operator = Operator.create("queuecore-test")
    app = operator.account("QUEUECORE", jetstream=True)
    engine, revoked = app.user("engine"), app.user("revoked")
    app.revoke(revoked)  # before the account JWT is preloaded
    elsewhere = Operator.create("elsewhere").account("QUEUECORE", jetstream=True)
    users = {
        "engine": engine,
        "revoked": revoked,
        # Names QUEUECORE as its issuer, signed by a key that is not the account's.
        "forged": app.user("forged", signer=NKey.create(nkeys.PREFIX_BYTE_ACCOUNT)),
        # A user of another operator's account: these servers know neither.
        "stranger": elsewhere.user("engine"),
        "expired": app.user("expired", issued_at=int(time.time()) - 120, expires=int(time.time()) - 60),
    }
    creds = {name: user.write_creds(root / "creds" / f"{name}.creds") for name, user in users.items()}
    # The engine's JWT proven with another user's seed: the server's nonce is signed by the wrong key.
    creds["stolen-jwt"] = engine.write_creds(root / "creds" / "stolen-jwt.creds", seed=revoked.seed)
    cluster = NatsCluster(root, base_port=free_base_port(), operator_config=operator.server_config())
    cluster.start(60)
    try:
        yield Deployment(cluster, operator, creds)
    finally:
        cluster.stop()


def engine_config(deployment: Deployment, creds: Path) -> JetStreamConfig:
    return JetStreamConfig(servers=deployment.servers, link=NatsLink(creds=str(creds)))


@pytest.fixture
async def engine(deployment: Deployment) -> AsyncIterator[JetStreamLogEngine]:
    engine = JetStreamLogEngine(engine_config(deployment, deployment.creds["engine"]))
    await asyncio.wait_for(engine.start(), 30)
    try:
        yield engine
    finally:
        await engine.close()


async def connect(deployment: Deployment, **options: object) -> nats.NATS:
    return await connect_once(deployment.cluster.url, **options)


class TestTheEngineWithACredsFile:
    async def test_creates_a_topic_appends_and_reads(self, engine):
        await round_trip(engine, "top_creds")

    async def test_describe_names_each_copys_zone_as_an_application_accounts_user(self, engine, deployment):
        # Zones come from $SYS.REQ.ACCOUNT.PING.STATZ (app/stores/log/jetstream/zones.py), which an
        # operator-mode account's user may ask too: it is not the system account's.
        topic = f"top_zones_{secrets.token_hex(4)}"
        await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))
        [described] = await engine.describe_partitions(topic, 1)
        zones = {f"n{node.index}": node.zone for node in deployment.cluster.nodes}
        assert {r.server: r.zone for r in described.replicas} == zones
        await engine.delete_topic(topic)

    async def test_the_settings_reach_the_connection(self, deployment, tmp_path):
        # QUEUECORE_NATS_CREDS → Settings.nats_creds → NatsLink.creds → nats-py's user_credentials.
        settings = Settings(
            data_dir=tmp_path,
            log_engine=LogEngineKind.jetstream,
            nats_url=deployment.cluster.url,
            nats_creds=str(deployment.creds["engine"]),
            jetstream=JetStreamSettings(),
        )
        engine = build_log_engine(settings)
        assert isinstance(engine, JetStreamLogEngine)
        assert engine.config.link.connect_options() == {"user_credentials": str(deployment.creds["engine"])}
        await asyncio.wait_for(engine.start(), 30)
        try:
            topic = f"top_creds_{secrets.token_hex(4)}"
            await engine.create_topic(topic, 1, TopicLogConfig(replicas=3))
            assert await engine.append(topic, {0: [RecordIn(b"x")]}) == {0: 0}
            assert [r.value for r in await engine.read(topic, 0, 0)] == [b"x"]
            await engine.delete_topic(topic)
        finally:
            await engine.close()

    @pytest.mark.parametrize("name", ["revoked", "forged", "stranger", "stolen-jwt"])
    async def test_a_refused_user_is_logged_once_and_start_does_not_hang(self, deployment, name, caplog):
        caplog.set_level(logging.INFO, logger="app.stores.log.jetstream.engine")
        engine = JetStreamLogEngine(engine_config(deployment, deployment.creds[name]))
        try:
            # Refused at once (nats-py alone would retry for ever): the engine starts, serving 503s.
            await asyncio.wait_for(engine.start(), 10)
            assert engine.nc is None
            await asyncio.sleep(2.5)  # two more tries in the background, refused again
            assert engine.nc is None
            refusals = [r for r in caplog.records if "refused this process's credentials" in r.getMessage()]
            assert len(refusals) == 1 and refusals[0].levelno == logging.ERROR
            seed = deployment.creds[name].read_text().split("-----BEGIN USER NKEY SEED-----\n")[1][:58]
            assert seed.startswith("SU") and seed not in caplog.text
        finally:
            await asyncio.wait_for(engine.close(), 10)

    @pytest.mark.parametrize(
        "content",
        [None, "", "SUAEJVWR2EI5NZECW736OBVYV3YTSTNTUWVUJIBFKONGQ2WPLOSBQK7LD4\n"],
        ids=["missing", "empty", "a-seed-alone"],
    )
    async def test_a_creds_file_that_cannot_sign_in_is_said_once_and_start_does_not_hang(
        self, deployment, tmp_path, content, caplog
    ):
        # nats-py would retry a missing file for ever inside the first connect (holding the server's
        # startup) and fail on a malformed one with a TypeError: the engine checks the file first.
        caplog.set_level(logging.INFO, logger="app.stores.log.jetstream.engine")
        path = tmp_path / "queuecore.creds"
        if content is not None:
            path.write_text(content)
        engine = JetStreamLogEngine(engine_config(deployment, path))
        try:
            await asyncio.wait_for(engine.start(), 10)
            assert engine.nc is None
            await asyncio.sleep(2.5)  # checked again in the background
            assert engine.nc is None
            said = [r for r in caplog.records if "QUEUECORE_NATS_CREDS" in r.getMessage()]
            assert len(said) == 1 and said[0].levelno == logging.ERROR, caplog.text
            assert str(path) in said[0].getMessage() and "SUAEJ" not in caplog.text
        finally:
            await asyncio.wait_for(engine.close(), 10)


class TestClientsAreRefused:
    async def test_without_credentials(self, deployment):
        with pytest.raises(nats.errors.Error, match="Authorization"):
            await connect(deployment)

    @pytest.mark.parametrize(
        "name",
        [
            "revoked",  # the account JWT lists the user as revoked
            "forged",  # the JWT's signature is not its issuer's
            "stranger",  # its account is another operator's
            "expired",  # past its exp
            "stolen-jwt",  # a valid JWT, the nonce signed with a seed that is not its subject's
        ],
    )
    async def test_with_a_user_they_cannot_trust(self, deployment, name):
        with pytest.raises(nats.errors.Error, match="Authorization"):
            await connect(deployment, user_credentials=str(deployment.creds[name]))

    async def test_a_user_and_password_mean_nothing_here(self, deployment):
        with pytest.raises(nats.errors.Error, match="Authorization"):
            await connect(deployment, user="queuecore", password="queuecore")

    async def test_the_control_the_engines_user_is_let_in_to_its_account(self, deployment):
        nc = await connect(deployment, user_credentials=str(deployment.creds["engine"]))
        try:
            info = await nc.jetstream().account_info()
            assert info.limits.max_storage == -1  # JetStream on, as the account JWT says
        finally:
            await nc.close()


class TestTheTokens:
    """What the fixture makes is what nats-io/jwt makes: checked here so a server's refusal above is
    the refusal meant, not a malformed token."""

    def test_each_jwt_is_signed_by_its_issuer_with_a_content_hash_as_its_id(self, deployment):
        account = deployment.operator.accounts[1]
        user_jwt = deployment.creds["engine"].read_text().splitlines()[1]
        for token, issuer in (
            (deployment.operator.jwt(), deployment.operator.key.public_key),
            (account.jwt(), deployment.operator.key.public_key),
            (user_jwt, account.public_key),
        ):
            header, payload, signature = token.split(".")
            assert json.loads(_unb64(header)) == HEADER
            claims = decode_claims(token)
            assert claims["iss"] == issuer and claims["nats"]["version"] == 2
            verified = _verify_key(issuer).verify(f"{header}.{payload}".encode(), _unb64(signature))
            assert verified == f"{header}.{payload}".encode()
            assert len(claims["jti"]) == 52  # base32 of SHA-512/256, unpadded

    def test_the_creds_file_is_the_user_jwt_and_its_seed_owner_only(self, deployment):
        path = deployment.creds["engine"]
        text = path.read_text()
        assert path.stat().st_mode & 0o077 == 0
        lines = text.splitlines()
        assert lines[0] == "-----BEGIN NATS USER JWT-----" and lines[2] == "------END NATS USER JWT------"
        seed = text.split("-----BEGIN USER NKEY SEED-----\n")[1].split("\n")[0]
        assert "------END USER NKEY SEED------" in text
        public = nkeys.from_seed(seed.encode()).public_key.decode()
        assert decode_claims(lines[1])["sub"] == public and public.startswith("U")


def _verify_key(public_key: str) -> nacl.signing.VerifyKey:
    # A public nkey: base32 of its role's prefix byte, the ed25519 key and a CRC-16 (nkeys 0.2.1 signs,
    # but cannot verify with a public key alone).
    return nacl.signing.VerifyKey(base64.b32decode(public_key)[1:33])


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
