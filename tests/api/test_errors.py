"""Every non-2xx answer is the envelope: framework errors, bad bodies, huge bodies, crashes."""

from __future__ import annotations

import pytest

from app.kit.logs import JsonFormatter


def assert_envelope(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) <= {"code", "message", "status", "requestId", "details"}
    assert (error["code"], error["status"]) == (code, status)
    assert error["requestId"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text
    return error


class TestFrameworkErrors:
    async def test_unknown_route(self, client, prod):
        assert_envelope(await client.get("/v1/nothing-here", headers=prod), 404, "NOT_FOUND")
        assert_envelope(await client.get("/"), 404, "NOT_FOUND")

    async def test_wrong_method(self, client, prod):
        response = await client.put("/v1/topics", headers=prod, json={})
        assert_envelope(response, 405, "METHOD_NOT_ALLOWED")
        assert "GET" in response.headers["allow"] and "POST" in response.headers["allow"]

    @pytest.mark.parametrize(
        ("path", "allow"),
        [
            ("/v1/topics/t/messages/batch", "POST"),
            ("/v1/topics/t/groups/g/dlq/replay", "POST"),
            ("/v1/topics/t/groups/g/dlq/replay-all", "POST"),
            ("/v1/topics/t/groups/g/dlq/audit", "GET"),
            ("/v1/topics/t/messages/msg_x", "GET"),
        ],
    )
    async def test_allow_names_the_routes_of_this_path_not_those_a_parameter_would_fill(
        self, client, prod, path, allow
    ):
        # ``…/messages/batch`` is its own route, never a message id: Allow says what the contract says.
        response = await client.request("OPTIONS", path, headers=prod)
        assert_envelope(response, 405, "METHOD_NOT_ALLOWED")
        assert response.headers["allow"] == allow

    @pytest.mark.parametrize(
        "content",
        [b"{", b"not json", b'{"name": "x",}', b"\xff\xfe", b"[1, 2]", b'"just a string"', b"null", b""],
    )
    async def test_malformed_json(self, client, prod, content):
        headers = prod | {"content-type": "application/json"}
        error = assert_envelope(
            await client.post("/v1/topics", content=content, headers=headers), 400, "INVALID_REQUEST"
        )
        assert error["message"]
        assert (await client.get("/v1/topics", headers=prod)).json()["data"] == []

    async def test_wrong_content_type_is_refused(self, client, prod):
        headers = prod | {"content-type": "text/plain"}
        assert_envelope(
            await client.post("/v1/topics", content=b'{"name":"x"}', headers=headers), 400, "INVALID_REQUEST"
        )


class TestBodyLimit:
    async def test_declared_length_over_10_mib_is_413(self, client, prod):
        body = b'{"name": "' + b"a" * (10 * 1024 * 1024) + b'"}'
        response = await client.post(
            "/v1/topics", content=body, headers=prod | {"content-type": "application/json"}
        )
        assert_envelope(response, 413, "PAYLOAD_TOO_LARGE")

    async def test_streamed_body_over_10_mib_is_413_before_read_whole(self, client, prod):
        sent = 0

        async def chunks():
            nonlocal sent
            for _ in range(64):  # up to 16 MiB offered, in 256 KiB chunks
                sent += 1
                yield b"a" * (256 * 1024)

        response = await client.post(
            "/v1/topics", content=chunks(), headers=prod | {"content-type": "application/json"}
        )
        assert_envelope(response, 413, "PAYLOAD_TOO_LARGE")
        assert sent < 64

    async def test_just_under_limit_is_read(self, client, prod):
        body = b'{"name": "' + b"a" * (1024 * 1024) + b'"}'
        response = await client.post(
            "/v1/topics", content=body, headers=prod | {"content-type": "application/json"}
        )
        assert_envelope(response, 400, "INVALID_REQUEST")


class TestRequestIds:
    async def test_generated(self, client):
        response = await client.get("/v1/health")
        assert response.headers["x-request-id"].startswith("req_")

    async def test_valid_incoming_is_echoed(self, client, prod):
        response = await client.get("/v1/topics/x", headers=prod | {"x-request-id": "trace-1.2_3"})
        assert response.headers["x-request-id"] == "trace-1.2_3"
        assert response.json()["error"]["requestId"] == "trace-1.2_3"

    @pytest.mark.parametrize("incoming", ["has space", "a" * 129, "semi;colon", "ünï"])
    async def test_invalid_incoming_is_replaced(self, client, incoming):
        response = await client.get("/v1/health", headers={"x-request-id": incoming.encode()})
        assert response.headers["x-request-id"].startswith("req_")


class TestUnhandled:
    async def test_crash_is_500_envelope_without_internals(self, client, deployment, caplog):
        async def explode() -> None:
            raise RuntimeError("secret internal detail")

        path = f"/v1/_test_explode_{deployment.backend}"
        if not any(getattr(r, "path", None) == path for r in deployment.app.router.routes):
            deployment.app.add_api_route(path, explode, methods=["GET"])
        response = await client.get(path)
        error = assert_envelope(response, 500, "INTERNAL_ERROR")
        assert "secret internal detail" not in response.text
        logged = "\n".join(JsonFormatter().format(r) for r in caplog.records)
        assert error["requestId"] in logged and "secret internal detail" in logged


class TestInputNoStoreCanHold:
    """Strings and numbers a store or a parser cannot hold are 400 on both databases, never 500."""

    @pytest.mark.parametrize(
        "path",
        [
            "/v1/topics/%00bad",
            "/v1/topics?cursor=%00",
            "/v1/topics/t/groups/g%00/offsets",
            "/v1/topics/t/partitions/0/messages?fromTimestamp=%00",
        ],
    )
    async def test_nul_in_a_path_or_query(self, client, prod, path):
        assert_envelope(await client.get(path, headers=prod), 400, "INVALID_REQUEST")

    @pytest.mark.parametrize(
        ("path", "body"),
        [
            ("/v1/topics", '{"name": "a\\u0000b"}'),
            (
                "/v1/topics/t/groups/g/nack",
                '{"memberId": "csr_x", "generationId": 1, "id": "m", "reason": "\\u0000"}',
            ),
        ],
    )
    async def test_nul_in_a_body(self, client, prod, path, body):
        headers = prod | {"content-type": "application/json"}
        error = assert_envelope(
            await client.post(path, content=body, headers=headers), 400, "INVALID_REQUEST"
        )
        assert "NUL" in error["message"]

    @pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
    async def test_non_standard_json_numbers_are_refused_everywhere(self, client, prod, token):
        headers = prod | {"content-type": "application/json"}
        for path, body in [
            ("/v1/topics", '{"name": "nan.probe", "partitions": ' + token + "}"),
            (
                "/v1/topics/t/groups/g/nack",
                '{"memberId": "csr_x", "generationId": 1, "id": "m", "delay": ' + token + "}",
            ),
        ]:
            error = assert_envelope(
                await client.post(path, content=body, headers=headers), 400, "INVALID_REQUEST"
            )
            assert "not valid JSON" in error["message"], path

    @pytest.mark.parametrize("delay", [1e308, -1e308, 1e20])
    async def test_a_huge_nack_delay_is_400(self, client, prod, delay):
        body = {"memberId": "csr_x", "generationId": 1, "id": "m", "delay": delay}
        r = await client.post("/v1/topics/t/groups/g/nack", json=body, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")

    @pytest.mark.parametrize("value", ["²", "١٢٣", "𝟙𝟚"])  # digits to str.isdigit(), not to int()
    async def test_non_ascii_digits_are_400_not_500(self, client, prod, value):
        # Found by the contract fuzzer: fromTimestamp=² answered 500.
        await client.post("/v1/topics", json={"name": "digits"}, headers=prod)
        r = await client.get(
            "/v1/topics/digits/partitions/0/messages", params={"fromTimestamp": value}, headers=prod
        )
        assert_envelope(r, 400, "INVALID_REQUEST")
        await client.put("/v1/topics/digits/groups/g", json={"deadLetter": {"maxRetries": 1}}, headers=prod)
        from app.broker.topics import encode_cursor

        cursor = encode_cursor(value)  # a well-formed cursor around the digits: their own check refuses them
        r = await client.get("/v1/topics/digits/groups/g/dlq", params={"cursor": cursor}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")

    async def test_a_trailing_newline_passes_no_check(self, client, prod):
        r = await client.post("/v1/topics", json={"name": "probe.st\n"}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.post("/v1/topics", json={"name": "probe.nl", "retention": "7d\n"}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        assert (await client.post("/v1/topics", json={"name": "probe.nl"}, headers=prod)).status_code == 201
        r = await client.put("/v1/topics/probe.nl/groups/g", json={"ackTimeout": "30s\n"}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        r = await client.put("/v1/topics/probe.nl/groups/g%0A", json={"ackTimeout": "30s"}, headers=prod)
        assert_envelope(r, 400, "INVALID_REQUEST")
        listed = (await client.get("/v1/topics", headers=prod)).json()["data"]
        assert [t["name"] for t in listed if t["name"].startswith("probe.")] == ["probe.nl"]
