"""``JetStreamConfig``: the replicated engine's knobs, frozen, built once from the settings (``app.main``).

As for the local engine (``app.stores.log.local.config``), the engine never reads the settings: whoever
builds it (the app's lifespan, a test, a benchmark) hands it this value.

``NatsLink`` is how the engine proves who it is to the cluster and checks the cluster is who it says: a
user and password or a creds file (JWT and nkey), and TLS with the deployment's CA (and, when the servers
ask for one, a client certificate). Its password never appears in its ``repr``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The blocks of a creds file (``nsc generate creds``; nats-io/jwt ``FormatUserConfig``): what nats-py reads.
_CREDS_JWT = "BEGIN NATS USER JWT"
_CREDS_SEED = "BEGIN USER NKEY SEED"


@dataclass(frozen=True, slots=True)
class NatsLink:
    """Credentials and TLS of the engine's NATS connection; all empty: an open cluster (the tests')."""

    user: str = ""
    password: str = field(default="", repr=False)
    # A NATS creds file (user JWT and nkey seed), instead of user and password.
    creds: str = ""
    # TLS: the CA that signed the servers' certificates; a client certificate and key when they ask.
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    # The name to check the servers' certificates against, when it is not the seed URL's host.
    tls_hostname: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca or self.tls_cert)

    def tls_context(self) -> ssl.SSLContext | None:
        """A client context that trusts ``tls_ca`` only (the system's CAs without one), checks hostnames,
        and presents the client certificate when given; None without TLS."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key or None)
        return context

    def creds_problem(self) -> str | None:
        """Why ``creds`` cannot sign in (missing, unreadable, not a user JWT and seed), or None (also without
        one). nats-py would retry a missing file for ever inside its first connect, and fail on a malformed
        one with a TypeError: the engine asks this first. The answer names the file, never its content."""
        if not self.creds:
            return None
        try:
            lines = Path(self.creds).read_text().splitlines()
        except FileNotFoundError:
            return f"QUEUECORE_NATS_CREDS {self.creds}: no such file"
        except (OSError, UnicodeDecodeError) as exc:
            return f"QUEUECORE_NATS_CREDS {self.creds}: cannot be read ({type(exc).__name__})"
        after = {lines[i].strip(): lines[i + 1].strip() for i in range(len(lines) - 1) if "BEGIN" in lines[i]}
        jwt = next((value for key, value in after.items() if _CREDS_JWT in key), "")
        seed = next((value for key, value in after.items() if _CREDS_SEED in key), "")
        if jwt.count(".") != 2 or not seed.startswith("SU"):
            return (
                f"QUEUECORE_NATS_CREDS {self.creds}: not a creds file (a NATS user JWT and its user nkey seed, "
                "as `nsc generate creds` writes)"
            )
        return None

    def connect_options(self) -> dict[str, Any]:
        """The keyword arguments of ``nats.connect`` for these credentials and TLS."""
        options: dict[str, Any] = {}
        if self.user:
            options.update(user=self.user, password=self.password)
        if self.creds:
            options["user_credentials"] = self.creds
        context = self.tls_context()
        if context is not None:
            options["tls"] = context
            if self.tls_hostname:
                options["tls_hostname"] = self.tls_hostname
        return options


@dataclass(frozen=True, slots=True)
class JetStreamConfig:
    """What the engine needs: where the cluster is, how it keeps its promises, and how it connects."""

    servers: tuple[str, ...]
    default_replicas: int = 3
    request_timeout_seconds: float = 5.0
    # A commit record older than this is rolled forward by any node (its publisher is presumed gone).
    recover_after_seconds: float = 10.0
    recovery_interval_seconds: float = 2.0
    # JetStream's dedup window on partition streams: what makes a roll-forward apply each part once.
    duplicate_window_seconds: float = 3600.0
    # The server tag that names a server's availability zone (``az:<zone>``; see ``zones``).
    zone_tag: str = "az"
    # Reads asking this many records or more go over the engine's bulk read links (``bulk_link``), their
    # replies parsed in bulk; 0: never (every read through nats-py).
    bulk_read_min_records: int = 1000
    link: NatsLink = field(default_factory=NatsLink)
