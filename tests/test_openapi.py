"""``openapi.yaml`` is the committed contract; it must be exactly what the app generates."""

from __future__ import annotations

import yaml

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
                assert "401" in answers and operation["security"] == [{"ApiKey": []}], (method, path)
                for status, answer in answers.items():
                    if status.startswith(("4", "5")):
                        assert answer["content"]["application/json"]["examples"], (method, path, status)


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
