"""``isoformat_ms``: the wire's timestamp format, from epoch milliseconds or a datetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from app.kit.clock import isoformat_ms


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
