"""``openapi.yaml`` is the committed contract; it must be exactly what the app generates."""

from __future__ import annotations

import random
import re

import jsonschema_rs
import pytest
import yaml
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from app.broker import durations, groups, topics
from app.broker.errors import InvalidRequest
from app.main import create_app
from app.openapi import render_yaml
from app.settings import Settings


def test_committed_openapi_matches_the_app(repo_root, tmp_path):
    generated = render_yaml(create_app(Settings(data_dir=tmp_path)))
    committed = (repo_root / "openapi.yaml").read_text()
    assert committed == generated, "openapi.yaml is stale: run `make openapi` and commit it"


def test_every_operation_documents_its_errors(repo_root):
    spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            answers = operation["responses"]
            assert "422" not in answers, (method, path)
            if path != "/v1/health":
                # The admin API takes the operators' token, every other operation a project key.
                scheme = "AdminToken" if path.startswith("/v1/admin/") else "ApiKey"
                assert "401" in answers and operation["security"] == [{scheme: []}], (method, path)
                for status, answer in answers.items():
                    if status.startswith(("4", "5")):
                        assert answer["content"]["application/json"]["examples"], (method, path, status)


def test_the_document_is_a_valid_openapi_3_1_contract(repo_root):
    """The whole document against the OpenAPI 3.1 meta-schema (the one schemathesis ships and checks a
    contract with), every component schema against JSON Schema 2020-12, and every pattern compiles."""
    spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
    OPENAPI_31_VALIDATOR.validate(spec)
    for schema in spec["components"]["schemas"].values():
        jsonschema_rs.meta.validate({"$schema": "https://json-schema.org/draft/2020-12/schema", **schema})
    patterns: list[str] = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(spec)
    assert len(patterns) > 20
    for pattern in patterns:
        re.compile(pattern)


def test_every_reference_resolves(repo_root):
    """A client generated from the contract must find every schema it names (the batch body once pointed
    at a BatchMessageIn that only existed nested inside it)."""
    spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
    refs: list[str] = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    refs.append(value)
                else:
                    collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(spec)
    assert refs

    def resolve(ref: str) -> object:
        assert ref.startswith("#/"), ref
        node: object = spec
        for part in ref[2:].split("/"):
            assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
            node = node[part]
        return node

    for ref in refs:
        resolve(ref)
    assert not any(
        "$defs" in str(op.get("requestBody", "")) for ops in spec["paths"].values() for op in ops.values()
    )


class TestTheContractSaysWhatTheServerEnforces:
    """The patterns of ``openapi.yaml`` accept exactly what the broker's own checks accept (a fuzzer or a
    client generated from the contract sends nothing the server refuses for its form)."""

    def _pattern(self, spec: dict, schema: str, field: str) -> re.Pattern[str]:
        node = spec["components"]["schemas"][schema]["properties"][field]
        for option in node.get("anyOf", [node]):
            if "pattern" in option:
                return re.compile(option["pattern"])
        raise AssertionError(f"{schema}.{field} has no pattern")

    def _max_length(self, spec: dict, schema: str, field: str) -> int:
        node = spec["components"]["schemas"][schema]["properties"][field]
        (length,) = [o["maxLength"] for o in node.get("anyOf", [node]) if "pattern" in o]
        return int(length)

    @pytest.mark.parametrize(
        ("schema", "field", "span"),
        [
            ("GroupConfigUpdate", "ackTimeout", durations.ACK_TIMEOUT),
            ("GroupConfigUpdate", "sessionTimeout", durations.SESSION_TIMEOUT),
            ("DeadLetterIn", "retryDelay", durations.RETRY_DELAY),
            ("NackIn", "delay", durations.NACK_DELAY),
        ],
    )
    def test_a_duration_matches_the_pattern_exactly_when_the_broker_takes_it(
        self, repo_root, schema, field, span
    ):
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        pattern, max_length = self._pattern(spec, schema, field), self._max_length(spec, schema, field)
        rng = random.Random(20)
        numbers = [*range(1500), *(rng.randrange(10**9) for _ in range(1500))]
        numbers += [10**k + d for k in range(10) for d in (-1, 0)]
        for n in numbers:
            for unit in ("ms", "s", "m", "h", "d"):
                for text in (f"{n}{unit}", f"{n:09d}{unit}", f"{n:010d}{unit}", f"{n}{unit}\n"):
                    assert bool(pattern.fullmatch(text)) == _takes(
                        lambda v: durations.parse(v, field, span), text
                    ), text
                    # maxLength (the OWASP rules ask for one) never refuses what the pattern takes.
                    assert not pattern.fullmatch(text) or len(text) <= max_length, text

    def test_a_retention_matches_the_pattern_exactly_when_the_broker_takes_it(self, repo_root):
        pattern = self._pattern(
            yaml.safe_load((repo_root / "openapi.yaml").read_text()), "TopicCreate", "retention"
        )
        rng = random.Random(21)
        for n in [*range(2000), *(rng.randrange(10**8) for _ in range(3000)), 525600, 525601, 8760, 8761]:
            for unit in ("m", "h", "d", "s"):
                for text in (f"{n}{unit}", f"0{n}{unit}"):
                    assert bool(pattern.fullmatch(text)) == _takes(topics.parse_retention, text), text

    def test_names_are_the_brokers_patterns(self, repo_root):
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        assert self._pattern(spec, "TopicCreate", "name").pattern == topics.NAME.pattern
        assert self._pattern(spec, "WebSocketTokenCreate", "group").pattern == groups.NAME.pattern


def _takes(parse, value: str) -> bool:
    try:
        parse(value)
    except InvalidRequest:
        return False
    return True


class TestWhatEveryRouteAnswers:
    """What the generator adds to every route (app/openapi/answers.py): the answers the server gives on
    any route, and the rate-limit headers of the routes a project key calls."""

    def test_every_operation_documents_400_and_500_in_the_envelope(self, repo_root):
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                for status in ("400", "500"):
                    content = operation["responses"][status]["content"]["application/json"]
                    assert content["schema"] == {"$ref": "#/components/schemas/ErrorEnvelope"}, (method, path)
                    assert content["examples"], (method, path, status)

    def test_routes_a_key_calls_document_the_rate_limit_headers(self, repo_root):
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        names = {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit"}
        assert names | {"Retry-After"} <= set(spec["components"]["headers"])
        limited = 0
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                if operation["security"] != [{"ApiKey": []}]:
                    for answer in operation["responses"].values():
                        assert "headers" not in answer, (method, path)  # no key, no limit
                    continue
                limited += 1
                for status, answer in operation["responses"].items():
                    documented = set(answer.get("headers", {}))
                    if status[0] in "24" and status != "401":
                        assert names <= documented, (method, path, status)
                    else:  # a 401 comes before the key is known; a 5xx is not a limited answer
                        assert not documented & names, (method, path, status)
                    assert ("Retry-After" in documented) == (status == "429"), (method, path, status)
                assert "429" in operation["responses"], (method, path)
        assert limited > 30

    def test_the_documented_rate_limit_headers_match_what_the_server_sends(self, repo_root):
        """The draft's fields as app/api/deps.py writes them fit the documented patterns."""
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        headers = spec["components"]["headers"]
        policy = re.compile(headers["RateLimit-Policy"]["schema"]["pattern"])
        state = re.compile(headers["RateLimit"]["schema"]["pattern"])
        for category in ("publish", "consume", "admin"):
            for limit in (1, 100, 2**53 - 1):
                value = f'"{category}";q={limit};w=1'
                assert (
                    policy.fullmatch(value)
                    and len(value) <= headers["RateLimit-Policy"]["schema"]["maxLength"]
                )
                for reset in (0, 1):
                    value = f'"{category}";r={limit - 1};t={reset}'
                    assert (
                        state.fullmatch(value) and len(value) <= headers["RateLimit"]["schema"]["maxLength"]
                    )

    def test_every_integer_says_its_format_and_every_tag_is_declared(self, repo_root):
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        integers: list[dict] = []

        def collect(node: object) -> None:
            if isinstance(node, dict):
                if node.get("type") == "integer":
                    integers.append(node)
                for value in node.values():
                    collect(value)
            elif isinstance(node, list):
                for value in node:
                    collect(value)

        collect(spec)
        assert integers and all(node.get("format") in ("int32", "int64") for node in integers)
        for node in integers:
            if node["format"] == "int32":
                assert -(2**31) <= node.get("minimum", min(node.get("enum", [0]))) <= 2**31 - 1, node
                assert node.get("maximum", max(node.get("enum", [0]))) <= 2**31 - 1, node
        declared = {tag["name"] for tag in spec["tags"]}
        for operations in spec["paths"].values():
            for operation in operations.values():
                assert set(operation["tags"]) <= declared
        assert all(tag["description"] for tag in spec["tags"])
        assert spec["info"]["contact"] and spec["servers"][0]["x-internal"] is False

    def test_a_page_holds_at_most_its_calls_largest_limit(self, repo_root):
        """An answer's list says how many items it may hold; a page, exactly the most its ``limit`` asks."""
        spec = yaml.safe_load((repo_root / "openapi.yaml").read_text())
        schemas = spec["components"]["schemas"]
        pages = 0
        for path, operations in spec["paths"].items():
            for method, operation in operations.items():
                limit = [p for p in operation.get("parameters", []) if p["name"] == "limit"]
                if not limit:
                    continue
                content = operation["responses"]["200"]["content"]
                if "application/json" not in content:  # the bulk read: records, not a JSON page
                    assert set(content) == {"application/vnd.queuecore.records"}, (method, path)
                    continue
                ref = content["application/json"]["schema"]["$ref"]
                data = schemas[ref.rsplit("/", 1)[1]]["properties"]["data"]
                assert data["maxItems"] == limit[0]["schema"]["maximum"], (method, path)
                pages += 1
        assert pages == 8  # + GET /v1/schedules, push attempts, usage events
