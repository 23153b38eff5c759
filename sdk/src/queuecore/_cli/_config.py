"""The CLI's config file: saved contexts (a server and a key under a name) and which one is current.

Where: ``$QUEUECORE_CONFIG``, else ``$XDG_CONFIG_HOME/queuecore/config.json``, else
``~/.config/queuecore/config.json``. The file holds API keys, so it is created with mode 0600 (through
``os.open``, never widened by the umask or a window between create and chmod) in a 0700 directory and
replaced atomically; an existing file readable by others gets a warning each time it is read.

Format::

    {"current": "prod", "contexts": {"prod": {"baseUrl": "https://...", "apiKey": "pq_live_sk_..."}}}

Precedence when the CLI builds its client: ``--api-key``/``--base-url`` > ``--context NAME`` > the
``QUEUECORE_API_KEY``/``QUEUECORE_BASE_URL`` variables > the current context > the SDK's defaults.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import UsageError
from ._output import warn

__all__ = ["Config", "Context", "config_path", "mask_key"]


def config_path() -> Path:
    """The config file's path (it may not exist yet)."""
    explicit = os.environ.get("QUEUECORE_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "queuecore" / "config.json"


def mask_key(key: str) -> str:
    """A key as it may be shown: its prefix and last four characters (``pq_test_sk_…a1b2``)."""
    prefix = key[:11] if key.startswith(("pq_live_sk_", "pq_test_sk_")) else ""
    return f"{prefix}…{key[-4:]}" if len(key) >= 12 else "…"


@dataclass
class Context:
    """A saved server and key."""

    name: str
    base_url: str | None
    api_key: str | None


@dataclass
class Config:
    """The config file's contents."""

    path: Path
    current: str | None = None
    contexts: dict[str, Context] = field(default_factory=dict)

    @classmethod
    def load(cls) -> Config:
        """Read the config file (an empty config when there is none)."""
        path = config_path()
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            return cls(path)
        if mode & 0o077:
            warn(
                f"{path} holds API keys and is readable by others (mode {stat.S_IMODE(mode):o}); "
                f"run: chmod 600 {path}"
            )
        try:
            raw = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the config file {path}: {exc}") from None
        if not isinstance(raw, dict):
            raise UsageError(f"the config file {path} is not a JSON object")
        contexts: dict[str, Context] = {}
        for name, entry in (raw.get("contexts") or {}).items():
            if isinstance(entry, dict):
                contexts[name] = Context(name, entry.get("baseUrl"), entry.get("apiKey"))
        current = raw.get("current")
        return cls(path, current if isinstance(current, str) else None, contexts)

    def get(self, name: str) -> Context:
        """The named context, or a usage error listing the known ones."""
        try:
            return self.contexts[name]
        except KeyError:
            known = ", ".join(sorted(self.contexts)) or "none saved; see queuecore context add"
            raise UsageError(f"no context named {name!r} (known: {known})") from None

    def save(self) -> None:
        """Write the file atomically with mode 0600."""
        payload: dict[str, Any] = {
            "current": self.current,
            "contexts": {
                c.name: {k: v for k, v in (("baseUrl", c.base_url), ("apiKey", c.api_key)) if v is not None}
                for c in self.contexts.values()
            },
        }
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump(payload, out, indent=2)
            out.write("\n")
        os.replace(temporary, self.path)
