"""URLs as they may be shown: a connection URL's password never reaches a log line or a ``repr``."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

MASK = "***"


def masked(url: str) -> str:
    """``url`` with the password of its userinfo replaced by ``***`` (``redis://:***@host:6379/0``,
    ``postgresql+asyncpg://qc:***@db/qc``); a URL without one is returned as it is. Several URLs joined by
    commas (NATS seeds) are masked one by one. Something that does not parse is masked whole, rather
    than risk showing a password it may hold."""
    if "," in url:
        return ",".join(masked(part) for part in url.split(","))
    try:
        parts = urlsplit(url.strip())
        password = parts.password
    except ValueError:
        return MASK
    if password is None and "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0] if password is not None else userinfo
    # A userinfo without a colon may be a token alone (``redis://token@host``, ``nats://token@host``).
    shown = f"{user}:{MASK}" if password is not None else MASK
    return urlunsplit(parts._replace(netloc=f"{shown}@{hostport}"))
