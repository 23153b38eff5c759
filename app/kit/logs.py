"""Structured JSON logs: one object per line, secrets never included."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import orjson

# uvicorn adds an ANSI-coloured copy of its messages; a JSON line has no use for it.
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


# A credential in a query string: uvicorn logs each WebSocket upgrade with its path and query, and a
# push connection may authenticate with ``?token=`` (a WebSocket token, valid for minutes).
_QUERY_SECRET = re.compile(r"([?&](?:token|access_token|api_key|key)=)[^&\s\"']+", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the values of credential query parameters replaced by ``[redacted]``."""
    return _QUERY_SECRET.sub(r"\1[redacted]", text) if "=" in text else text


class JsonFormatter(logging.Formatter):
    """Formats a record and its ``extra=`` fields as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str = "INFO") -> None:
    """Route every logger (ours, uvicorn's) to stderr as JSON lines."""
    import time

    JsonFormatter.converter = time.gmtime
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Our middleware logs every request; uvicorn's access log would say it twice, without the request id.
    logging.getLogger("uvicorn.access").disabled = True
