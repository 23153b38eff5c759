"""``asyncapi.yaml`` is the committed contract of the push WebSocket: exactly what ``app/asyncapi``
generates, valid for the AsyncAPI project's own parser, and its examples valid for its schemas. (What a
real server sends and takes is checked against it by ``tests/api/test_ws_asyncapi.py``.)"""

from __future__ import annotations

import shutil
import subprocess

import jsonschema_rs
import pytest

from app.api.schemas.frames import CLIENT_FRAMES, CLOSE_CODES, REFUSALS, SERVER_FRAMES, frame_type
from app.asyncapi import render_yaml
from app.broker.delivery.frames import CLIENT_FRAME_TYPES
from tests.fixtures.asyncapi import AsyncApiContract


@pytest.fixture(scope="module")
def contract(repo_root) -> AsyncApiContract:
    return AsyncApiContract(repo_root / "asyncapi.yaml")


def test_committed_asyncapi_matches_the_source(repo_root):
    committed = (repo_root / "asyncapi.yaml").read_text()
    assert committed == render_yaml(), "asyncapi.yaml is stale: run `make asyncapi` and commit it"


def test_the_asyncapi_parser_finds_no_error(repo_root):
    """The AsyncAPI project's parser (@asyncapi/parser, pinned in tools/asyncapi/package-lock.json) and
    its ruleset: an error fails, warnings are printed."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    tool = repo_root / "tools" / "asyncapi"
    assert (tool / "node_modules" / "@asyncapi" / "parser").is_dir(), (
        "the AsyncAPI parser is not installed: run `make install-asyncapi` (make test does)"
    )
    result = subprocess.run(
        [node, "scripts/validate.mjs", str(repo_root / "asyncapi.yaml")],
        cwd=tool,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid AsyncAPI 3." in result.stdout


def test_the_parser_check_fails_on_a_broken_document(repo_root, tmp_path):
    """The check can fail: a reference to a message that does not exist is an error for the parser."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    broken = tmp_path / "asyncapi.yaml"
    text = (repo_root / "asyncapi.yaml").read_text()
    broken.write_text(text.replace("#/channels/consume/messages/acked", "#/channels/consume/messages/nope"))
    result = subprocess.run(
        [node, "scripts/validate.mjs", str(broken)],
        cwd=repo_root / "tools" / "asyncapi",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1 and "error" in result.stdout, result.stdout + result.stderr


def test_every_frame_is_a_message_of_the_channel_with_its_operation(contract):
    server = [frame_type(f) for f in SERVER_FRAMES]
    client = [frame_type(f) for f in CLIENT_FRAMES]
    assert len(set(server + client)) == len(server + client)
    assert set(contract.channel["messages"]) == set(server + client)
    assert contract.sent_by_server == set(server)
    assert contract.sent_by_client == set(client)
    # The frames the server's parser takes are exactly the documented client frames.
    assert set(CLIENT_FRAME_TYPES) == set(client)
    for operation in contract.document["operations"].values():
        if operation["action"] == "receive":
            replies = {ref["$ref"].rsplit("/", 1)[1] for ref in operation["reply"]["messages"]}
            assert replies == {"acked", "error"}


def test_every_schema_is_json_schema_and_every_example_fits_its_message(contract):
    schemas = contract.document["components"]["schemas"]
    for name, schema in schemas.items():
        assert jsonschema_rs.meta.is_valid(
            {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
        ), name
    for kind, message in contract.document["components"]["messages"].items():
        assert message["examples"], kind
        for example in message["examples"]:
            if kind in contract.sent_by_server:
                contract.check_server_frame(example["payload"])
            else:
                contract.check_client_frame(example["payload"])
    for status, refusal in contract.refusals.items():
        assert contract.envelope.is_valid(refusal["example"]), status
        assert refusal["example"]["error"]["status"] == status
    assert set(contract.refusals) == set(REFUSALS)
    assert contract.close_codes == {int(code) for code in CLOSE_CODES}


@pytest.mark.parametrize(
    ("frame", "takes"),
    [
        ({"type": "ack", "id": "msg_aaaa"}, True),
        ({"type": "ack", "ids": ["msg_aaaa", "msg_bbbb"]}, True),
        ({"type": "ack"}, False),  # the server answers INVALID_REQUEST: id or ids
        ({"type": "ack", "ids": []}, False),
        ({"type": "ack", "ids": ["msg_a"] * 1001}, False),
        ({"type": "nack", "id": "msg_aaaa", "reason": "boom", "delay": "30s"}, True),
        ({"type": "nack", "id": "msg_aaaa", "delay": 1.5}, True),
        ({"type": "nack", "id": "msg_aaaa", "delay": "13h"}, False),
        ({"type": "nack"}, False),
        ({"type": "extend", "ids": ["msg_aaaa"], "seconds": 60}, True),
        ({"type": "extend", "id": "msg_aaaa", "seconds": 0.5}, False),
        ({"type": "extend", "ids": ["msg_aaaa"]}, False),
        ({"type": "dance"}, False),
        ([1], False),
    ],
)
def test_client_frames_are_described_as_the_server_takes_them(contract, frame, takes):
    assert contract.takes_client_frame(frame) is takes
