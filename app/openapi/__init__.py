"""The committed contract: ``openapi.yaml`` is this package's output (``python -m app.openapi``, ``make
openapi``); a test fails on drift. The app installs the document from here (``install``); the command that
writes it lives in ``__main__.py``, the one module that builds an app, so nothing here imports ``app.main``.

FastAPI's generated schema is adjusted in one place: its 422 answers become our 400 envelope, the two
bearer security schemes are declared (a project's API key; the operators' admin token, for the admin API
only), and every authenticated route says which it takes; ``answers.py`` adds what every route answers
(400, 500), the rate-limit headers of the routes a project key calls, the tags and the integer formats.
"""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.errors import ErrorEnvelope, responses
from app.openapi.answers import add_common_answers, add_integer_formats, add_tags

_PUBLIC = {"/v1/health"}
_ADMIN_PREFIX = "/v1/admin/"  # app/api/admin.py: QUEUECORE_ADMIN_TOKEN, not a project key


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of ``app`` as QueueCore publishes it."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schema["info"]["contact"] = {"name": "QueueCore support"}
    # The one address every checkout has; a deployment's own (TLS-terminated) address is its operators'.
    schema["servers"] = [
        {"url": "http://127.0.0.1:8080", "description": "local (make run)", "x-internal": False}
    ]
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {}).update(
        {
            "ApiKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "A project API key: pq_live_sk_… (production) or pq_test_sk_… (development, "
                "staging).",
            },
            "AdminToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "The operators' token (QUEUECORE_ADMIN_TOKEN); the admin API is disabled (403) "
                "when none is set.",
            },
        }
    )
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.setdefault(
        "ErrorEnvelope", ErrorEnvelope.model_json_schema(ref_template="#/components/schemas/{model}")
    )
    bad_request = responses("INVALID_REQUEST")[400]
    envelope_ref = {"$ref": "#/components/schemas/ErrorEnvelope"}
    limited: set[tuple[str, str]] = set()  # what a project key calls: charged against its rate limit
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            answers = operation.setdefault("responses", {})
            if answers.pop("422", None) is not None and "400" not in answers:
                answers["400"] = {
                    "description": bad_request["description"],
                    "content": {"application/json": {"schema": envelope_ref, **_examples(bad_request)}},
                }
            if path.startswith(_ADMIN_PREFIX):
                operation["security"] = [{"AdminToken": []}]
            elif path not in _PUBLIC:
                operation["security"] = [{"ApiKey": []}]
                limited.add((path, method))
            else:
                operation["security"] = []  # said, not forgotten: the health check takes no key
            # Request bodies given as whole schemas (openapi_extra) keep their nested models under
            # ``$defs`` while pointing at components: hoist them there, so every $ref resolves.
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, definition in body.get("schema", {}).pop("$defs", {}).items():
                schemas.setdefault(name, definition)
    integral_bounds(schema)
    add_common_answers(schema, limited)
    add_integer_formats(schema)
    add_tags(schema)
    return schema


_BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}


def integral_bounds(node: Any) -> None:
    """FastAPI's OpenAPI model reads every bound as a float (``maximum: 255.0``): whole ones are integers
    again, as the models declare them."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _BOUNDS and isinstance(value, float) and value.is_integer():
                node[key] = int(value)
            else:
                integral_bounds(value)
    elif isinstance(node, list):
        for value in node:
            integral_bounds(value)


def _examples(entry: dict[str, Any]) -> dict[str, Any]:
    return {"examples": entry["content"]["application/json"]["examples"]}


def render_yaml(app: FastAPI) -> str:
    text: str = yaml.safe_dump(build_openapi(app), sort_keys=False, allow_unicode=True, width=120)
    return text


def install(app: FastAPI) -> None:
    """Serve the adjusted document at ``/openapi.json`` and ``/docs``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
