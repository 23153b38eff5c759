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
        pattern = self._pattern(yaml.safe_load((repo_root / "openapi.yaml").read_text()), schema, field)
        rng = random.Random(20)
        numbers = [*range(1500), *(rng.randrange(10**9) for _ in range(1500))]
        numbers += [10**k + d for k in range(10) for d in (-1, 0)]
        for n in numbers:
            for unit in ("ms", "s", "m", "h", "d"):
                for text in (f"{n}{unit}", f"{n:09d}{unit}", f"{n:010d}{unit}", f"{n}{unit}\n"):
                    assert bool(pattern.fullmatch(text)) == _takes(
                        lambda v: durations.parse(v, field, span), text
                    ), text

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
