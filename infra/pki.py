"""A deployment's own small PKI, made with ``cryptography``: one CA, and certificates it signs for the NATS
servers (server and client use: the routes between them are mutual TLS) and for QueueCore's processes (a
client certificate, which the servers may ask for).

Used by ``infra/nats_cluster.py`` (a secured cluster) and so by ``make cluster`` and the tests. Files, all
PEM, private keys 0600::

    ca.pem ca.key                 the CA (10 years); only ca.pem is handed to clients
    server.pem server.key         SANs 127.0.0.1, ::1, localhost and any given hosts (825 days)
    client.pem client.key         a client certificate for QueueCore's API processes (825 days)

Not a production CA: there is no revocation list and the CA key sits beside the certificates. Rotation is
making a new directory and restarting onto it (docs/operations.md, "Authenticated and encrypted links").
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825  # the longest lifetime browsers and most TLS stacks accept for a leaf
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Pki:
    """Where a deployment's CA and certificates are (see the module docstring)."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.root / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.root / "client.key"

    def exists(self) -> bool:
        paths = (self.ca, self.server_cert, self.server_key, self.client_cert, self.client_key)
        return all(path.exists() for path in paths)


def ensure_pki(root: Path, hosts: tuple[str, ...] = (), name: str = "queuecore") -> Pki:
    """The PKI under ``root``, made when missing (kept otherwise, so a restart keeps trusting it)."""
    pki = Pki(Path(root))
    if pki.exists():
        return pki
    pki.root.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} deployment CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.root / "ca.key", ca_key)
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    server_names = tuple(dict.fromkeys((*LOOPBACK, *hosts)))
    _issue(pki.server_cert, pki.server_key, f"{name} nats server", server_names, ca_cert, ca_key, now)
    _issue(pki.client_cert, pki.client_key, f"{name} client", (), ca_cert, ca_key, now)
    return pki


def _issue(
    cert_path: Path,
    key_path: Path,
    common_name: str,
    names: tuple[str, ...],
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # Both uses: a NATS server is a client of the other servers on its routes.
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """A private key, readable by its owner only from the moment it exists."""
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
