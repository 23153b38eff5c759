"""Status → exception, and what an exception carries."""

from __future__ import annotations

import httpx
import pytest
from sdk_support import envelope, json_response, sequence

import queuecore
from queuecore._exceptions import make_status_error

REQUEST = httpx.Request("GET", "http://queuecore.test/v1/topics/user.events")


def answer(status: int, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers, request=REQUEST)


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "INVALID_REQUEST", queuecore.BadRequestError),
        (401, "INVALID_API_KEY", queuecore.AuthenticationError),
        (403, "FORBIDDEN", queuecore.PermissionDeniedError),
        (404, "TOPIC_NOT_FOUND", queuecore.NotFoundError),
        (404, "MESSAGE_NOT_FOUND", queuecore.NotFoundError),
        (405, "METHOD_NOT_ALLOWED", queuecore.APIStatusError),
        (409, "TOPIC_ALREADY_EXISTS", queuecore.ConflictError),
        (413, "PAYLOAD_TOO_LARGE", queuecore.PayloadTooLargeError),
        (429, "RATE_LIMIT_EXCEEDED", queuecore.RateLimitError),
        (500, "INTERNAL_ERROR", queuecore.InternalServerError),
        (502, "BAD_GATEWAY", queuecore.InternalServerError),
        (503, "SERVICE_UNAVAILABLE", queuecore.ServiceUnavailableError),
    ],
)
def test_status_to_exception(status, code, cls):
    body = envelope(status, code, "The topic 'user.events' does not exist.", "req_7x9k2m4n")
    err = make_status_error(answer(status, body, {"X-Request-Id": "req_7x9k2m4n"}), body)
    assert type(err) is cls
    assert isinstance(err, queuecore.APIStatusError)
    assert isinstance(err, queuecore.APIError)
    assert isinstance(err, queuecore.QueueCoreError)
    assert (err.code, err.status, err.status_code, err.request_id) == (code, status, status, "req_7x9k2m4n")
    assert err.message == "The topic 'user.events' does not exist."
    assert err.response.status_code == status
    assert err.body == body


def test_str_leads_with_the_request_id():
    body = envelope(404, "TOPIC_NOT_FOUND", "The topic 'user.events' does not exist.", "req_7x9k2m4n")
    err = make_status_error(answer(404, body, {"X-Request-Id": "req_7x9k2m4n"}), body)
    assert str(err) == "Request req_7x9k2m4n: 404 TOPIC_NOT_FOUND: The topic 'user.events' does not exist."
    assert "req_7x9k2m4n" in repr(err) and "NotFoundError" in repr(err)


def test_request_id_from_the_body_when_the_header_is_missing():
    body = envelope(409, "TOPIC_ALREADY_EXISTS", "taken", "req_frombody")
    err = make_status_error(answer(409, body), body)
    assert err.request_id == "req_frombody"
    assert str(err).startswith("Request req_frombody: 409 TOPIC_ALREADY_EXISTS")


def test_a_non_envelope_answer():
    response = httpx.Response(502, text="<html>bad gateway</html>", request=REQUEST)
    err = make_status_error(response, None)
    assert isinstance(err, queuecore.InternalServerError)
    assert err.code is None and err.request_id is None
    assert str(err) == "502: HTTP 502 Bad Gateway"


def test_validation_details():
    body = envelope(400, "INVALID_REQUEST", "Invalid value for 'partitions'.")
    body["error"]["details"] = [{"field": "partitions", "issue": "must be between 1 and 256"}]
    err = make_status_error(answer(400, body), body)
    assert isinstance(err, queuecore.BadRequestError)
    assert err.details == [{"field": "partitions", "issue": "must be between 1 and 256"}]


def test_rate_limit_retry_after():
    body = envelope(429, "RATE_LIMIT_EXCEEDED")
    err = make_status_error(answer(429, body, {"Retry-After": "2"}), body)
    assert isinstance(err, queuecore.RateLimitError)
    assert err.retry_after == 2.0
    err = make_status_error(answer(429, body), body)
    assert err.retry_after is None


def test_connection_errors():
    err = queuecore.APITimeoutError(REQUEST)
    assert isinstance(err, queuecore.APIConnectionError)
    assert isinstance(err, queuecore.APIError)
    assert (err.code, err.status, err.request_id) == (None, None, None)
    assert str(err) == "Request to queuecore.test:80 timed out."  # names where it tried
    assert err.request is REQUEST


def test_raised_by_a_call(mock_client):
    body = envelope(404, "TOPIC_NOT_FOUND", "The topic 'user.events' does not exist.", "req_7x9k2m4n")
    client = mock_client(sequence(json_response(404, body, {"X-Request-Id": "req_7x9k2m4n"})))
    with pytest.raises(queuecore.NotFoundError) as info:
        client.topics.describe("user.events")
    assert info.value.request_id == "req_7x9k2m4n"
    assert info.value.code == "TOPIC_NOT_FOUND"


def test_no_api_key(monkeypatch):
    monkeypatch.delenv("QUEUECORE_API_KEY", raising=False)
    with pytest.raises(queuecore.QueueCoreError, match="QUEUECORE_API_KEY"):
        queuecore.QueueCore()
    with pytest.raises(queuecore.QueueCoreError):
        queuecore.AsyncQueueCore(api_key="")
