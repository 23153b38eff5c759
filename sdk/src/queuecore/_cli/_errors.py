"""Exit codes and the usage error: what ``main`` turns every outcome into."""

from __future__ import annotations

__all__ = [
    "EXIT_API",
    "EXIT_CONNECTION",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
]

EXIT_OK = 0
EXIT_API = 1
"""The API refused the call (the message names its request id)."""
EXIT_USAGE = 2
"""Bad arguments or input; nothing was sent (or, for a malformed key, nothing could be)."""
EXIT_CONNECTION = 3
"""The server could not be reached, after retries."""
EXIT_INTERRUPTED = 130
"""128 + SIGINT: Ctrl-C. A consumer stopped gracefully by a signal exits 128 + its number (143 for SIGTERM)."""


class UsageError(Exception):
    """Bad arguments or input: exit 2."""
