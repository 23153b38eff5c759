"""Group filters: the grammar of a group's ``filter`` and its compiled predicate.

A filter is parsed once per group config and compiled into a ``Predicate`` that looks at a stored record's
key and headers bytes only: its value is never read or rendered, and a header's value is found in the stored
headers bytes without decoding their JSON (``header_value``)::

    filter     := or
    or         := and ( "OR" and )*
    and        := unary ( "AND" unary )*
    unary      := "NOT" unary | primary
    primary    := "(" filter ")"
                | field "=" string | field "!=" string | field "IN" "(" string ( "," string )* ")"
                | "headers:" name                       -- the header exists
                | "hasPrefix" "(" field "," string ")"
    field      := "headers." name | "key"
    name       := one or more of  A-Z a-z 0-9 _ - .
    string     := '"' ( any character but '"' and '\\' | '\\"' | '\\\\' )* '"'

Keywords (``AND OR NOT IN``) are case-insensitive; ``hasPrefix``, ``headers`` and ``key`` are not. Header
names match exactly (case-sensitive), as headers are stored. A missing header or key equals nothing and has
no prefix: ``headers.x = "v"``, ``headers.x IN (…)`` and ``hasPrefix(headers.x, …)`` are false, and
``headers.x != "v"`` (which is ``NOT headers.x = "v"``) is true.

A bad filter is ``InvalidRequest`` on ``filter`` naming the 1-based position and what was expected there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import orjson

from app.broker.errors import InvalidRequest

MAX_FILTER_CHARS = 1024
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
_KEYWORDS = ("AND", "OR", "NOT", "IN")

# A record's key and headers bytes -> whether the group receives it.
Predicate = Callable[[bytes | None, bytes | None], bool]
# What a compiled node evaluates: the key and the headers bytes as stored (``header_value`` reads them).
_Node = Callable[[bytes | None, bytes | None], bool]


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "(" ")" "," "=" "!=" "word" "string" "end"
    text: str
    at: int  # 1-based position in the filter


class FilterError(InvalidRequest):
    """A filter that does not parse: ``details`` on ``filter`` with the position and what was expected."""

    def __init__(self, at: int, expected: str, found: str) -> None:
        issue = f"at position {at}: expected {expected}, found {found}"
        super().__init__(
            f"Invalid value for 'filter': {issue}",
            details=[{"field": "filter", "issue": issue, "position": at, "expected": expected}],
        )


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "(),=":
            out.append(_Token(c, c, i + 1))
            i += 1
        elif c == "!":
            if text[i + 1 : i + 2] != "=":
                raise FilterError(i + 1, '"!="', repr(text[i : i + 2]))
            out.append(_Token("!=", "!=", i + 1))
            i += 2
        elif c == '"':
            start, i, chars = i, i + 1, []
            while True:
                if i >= n:
                    raise FilterError(start + 1, "a closing '\"'", "the end of the filter")
                c = text[i]
                if c == '"':
                    break
                if c == "\\":
                    if text[i + 1 : i + 2] not in ('"', "\\"):
                        raise FilterError(i + 1, "'\\\"' or '\\\\'", repr(text[i : i + 2]))
                    chars.append(text[i + 1])
                    i += 2
                    continue
                chars.append(c)
                i += 1
            out.append(_Token("string", "".join(chars), start + 1))
            i += 1
        elif c in _NAME_CHARS or c == ":":
            start = i
            while i < n and (text[i] in _NAME_CHARS or text[i] == ":"):
                i += 1
            out.append(_Token("word", text[start:i], start + 1))
        else:
            raise FilterError(i + 1, "an expression", repr(c))
    out.append(_Token("end", "", n + 1))
    return out


def _found(token: _Token) -> str:
    return "the end of the filter" if token.kind == "end" else repr(token.text)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    @property
    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self, kind: str, expected: str) -> _Token:
        token = self.peek
        if token.kind != kind:
            raise FilterError(token.at, expected, _found(token))
        self.i += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek
        if token.kind == "word" and token.text.upper() == word:
            self.i += 1
            return True
        return False

    def parse(self) -> _Node:
        node = self.or_()
        if self.peek.kind != "end":
            raise FilterError(self.peek.at, "AND, OR or the end of the filter", _found(self.peek))
        return node

    def or_(self) -> _Node:
        parts = [self.and_()]
        while self.keyword("OR"):
            parts.append(self.and_())
        return _chain(parts, either=True)

    def and_(self) -> _Node:
        parts = [self.unary()]
        while self.keyword("AND"):
            parts.append(self.unary())
        return _chain(parts, either=False)

    def unary(self) -> _Node:
        if self.keyword("NOT"):
            inner = self.unary()
            return lambda key, headers: not inner(key, headers)
        return self.primary()

    def primary(self) -> _Node:
        token = self.peek
        if token.kind == "(":
            self.i += 1
            node = self.or_()
            self.take(")", "')'")
            return node
        if token.kind == "word" and token.text == "hasPrefix":
            self.i += 1
            self.take("(", "'(' after hasPrefix")
            field = self.field()
            self.take(",", "','")
            prefix = self.take("string", 'a quoted string "…"').text
            self.take(")", "')'")
            return _has_prefix(field, prefix)
        if token.kind == "word" and token.text.startswith("headers:"):
            self.i += 1
            name = token.text[len("headers:") :]
            self.check_name(name, token.at + len("headers:"))
            needle = _needle(name)
            return lambda key, headers: header_value(headers, needle) is not None
        field = self.field()
        op = self.peek
        if op.kind in ("=", "!="):
            self.i += 1
            value = self.take("string", 'a quoted string "…"').text
            equal = _equals(field, value)
            if op.kind == "=":
                return equal
            return lambda key, headers: not equal(key, headers)
        if self.keyword("IN"):
            self.take("(", "'(' after IN")
            values = {self.take("string", 'a quoted string "…"').text}
            while self.peek.kind == ",":
                self.i += 1
                values.add(self.take("string", 'a quoted string "…"').text)
            self.take(")", "',' or ')'")
            return _member_of(field, frozenset(values))
        raise FilterError(op.at, "'=', '!=' or IN", _found(op))

    def field(self) -> str | None:
        """``None`` for the key, else the header's name."""
        token = self.peek
        if token.kind == "word" and token.text == "key":
            self.i += 1
            return None
        if token.kind == "word" and token.text.startswith("headers.") and ":" not in token.text:
            self.i += 1
            name = token.text[len("headers.") :]
            self.check_name(name, token.at + len("headers."))
            return name
        raise FilterError(
            token.at, 'headers.<name>, headers:<name>, key, hasPrefix(…), NOT or "("', _found(token)
        )

    @staticmethod
    def check_name(name: str, at: int) -> None:
        if not name or ":" in name:
            raise FilterError(
                at, "a header name (letters, digits, '_', '-', '.')", repr(name) if name else "nothing"
            )


def _chain(parts: list[_Node], *, either: bool) -> _Node:
    """``parts`` joined by OR (``either``) or AND, as nested two-part closures: cheaper per record than a
    generator over a list (the predicate runs once per record on the delivery path)."""
    node = parts[-1]
    for part in reversed(parts[:-1]):
        node = _or(part, node) if either else _and(part, node)
    return node


def _or(a: _Node, b: _Node) -> _Node:
    return lambda key, headers: a(key, headers) or b(key, headers)


def _and(a: _Node, b: _Node) -> _Node:
    return lambda key, headers: a(key, headers) and b(key, headers)


def _needle(name: str) -> bytes:
    """How a header's name and the start of its value look in the stored headers JSON."""
    return orjson.dumps(name) + b':"'


_HEADERS_AT = b'{"h":{'
_HEADERS_END = b'},"i":'


def header_value(raw: bytes | None, needle: bytes) -> bytes | None:
    """A header's value (UTF-8 bytes) from a record's stored headers, ``{"h": {…} | null, "i": …}`` as
    ``messages.encode_headers`` writes it (orjson: no spaces, ``"`` and ``\\`` escaped), without
    decoding the JSON: inside a JSON string every ``"`` is escaped, so ``"name":"`` can only be a key of
    the ``h`` object, which ends at the one ``},"i":`` outside a string. A value with an escape, or bytes
    of another shape, are decoded in full instead."""
    if raw is None:
        return None
    if raw.startswith(_HEADERS_AT):
        end = raw.rfind(_HEADERS_END)
        if end > 0:
            at = raw.find(needle, 5, end)
            if at < 0:
                return None
            start = at + len(needle)
            stop = raw.find(b'"', start, end)
            value = raw[start:stop]
            if stop > 0 and b"\\" not in value:
                return value
    elif raw.startswith(b'{"h":null'):
        return None
    found = (orjson.loads(raw).get("h") or {}).get(orjson.loads(needle[:-2]))
    return None if found is None else str(found).encode()


def _equals(field: str | None, value: str) -> _Node:
    raw = value.encode()
    if field is None:
        return lambda key, headers: key == raw
    needle = _needle(field)
    return lambda key, headers: header_value(headers, needle) == raw


def _member_of(field: str | None, values: frozenset[str]) -> _Node:
    raws = frozenset(v.encode() for v in values)
    if field is None:
        return lambda key, headers: key in raws
    needle = _needle(field)
    return lambda key, headers: header_value(headers, needle) in raws


def _has_prefix(field: str | None, prefix: str) -> _Node:
    raw = prefix.encode()
    if field is None:
        return lambda key, headers: key is not None and key.startswith(raw)
    needle = _needle(field)

    def node(key: bytes | None, headers: bytes | None) -> bool:
        value = header_value(headers, needle)
        return value is not None and value.startswith(raw)

    return node


def validate(text: object) -> str:
    """A filter as given, once it is found valid (``InvalidRequest`` on ``filter`` otherwise)."""
    if not isinstance(text, str):
        raise InvalidRequest.field("filter", "expected a string or null")
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidRequest.field("filter", f"at most {MAX_FILTER_CHARS} characters (got {len(text)})")
    if not text.strip():
        raise FilterError(1, "an expression", "the end of the filter")
    compile_filter(text)
    return text


@lru_cache(maxsize=1024)
def compile_filter(text: str) -> Predicate:
    """The predicate of a filter, compiled once (cached by its text: the delivery loops ask per pass)."""
    return _Parser(text).parse()


def predicate_of(text: str | None) -> Predicate | None:
    """The compiled predicate of a group's stored filter (None: every message matches)."""
    return compile_filter(text) if text else None
