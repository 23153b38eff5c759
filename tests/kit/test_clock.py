"""The clock: ``isoformat_ms`` (the wire's timestamp format, from epoch milliseconds or a datetime), the
``Clock`` protocol and the system clock, and the manual one the tests move."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.kit import clock
from app.kit.clock import SYSTEM_CLOCK, Clock, SystemClock, isoformat_ms
from tests.fixtures.clock import ManualClock


def reference(ms: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def test_epoch_milliseconds_format_with_millis_and_z() -> None:
    assert isoformat_ms(1774694538003) == "2026-03-28T10:42:18.003Z"
    assert isoformat_ms(0) == "1970-01-01T00:00:00.000Z"
    assert isoformat_ms(-1) == "1969-12-31T23:59:59.999Z"


def test_alternating_and_many_seconds_each_format_their_own() -> None:
    # A delivery formats a record's timestamp and its ack deadline in turn; a sweep of more seconds
    # than are kept formatted must not hand one second's prefix to another.
    now = 1774694538003
    values = [v for i in range(40) for v in (now + i * 7, now + 30_000 + i * 1_001)]
    values += [now + i * 1000 + i for i in range(100)]
    for value in values:
        assert isoformat_ms(value) == reference(value), value


def test_datetimes_are_converted_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert (
        isoformat_ms(datetime(2026, 3, 28, 12, 42, 18, 3999, tzinfo=plus_two)) == "2026-03-28T10:42:18.003Z"
    )
    assert isoformat_ms(datetime(2026, 3, 28, 10, 42, 18, 3999)) == "2026-03-28T10:42:18.003Z"  # naive: UTC


class TestSystemClock:
    def test_now_ms_is_the_epoch_in_milliseconds(self):
        before = time.time_ns() // 1_000_000
        now = SYSTEM_CLOCK.now_ms()
        after = time.time_ns() // 1_000_000
        assert before <= now <= after
        assert before <= clock.now_ms() <= time.time_ns() // 1_000_000

    def test_monotonic_never_goes_backwards(self):
        readings = [SYSTEM_CLOCK.monotonic_ns() for _ in range(1000)]
        assert readings == sorted(readings)

    def test_it_is_a_clock(self):
        assert isinstance(SYSTEM_CLOCK, SystemClock)
        used: Clock = SystemClock()
        assert abs(used.now_ms() - SYSTEM_CLOCK.now_ms()) < 1000


class TestManualClock:
    def test_it_follows_the_host_until_advanced(self):
        manual = ManualClock()
        assert abs(manual.now_ms() - SYSTEM_CLOCK.now_ms()) < 1000
        before_ms, before = manual.now_ms(), manual.monotonic_ns()
        manual.advance(90)
        assert manual.now_ms() - before_ms >= 90_000
        assert manual.monotonic_ns() - before >= 90_000_000_000

    def test_reset_takes_the_advances_back(self):
        manual = ManualClock()
        manual.advance(3600)
        manual.reset()
        assert abs(manual.now_ms() - SYSTEM_CLOCK.now_ms()) < 1000

    def test_a_frozen_clock_moves_only_when_advanced(self):
        manual = ManualClock(start_ms=1_000)
        assert (manual.now_ms(), manual.monotonic_ns()) == (1_000, 0)
        time.sleep(0.01)
        assert manual.now_ms() == 1_000
        manual.advance(1.5)
        manual.advance(0.25)
        assert (manual.now_ms(), manual.monotonic_ns()) == (2_750, 1_750_000_000)

    def test_it_is_never_moved_back(self):
        with pytest.raises(ValueError):
            ManualClock().advance(-1)
