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

Parentheses nest at most ``MAX_NESTING`` (32) deep. Keywords (``AND OR NOT IN``) are case-insensitive; ``hasPrefix``, ``headers`` and ``key`` are not. Header
names match exactly (case-sensitive), as headers are stored. A missing header or key equals nothing and has
no prefix: ``headers.x = "v"``, ``headers.x IN (…)`` and ``hasPrefix(headers.x, …)`` are false, and
``headers.x != "v"`` (which is ``NOT headers.x = "v"``) is true.

A bad filter is ``InvalidRequest`` on ``filter`` naming the 1-based position and what was expected there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from app.broker.errors import InvalidRequest

MAX_FILTER_CHARS = 1024
MAX_NESTING = 32  # parentheses inside parentheses: the parser recurses, and so does the compiled predicate
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
_KEYWORDS = ("AND", "OR", "NOT", "IN")

# A record's key and headers bytes -> whether the group receives it.
Predicate = Callable[[bytes | None, bytes | None], bool]
# What a compiled node evaluates: the key and the headers bytes as stored (``header_value`` reads them).
_Node = Callable[[bytes | None, bytes | None], bool]
# A parsed filter: ("and" | "or", [parts]), ("not", part), ("exists", name), and ("eq" | "in" | "prefix",
# field, bytes | frozenset of bytes) where field is a header's name or None for the key.
_Ast = tuple[Any, ...]


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
        self.depth = 0  # parentheses open here

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

    def parse(self) -> _Ast:
        node = self.or_()
        if self.peek.kind != "end":
            raise FilterError(self.peek.at, "AND, OR or the end of the filter", _found(self.peek))
        return node

    def or_(self) -> _Ast:
        parts = [self.and_()]
        while self.keyword("OR"):
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else ("or", parts)

    def and_(self) -> _Ast:
        parts = [self.unary()]
        while self.keyword("AND"):
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else ("and", parts)

    def unary(self) -> _Ast:
        nots = 0
        while self.keyword("NOT"):  # a loop, not recursion: NOT NOT x is x
            nots += 1
        inner = self.primary()
        return ("not", inner) if nots % 2 else inner

    def primary(self) -> _Ast:
        token = self.peek
        if token.kind == "(":
            if self.depth >= MAX_NESTING:
                raise FilterError(token.at, f"at most {MAX_NESTING} nested parentheses", "one more '('")
            self.i += 1
            self.depth += 1
            node = self.or_()
            self.depth -= 1
            self.take(")", "')'")
            return node
        if token.kind == "word" and token.text == "hasPrefix":
            self.i += 1
            self.take("(", "'(' after hasPrefix")
            field = self.field()
            self.take(",", "','")
            prefix = self.take("string", 'a quoted string "…"').text
            self.take(")", "')'")
            return ("prefix", field, prefix.encode())
        if token.kind == "word" and token.text.startswith("headers:"):
            self.i += 1
            name = token.text[len("headers:") :]
            self.check_name(name, token.at + len("headers:"))
            return ("exists", name)
        field = self.field()
        op = self.peek
        if op.kind in ("=", "!="):
            self.i += 1
            equal: _Ast = ("eq", field, self.take("string", 'a quoted string "…"').text.encode())
            return equal if op.kind == "=" else ("not", equal)
        if self.keyword("IN"):
            self.take("(", "'(' after IN")
            values = {self.take("string", 'a quoted string "…"').text}
            while self.peek.kind == ",":
                self.i += 1
                values.add(self.take("string", 'a quoted string "…"').text)
            self.take(")", "',' or ')'")
            return ("in", field, frozenset(v.encode() for v in values))
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


def _closure(ast: _Ast) -> _Node:
    """The predicate as nested closures: the fallback for a filter too deeply nested to compile (``_source``)."""
    kind = ast[0]
    if kind in ("and", "or"):
        parts = [_closure(a) for a in ast[1]]
        if kind == "and":
            return lambda key, headers: all(part(key, headers) for part in parts)
        return lambda key, headers: any(part(key, headers) for part in parts)
    if kind == "not":
        inner = _closure(ast[1])
        return lambda key, headers: not inner(key, headers)
    field = ast[1]
    if kind == "exists":
        needle = _needle(field)
        return lambda key, headers: header_value(headers, needle) is not None
    value = ast[2]
    if field is None:
        if kind == "eq":
            return lambda key, headers: key == value
        if kind == "in":
            return lambda key, headers: key in value
        return lambda key, headers: key is not None and key.startswith(value)
    needle = _needle(field)
    if kind == "eq":
        return lambda key, headers: header_value(headers, needle) == value
    if kind == "in":
        return lambda key, headers: header_value(headers, needle) in value

    def prefix(key: bytes | None, headers: bytes | None) -> bool:
        found = header_value(headers, needle)
        return found is not None and found.startswith(value)

    return prefix


class _Source:
    """The predicate as one Python function: each header it names looked up once per record, the rest
    one expression (no call per node). Only names the compiler made appear in the source; every value
    of the filter is a constant in the function's namespace."""

    def __init__(self) -> None:
        self.namespace: dict[str, object] = {"_hv": header_value}
        self.headers: dict[str, str] = {}  # header name -> local variable

    def constant(self, value: object) -> str:
        name = f"_c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def header(self, name: str) -> str:
        if name not in self.headers:
            self.headers[name] = f"h{len(self.headers)}"
        return self.headers[name]

    def expr(self, ast: _Ast) -> str:
        kind = ast[0]
        if kind in ("and", "or"):
            return "(" + f" {kind} ".join(self.expr(a) for a in ast[1]) + ")"
        if kind == "not":
            return f"(not {self.expr(ast[1])})"
        field = ast[1]
        subject = "key" if field is None else self.header(field)
        if kind == "exists":
            return f"({subject} is not None)"
        value = self.constant(ast[2])
        if kind == "eq":
            return f"({subject} == {value})"
        if kind == "in":
            return f"({subject} in {value})"
        return f"({subject} is not None and {subject}.startswith({value}))"

    def function(self, ast: _Ast) -> _Node:
        body = self.expr(ast)
        lines = [f"    {var} = _hv(headers, {self.constant(_needle(n))})" for n, var in self.headers.items()]
        source = "def predicate(key, headers):\n" + "\n".join([*lines, f"    return {body}"]) + "\n"
        exec(compile(source, "<group filter>", "exec"), self.namespace)  # noqa: S102 - our source, above
        function: _Node = self.namespace["predicate"]  # type: ignore[assignment]
        return function


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
    ast = _Parser(text).parse()
    try:
        return _Source().function(ast)
    except (SyntaxError, RecursionError, MemoryError):  # nested past what Python compiles: closures
        return _closure(ast)


def predicate_of(text: str | None) -> Predicate | None:
    """The compiled predicate of a group's stored filter (None: every message matches)."""
    return compile_filter(text) if text else None
