"""Durations of group config and nacks."""

from __future__ import annotations

import pytest

from app.broker import durations
from app.broker.errors import InvalidRequest


class TestParse:
    @pytest.mark.parametrize(
        ("text", "ms"), [("1s", 1000), ("500ms", 500), ("30s", 30_000), ("5m", 300_000), ("12h", 43_200_000)]
    )
    def test_units(self, text, ms):
        assert durations.parse(text, "ackTimeout", durations.NACK_DELAY) == ms

    @pytest.mark.parametrize("text", ["999ms", "13h", "1d", "0s"])
    def test_ack_timeout_range(self, text):
        with pytest.raises(InvalidRequest) as error:
            durations.parse(text, "ackTimeout", durations.ACK_TIMEOUT)
        assert error.value.details[0]["field"] == "ackTimeout"

    @pytest.mark.parametrize("text", ["1s", "6m", "", "10", "s", "-1s", "1.5s", " 1s", "1S", 10])
    def test_session_timeout_refusals(self, text):
        with pytest.raises(InvalidRequest):
            durations.parse(text, "sessionTimeout", durations.SESSION_TIMEOUT)

    def test_session_timeout_bounds(self):
        assert durations.parse("2s", "s", durations.SESSION_TIMEOUT) == 2000
        assert durations.parse("5m", "s", durations.SESSION_TIMEOUT) == 300_000

    def test_retry_delay_allows_zero(self):
        assert durations.parse("0s", "retryDelay", durations.RETRY_DELAY) == 0
        with pytest.raises(InvalidRequest):
            durations.parse("61m", "retryDelay", durations.RETRY_DELAY)


class TestDelay:
    def test_string_or_seconds(self):
        assert durations.parse_delay("30s") == 30_000
        assert durations.parse_delay(2) == 2000
        assert durations.parse_delay(0.25) == 250

    @pytest.mark.parametrize("value", [-1, True, "soon", 13 * 3600, None])
    def test_refusals(self, value):
        with pytest.raises(InvalidRequest):
            durations.parse_delay(value)
