"""Group filters (``app/broker/filters.py``): every construct of the grammar, what a missing header or key
means, and the refusals with their position and what was expected."""

from __future__ import annotations

import orjson
import pytest

from app.broker import filters
from app.broker.errors import InvalidRequest
from app.broker.messages import encode_headers


def matches(text: str, *, key: str | None = None, headers: dict[str, str] | None = None) -> bool:
    predicate = filters.compile_filter(filters.validate(text))
    return predicate(key.encode() if key is not None else None, encode_headers(headers, None))


class TestConstructs:
    @pytest.mark.parametrize(
        ("text", "key", "headers", "expected"),
        [
            ('headers.type = "order"', None, {"type": "order"}, True),
            ('headers.type = "order"', None, {"type": "orders"}, False),
            ('headers.type = "order"', None, None, False),
            ('headers.type != "order"', None, {"type": "refund"}, True),
            ('headers.type != "order"', None, {"type": "order"}, False),
            ('headers.type != "order"', None, {}, True),  # a missing header equals nothing
            ('headers.type IN ("a", "b")', None, {"type": "b"}, True),
            ('headers.type IN ("a", "b")', None, {"type": "c"}, False),
            ('headers.type IN ("a")', None, {}, False),
            ("headers:trace", None, {"trace": ""}, True),
            ("headers:trace", None, {"other": "x"}, False),
            ('hasPrefix(headers.region, "eu-")', None, {"region": "eu-west"}, True),
            ('hasPrefix(headers.region, "eu-")', None, {"region": "us-east"}, False),
            ('hasPrefix(headers.region, "eu-")', None, {}, False),
            ('key = "k1"', "k1", None, True),
            ('key = "k1"', "k2", None, False),
            ('key = "k1"', None, None, False),
            ('hasPrefix(key, "user-")', "user-7", None, True),
            ('hasPrefix(key, "user-")', "admin-7", None, False),
            ('hasPrefix(key, "user-")', None, None, False),
            ('NOT headers.type = "x"', None, {"type": "y"}, True),
            ('not headers.type = "x"', None, {"type": "x"}, False),
            ('headers.a = "1" AND headers.b = "2"', None, {"a": "1", "b": "2"}, True),
            ('headers.a = "1" AND headers.b = "2"', None, {"a": "1", "b": "3"}, False),
            ('headers.a = "1" OR headers.b = "2"', None, {"a": "0", "b": "2"}, True),
            ('headers.a = "1" or headers.b = "2"', None, {"a": "0", "b": "0"}, False),
            # AND binds tighter than OR; parentheses change that.
            ('headers.a = "1" OR headers.b = "2" AND headers.c = "3"', None, {"a": "1"}, True),
            ('(headers.a = "1" OR headers.b = "2") AND headers.c = "3"', None, {"a": "1"}, False),
            ('NOT (headers.a = "1" OR key = "k")', "k", {}, False),
            ('headers.x-id.v2 = "q\\"uote\\\\"', None, {"x-id.v2": 'q"uote\\'}, True),
            ('headers.Type = "a"', None, {"type": "a"}, False),  # header names match exactly
            ('  key="k"  ', "k", None, True),
        ],
    )
    def test_matches(self, text, key, headers, expected):
        assert matches(text, key=key, headers=headers) is expected

    def test_the_idempotency_key_stored_beside_the_headers_is_not_a_header(self):
        predicate = filters.compile_filter("headers:i")
        assert predicate(None, encode_headers(None, "idem-1")) is False
        assert predicate(None, orjson.dumps({"h": {"i": "1"}, "i": None})) is True

    def test_a_filter_without_headers_never_decodes_them(self):
        predicate = filters.compile_filter('key = "k"')
        assert predicate(b"k", b"not json at all") is True


class TestRefusals:
    @pytest.mark.parametrize(
        ("text", "position", "expected"),
        [
            ("", 1, "an expression"),
            ("headers.type", 13, "'=', '!=' or IN"),
            ("headers.type = order", 16, 'a quoted string "…"'),
            ('headers.type = "order', 16, "a closing '\"'"),
            ('headers.type == "x"', 15, 'a quoted string "…"'),
            ('headers. = "x"', 9, "a header name (letters, digits, '_', '-', '.')"),
            ("headers:", 9, "a header name (letters, digits, '_', '-', '.')"),
            ('body = "x"', 1, 'headers.<name>, headers:<name>, key, hasPrefix(…), NOT or "("'),
            ('key = "a" AND', 14, 'headers.<name>, headers:<name>, key, hasPrefix(…), NOT or "("'),
            ('key = "a" key = "b"', 11, "AND, OR or the end of the filter"),
            ('(key = "a"', 11, "')'"),
            ('headers.t IN ("a" "b")', 19, "',' or ')'"),
            ('headers.t IN "a"', 14, "'(' after IN"),
            ('hasPrefix(key "p")', 15, "','"),
            ('hasPrefix key, "p")', 11, "'(' after hasPrefix"),
            ('key = "a" & key = "b"', 11, "an expression"),
            ('key ! "a"', 5, '"!="'),
            ('key = "a\\n"', 9, "'\\\"' or '\\\\'"),
        ],
    )
    def test_a_bad_filter_names_the_position_and_what_was_expected(self, text, position, expected):
        with pytest.raises(InvalidRequest) as refused:
            filters.validate(text)
        (detail,) = refused.value.details
        assert detail["field"] == "filter"
        assert detail["position"] == position and detail["expected"] == expected, detail
        assert detail["issue"].startswith(f"at position {position}: expected {expected}, found ")

    def test_at_most_1024_characters(self):
        long = 'key = "' + "k" * 1016 + '"'
        assert len(long) == 1024 and filters.validate(long) == long
        with pytest.raises(InvalidRequest) as refused:
            filters.validate(long + " ")
        assert refused.value.details == [{"field": "filter", "issue": "at most 1024 characters (got 1025)"}]

    def test_a_filter_is_a_string(self):
        with pytest.raises(InvalidRequest) as refused:
            filters.validate(42)
        assert refused.value.details == [{"field": "filter", "issue": "expected a string or null"}]


class TestHeadersWithoutDecoding:
    """``header_value`` finds values in the stored bytes; every tricky shape agrees with decoding them."""

    @pytest.mark.parametrize(
        "headers",
        [
            {"type": "a", "other": '"type":"b"'},  # a key's look-alike inside a value
            {"other": '\\"type":"b', "type": "a"},
            {"type": 'quote " and \\ backslash'},  # escapes: decoded in full
            {"type": "é ünicode ✓"},
            {"i": "a header named i"},
            {"h": "a header named h", "type": ""},
            {"type": '},"i":"x'},
            {},
        ],
    )
    def test_the_same_answer_as_decoding(self, headers):
        raw = encode_headers(headers, "idem-key")
        names = ["type", "other", "i", "h", "missing"]
        for name in names:
            found = filters.header_value(raw, filters._needle(name))
            expected = headers.get(name)
            assert found == (expected.encode() if expected is not None else None), (name, raw)

    def test_other_shapes_are_decoded_in_full(self):
        spaced = b'{"h": {"type": "a"}, "i": null}'
        assert filters.header_value(spaced, filters._needle("type")) == b"a"
        assert filters.header_value(b'{"h":null,"i":"k"}', filters._needle("i")) is None
        assert filters.header_value(None, filters._needle("type")) is None


class TestCompiled:
    def test_any_number_of_nots_and_parentheses_up_to_32_deep(self):
        deep_not = "NOT " * 253 + 'key = "k"'  # 253 NOTs: odd, so "not k"
        assert len(deep_not) <= 1024
        predicate = filters.compile_filter(filters.validate(deep_not))
        assert predicate(b"k", None) is False and predicate(b"j", None) is True
        nested = "(NOT " * 32 + 'headers.t = "v"' + ")" * 32  # 32 NOTs: even
        predicate = filters.compile_filter(filters.validate(nested))
        assert predicate(None, encode_headers({"t": "v"}, None)) is True
        with pytest.raises(InvalidRequest) as refused:
            filters.validate("(" * 33 + 'key = "k"' + ")" * 33)
        assert refused.value.details[0]["position"] == 33
        assert refused.value.details[0]["expected"] == "at most 32 nested parentheses"

    def test_the_closures_agree_with_the_compiled_function(self):
        text = 'headers.a IN ("1", "2") AND (key != "k" OR headers:b) AND NOT hasPrefix(headers.c, "x")'
        ast = filters._Parser(text).parse()
        compiled, closures = filters._Source().function(ast), filters._closure(ast)
        for key in (None, b"k", b"j"):
            for headers in ({}, {"a": "1"}, {"a": "2", "b": ""}, {"a": "1", "c": "xy"}, {"a": "3", "b": "z"}):
                raw = encode_headers(headers, None)
                assert compiled(key, raw) == closures(key, raw), (key, headers)

    def test_a_filter_value_is_data_not_code(self):
        predicate = filters.compile_filter(
            'key = "__import__(\'os\').system(\'false\')" OR headers.x = "\\")"'
        )
        assert predicate(b"__import__('os').system('false')", None) is True
        assert predicate(None, encode_headers({"x": '")'}, None)) is True
        assert predicate(b"other", None) is False
