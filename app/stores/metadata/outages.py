"""What a lost, refused or shutting-down database looks like through the drivers: such an error is an outage
(``StoreUnavailable``, 503, retried by clients), never a bad statement (500)."""

from __future__ import annotations

from sqlalchemy import exc

# SQLSTATE classes: 08 connection exception, 53 insufficient resources (too many connections), 57 operator
# intervention (the server is shutting down, an administrator ended the session, it cannot take
# connections yet), 58 system error (an I/O error on the server).
OUTAGE_CLASSES = frozenset({"08", "53", "57", "58"})
# Errors that never reached a database, whatever the driver.
TRANSPORT = (OSError, ConnectionError, TimeoutError)


def is_driver_outage(error: BaseException) -> bool:
    """A raw driver error (asyncpg, sqlite3) meaning the database is gone or refusing work."""
    if isinstance(error, TRANSPORT):
        return True
    module = type(error).__module__
    if module.startswith("asyncpg"):
        # Client-side and connection errors carry no SQLSTATE.
        state = getattr(error, "sqlstate", None)
        return state is None or str(state)[:2] in OUTAGE_CLASSES
    if module.startswith("sqlite3"):
        return type(error).__name__ == "OperationalError"  # as the pool's: locked or unreadable
    return False


def is_outage(error: BaseException) -> bool:
    """An error out of SQLAlchemy (or under it) meaning the database is gone or refusing work. Postgres
    restarting answers new connections 'the database system is shutting down' (57P03), which SQLAlchemy
    wraps as a plain ``DBAPIError``: its SQLSTATE, not its class, says it is an outage."""
    if isinstance(error, (*TRANSPORT, exc.OperationalError, exc.InterfaceError)):
        return True
    if isinstance(error, exc.DBAPIError):
        if error.connection_invalidated:
            return True
        state = getattr(error.orig, "sqlstate", None)
        return state is not None and str(state)[:2] in OUTAGE_CLASSES
    return False
