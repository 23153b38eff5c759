"""The committed contract of the push WebSocket: ``asyncapi.yaml`` (AsyncAPI 3.0) is this package's output
(``python -m app.asyncapi``, ``make asyncapi``); ``tests/test_asyncapi.py`` fails on drift and has the
AsyncAPI project's own parser validate it, ``tests/api/test_ws_asyncapi.py`` checks a real server's
frames against it.

Everything in it comes from ``app/api/schemas/frames.py`` (the frames, close codes, refusals), the
request parameters' shared types (``constraints.py``) and the settings' defaults. The document describes
the server (AsyncAPI's point of view): ``send`` operations are the frames it sends, ``receive`` ones the
frames it takes, each answered (``reply``) by ``acked`` or ``error``.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from app import __version__
from app.api.schemas import frames
from app.api.schemas.frames import CLIENT_FRAMES, CLOSE_CODES, REFUSALS, SERVER_FRAMES, frame_type
from app.broker import groups, topics
from app.broker.delivery import membership
from app.broker.delivery.frames import MAX_IN_FLIGHT
from app.errors import ErrorEnvelope
from app.openapi import integral_bounds
from app.settings import Settings

CHANNEL = "consume"
ADDRESS = "/v1/topics/{name}/consume"
_SCHEMAS = "#/components/schemas/"
_WS_BINDING_VERSION = "0.1.0"


def _default(setting: str) -> Any:
    """A setting's default (the document does not depend on the environment it is generated in)."""
    return Settings.model_fields[setting].default


def _description() -> str:
    frame_limit = _default("ws_max_frames_per_second")
    return _text(f"""Push delivery over a WebSocket: one connection is one member of a consumer group, and the server
runs its delivery loop. Open `GET {ADDRESS}` as a WebSocket upgrade; everything that can refuse the connection
is checked before the upgrade and answered with the HTTP status and the error envelope (`x-refusals` on the
channel). Then the server sends `welcome`, and deliveries (`message` or `messages`) as long as fewer than
`maxInFlight` are outstanding; the client answers with `ack`, `nack` and `extend` frames, each answered by one
`acked` (or by an `error` when malformed; the connection stays open).

Frames are JSON text objects with a `type` and their fields at the top level; clients ignore fields
of server frames they do not know (more may be added). A member is gone once nothing has
been heard from its connection for its group's `sessionTimeout` (the server pings it a few times within that),
and leaves as soon as its connection closes. At most {frame_limit} client frames a second on one connection
(by default; batch acks with `ids`). The close codes the server uses are listed in `x-close-codes` on the
channel. The REST API, `POST /v1/tokens/websocket` among it, is openapi.yaml; the protocol is explained in
docs/consuming.md.""")


def _text(docstring: str) -> str:
    """A docstring as a Markdown description: one line per paragraph, ``code`` as `code`."""
    paragraphs = docstring.strip().split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs).replace("``", "`")


def _message(frame: type[frames.ServerFrame | frames.ClientFrame]) -> dict[str, Any]:
    kind = frame_type(frame)
    return {
        "name": kind,
        "title": kind,
        "summary": frame.summary,
        "description": _text(frame.__doc__ or ""),
        "contentType": "application/json",
        "payload": {"$ref": _SCHEMAS + frame.__name__},
        "examples": [{"name": kind, "payload": frame.example}],
    }


def _schemas() -> dict[str, Any]:
    """Every frame's payload and the error envelope, with the models they nest, as components."""
    models: list[type[BaseModel]] = [*SERVER_FRAMES, *CLIENT_FRAMES, ErrorEnvelope]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=_SCHEMAS + "{model}")
    schemas: dict[str, Any] = top["$defs"]
    integral_bounds(schemas)
    for schema in schemas.values():
        if "description" in schema:
            schema["description"] = _text(schema["description"])
        properties = schema.get("properties", {})
        for prop in properties.values():  # pydantic's ``default: null`` where null is no valid value
            if "default" in prop and prop["default"] is None and "anyOf" not in prop:
                del prop["default"]
        if "type" in properties:  # a frame's ``type`` first, as on the wire
            schema["properties"] = {"type": properties.pop("type"), **properties}
    return schemas


def _query() -> dict[str, Any]:
    """The upgrade's query string, as the WebSocket binding's schema (``app/api/ws.py`` reads it)."""
    return {
        "type": "object",
        "required": ["group"],
        "properties": {
            "group": {
                "type": "string",
                "pattern": groups.NAME.pattern,
                "description": "The consumer group to join (created if needed).",
            },
            "startFrom": {
                "type": "string",
                "enum": list(membership.START_FROM),
                "default": "latest",
                "description": "Where a group without a committed offset starts.",
            },
            "maxInFlight": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_IN_FLIGHT,
                "default": 100,
                "description": "At most this many deliveries outstanding (neither acked, nacked nor past "
                "their deadline) on the connection: flow control.",
            },
            "token": {
                "type": "string",
                "description": "Instead of the Authorization header (browsers cannot set one): a token from "
                "`POST /v1/tokens/websocket`, bound to the topic (and group, if it names one), valid 5 minutes.",
            },
        },
    }


def _headers() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "Authorization": {
                "type": "string",
                "pattern": "^[Bb][Ee][Aa][Rr][Ee][Rr] .+$",
                "description": "`Bearer <API key>`; or authenticate with `?token=`. The header wins when both "
                "are given.",
            },
            "X-Request-Id": {
                "type": "string",
                "pattern": "^[A-Za-z0-9._-]{1,128}$",
                "description": "Echoed in the upgrade's answer and in `error` frames (else a `req_…` is made).",
            },
        },
    }


def _refusals() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for status, refusal in REFUSALS.items():
        body: dict[str, Any] = {
            "code": refusal.code,
            "message": refusal.message,
            "status": status,
            "requestId": "req_7x9k2m4n",
        }
        if refusal.details:
            body["details"] = refusal.details
        out[str(status)] = {
            "code": refusal.code,
            "description": refusal.description,
            "payload": {"$ref": _SCHEMAS + ErrorEnvelope.__name__},
            "example": {"error": body},
        }
    return out


def build_asyncapi() -> dict[str, Any]:
    """The AsyncAPI document of the push WebSocket as QueueCore publishes it."""
    server_kinds = [frame_type(f) for f in SERVER_FRAMES]
    client_kinds = [frame_type(f) for f in CLIENT_FRAMES]
    channel_ref = {"$ref": f"#/channels/{CHANNEL}"}
    all_frames: list[type[frames.ServerFrame | frames.ClientFrame]] = [*SERVER_FRAMES, *CLIENT_FRAMES]

    def message_ref(kind: str) -> dict[str, str]:
        return {"$ref": f"#/channels/{CHANNEL}/messages/{kind}"}

    operations: dict[str, Any] = {}
    for frame in SERVER_FRAMES:
        kind = frame_type(frame)
        operations[f"send{kind[0].upper()}{kind[1:]}"] = {
            "action": "send",
            "channel": channel_ref,
            "summary": frame.summary,
            "messages": [message_ref(kind)],
        }
    for client_frame in CLIENT_FRAMES:
        kind = frame_type(client_frame)
        operations[f"receive{kind[0].upper()}{kind[1:]}"] = {
            "action": "receive",
            "channel": channel_ref,
            "summary": client_frame.summary,
            "messages": [message_ref(kind)],
            "reply": {
                "channel": channel_ref,
                "messages": [message_ref(frame_type(answer)) for answer in client_frame.answers],
            },
        }
    return {
        "asyncapi": "3.1.0",
        "info": {
            "title": "QueueCore push consumer (WebSocket)",
            "version": __version__,
            "description": _description(),
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:8080",
                "protocol": "ws",
                "description": "local (make run); behind TLS the protocol is wss",
                "security": [
                    {"$ref": "#/components/securitySchemes/ApiKey"},
                    {"$ref": "#/components/securitySchemes/WebSocketToken"},
                ],
            }
        },
        "channels": {
            CHANNEL: {
                "address": ADDRESS,
                "title": "A topic's push consumer",
                "description": "One WebSocket connection per group member. `x-refusals`: the HTTP answers "
                "that refuse the upgrade (each in the error envelope); `x-close-codes`: the codes the server "
                "closes the connection with.",
                "parameters": {
                    "name": {
                        "description": f"The topic's name (pattern `{topics.NAME.pattern}`).",
                        "examples": ["order.events"],
                    }
                },
                "messages": {
                    kind: {"$ref": f"#/components/messages/{kind}"} for kind in [*server_kinds, *client_kinds]
                },
                "bindings": {
                    "ws": {
                        "method": "GET",
                        "query": _query(),
                        "headers": _headers(),
                        "bindingVersion": _WS_BINDING_VERSION,
                    }
                },
                "x-refusals": _refusals(),
                "x-close-codes": {str(int(code)): why for code, why in CLOSE_CODES.items()},
            }
        },
        "operations": operations,
        "components": {
            "messages": {frame_type(f): _message(f) for f in all_frames},
            "schemas": _schemas(),
            "securitySchemes": {
                "ApiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A project API key in the Authorization header: pq_live_sk_… (production) "
                    "or pq_test_sk_… (development, staging).",
                },
                "WebSocketToken": {
                    "type": "httpApiKey",
                    "in": "query",
                    "name": "token",
                    "description": "A short-lived token (HS256 JWT, 5 minutes) from POST /v1/tokens/websocket, "
                    "for clients that cannot set headers; bound to its key, the topic and (if given) the group.",
                },
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    """Every value written out where it is used: no YAML anchors and aliases for shared objects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_yaml() -> str:
    text: str = yaml.dump(build_asyncapi(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    return text
