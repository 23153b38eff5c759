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
