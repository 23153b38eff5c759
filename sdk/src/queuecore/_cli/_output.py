"""What the CLI writes: JSON lines on stdout, messages in the ``-o`` formats, tables, errors and progress
on stderr.

stdout carries results only, so ``| jq`` always works; everything for a person (progress, summaries,
warnings, errors) goes to stderr. Colour is used only on a terminal and never when ``NO_COLOR`` is set
(https://no-color.org).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import IO, Any

from .._models import BaseModel

__all__ = [
    "MessagePrinter",
    "Progress",
    "colour_enabled",
    "emit",
    "emit_model",
    "error",
    "listing",
    "table",
    "warn",
    "wire",
]

_PROGRESS_EVERY = 0.5
_BAR_WIDTH = 30


def emit(payload: Any, out: IO[str] | None = None) -> None:
    """One compact JSON line."""
    (out or sys.stdout).write(json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n")


def wire(model: BaseModel) -> Any:
    """A model in the API's wire form (camelCase, no unset fields)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def emit_model(model: BaseModel, out: IO[str] | None = None) -> None:
    """A model as one JSON line, in the API's wire form."""
    emit(model.to_wire(), out)


def error(text: str) -> None:
    """``queuecore: error: ...`` on stderr."""
    sys.stderr.write(f"queuecore: error: {text}\n")
    sys.stderr.flush()


def warn(text: str) -> None:
    """``queuecore: warning: ...`` on stderr."""
    sys.stderr.write(f"queuecore: warning: {text}\n")
    sys.stderr.flush()


def colour_enabled(stream: IO[str]) -> bool:
    """ANSI colour only on a terminal, and never with ``NO_COLOR`` set (to anything)."""
    return "NO_COLOR" not in os.environ and stream.isatty()


class _Palette:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)


class MessagePrinter:
    """Prints messages (stored or delivered) in one of the ``-o`` formats:

    - ``json``: the message as one JSON line, in wire form (the default off a terminal);
    - ``data``: only its ``data``, one JSON line;
    - ``raw``: a string ``data`` as-is (no quotes, for ``kcat``-style piping), anything else as JSON;
    - ``human``: ``topic/partition@offset``, key, time, attempt and headers on one line, then the data:
      on the same line when short, pretty-printed below it when not.
    """

    def __init__(self, output_format: str, out: IO[str] | None = None) -> None:
        self.format = output_format
        self.out = out or sys.stdout
        self.palette = _Palette(output_format == "human" and colour_enabled(self.out))

    def print(self, message: BaseModel) -> None:
        """Print one message and flush (a follower sees it at once)."""
        payload = message.to_wire()
        if self.format == "json":
            emit(payload, self.out)
        elif self.format == "data":
            emit(payload.get("data"), self.out)
        elif self.format == "raw":
            data = payload.get("data")
            if isinstance(data, str):
                self.out.write(data + "\n")
            else:
                emit(data, self.out)
        else:
            self.out.write(self._human(payload))
        self.out.flush()

    def _human(self, payload: dict[str, Any]) -> str:
        p = self.palette
        head = [p.bold(f"{payload.get('topic')}/{payload.get('partition')}@{payload.get('offset')}")]
        if payload.get("key") is not None:
            head.append(p.cyan(f"key={payload['key']}"))
        head.append(p.dim(str(payload.get("timestamp", ""))))
        if "attempt" in payload:
            head.append(p.dim(f"attempt {payload['attempt']}"))
        headers = payload.get("headers") or {}
        if headers:
            head.append(p.dim(" ".join(f"{name}={value}" for name, value in headers.items())))
        line = "  ".join(head)
        compact = json.dumps(payload.get("data"), ensure_ascii=False)
        if len(line) + len(compact) < 118 and "\n" not in compact:
            return f"{line}  {p.yellow(compact)}\n"
        pretty = json.dumps(payload.get("data"), ensure_ascii=False, indent=2)
        body = "\n".join("  " + row for row in pretty.splitlines())
        return f"{line}\n{p.yellow(body)}\n"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: IO[str] | None = None) -> None:
    """A plain aligned table (numbers right-aligned), bold headers on a terminal."""
    out = out or sys.stdout
    cells = [[("" if cell is None else str(cell)) for cell in row] for row in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(row[i], (int, float)) for row in rows) and bool(rows) for i in range(len(headers))
    ]
    palette = _Palette(colour_enabled(out))

    def render(row: Sequence[str]) -> str:
        parts = [cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(row, widths, numeric)]
        return "  ".join(parts).rstrip()

    out.write(palette.bold(render(list(headers))) + "\n")
    for row in cells:
        out.write(render(row) + "\n")


def _cell(value: Any, width: int = 60) -> Any:
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str) and len(value) > width:
        return value[: width - 1] + "…"
    return value


def listing(output_format: str, columns: Sequence[tuple[str, str]], models: Iterable[BaseModel]) -> None:
    """What a list command prints: one JSON line per item (``json``: pipes, ``-o json``), streamed as the
    pages arrive; or a table (``human``: a terminal) of the wire fields ``columns`` names, as ``(HEADER,
    field)``, as ``kcat -L`` and ``nats stream ls`` do."""
    if output_format == "json":
        for model in models:
            emit_model(model)
        return
    rows = [[_cell(model.to_wire().get(name)) for _, name in columns] for model in models]
    if not rows:
        sys.stdout.write("(none)\n")
        return
    table([header for header, _ in columns], rows)


class Progress:
    """Progress of a long publish or consume on stderr.

    On a terminal: a bar (with a known total) or a counter, rewritten in place, ending with the summary.
    Off a terminal (a pipe, a log file): a plain line every half second and the summary line, which scripts
    and tests read (``published 2500 messages in 3 batches, ...``).
    """

    def __init__(self, enabled: bool, *, total: int | None = None, verb: str = "published") -> None:
        self.enabled = enabled
        self.total = total
        self.verb = verb
        self.started = time.monotonic()
        self.last = 0.0
        self.shown: tuple[int, int] | None = None
        self.tty = sys.stderr.isatty()

    def update(
        self, done: int, *, replayed: int = 0, batches: int | None = None, final: bool = False
    ) -> None:
        """Report ``done`` items so far (``replayed`` of them not written again); ``final`` for the summary."""
        if not self.enabled:
            return
        now = time.monotonic()
        if final and self.shown == (done, replayed) and not self.tty:
            return  # the last progress line already said it all
        if not final and now - self.last < _PROGRESS_EVERY:
            return
        self.last, self.shown = now, (done, replayed)
        elapsed = max(now - self.started, 1e-9)
        # A rerun: say what was written, not only what was sent.
        what = f"{done - replayed} new, {replayed} replayed" if replayed else f"{self.verb} {done} messages"
        if batches is not None:
            what += f" in {batches} batch" + ("" if batches == 1 else "es")
        text = f"{what}, {elapsed:.1f} s ({done / elapsed:.0f}/s)"
        if self.tty:
            if not final and self.total:
                filled = min(_BAR_WIDTH, _BAR_WIDTH * done // self.total)
                bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
                text = f"[{bar}] {done}/{self.total} {100 * done // self.total}%  {text}"
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
