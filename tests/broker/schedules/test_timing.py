"""Due times: ``every`` from its anchor, five-field cron in a time zone with cron's DST rules, and the
validation that names the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.broker.errors import InvalidRequest
from app.broker.schedules import timing


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def utc(value: int) -> str:
    return datetime.fromtimestamp(value / 1000, UTC).isoformat()


class TestEvery:
    def test_due_times_are_anchor_plus_whole_periods(self):
        cadence = timing.cadence(None, "1500ms", None, 10_000)
        assert cadence.next_after(10_000) == 11_500
        assert cadence.next_after(11_499) == 11_500
        assert cadence.next_after(11_500) == 13_000
        assert cadence.next_after(0) == 11_500  # never before the first period ends

    def test_the_zone_does_not_move_them(self):
        berlin = timing.cadence(None, "1h", "Europe/Berlin", 0)
        assert berlin.next_after(ms("2026-10-25T00:30:00+00:00")) == ms("2026-10-25T01:00:00+00:00")


class TestCron:
    def test_evaluated_in_the_time_zone(self):
        cadence = timing.cadence("0 9 * * MON-FRI", None, "America/New_York", 0)
        # Saturday 2026-03-28: the next is Monday 09:00 EDT (13:00 UTC).
        assert utc(cadence.next_after(ms("2026-03-28T12:00:00+00:00"))) == "2026-03-30T13:00:00+00:00"

    def test_a_time_skipped_by_spring_forward_runs_once_after_the_gap(self):
        cadence = timing.cadence("30 2 * * *", None, "Europe/Berlin", 0)
        # 2026-03-29 02:30 does not exist in Berlin: the run is at 03:00 CEST (01:00 UTC), once.
        first = cadence.next_after(ms("2026-03-28T12:00:00+00:00"))
        assert utc(first) == "2026-03-29T01:00:00+00:00"
        assert utc(cadence.next_after(first)) == "2026-03-30T00:30:00+00:00"

    def test_a_time_repeated_by_fall_back_runs_once(self):
        cadence = timing.cadence("30 2 * * *", None, "Europe/Berlin", 0)
        first = cadence.next_after(ms("2026-10-24T12:00:00+00:00"))
        assert utc(first) == "2026-10-25T00:30:00+00:00"  # 02:30 CEST, the first occurrence
        assert utc(cadence.next_after(first)) == "2026-10-26T01:30:00+00:00"  # not 02:30 CET as well

    def test_due_times_are_strictly_after(self):
        cadence = timing.cadence("* * * * *", None, None, 0)
        assert cadence.next_after(ms("2026-01-01T10:00:00+00:00")) == ms("2026-01-01T10:01:00+00:00")


class TestValidation:
    @pytest.mark.parametrize(
        ("cron", "every", "zone", "field"),
        [
            (None, None, None, "cron"),
            ("* * * * *", "1s", None, "every"),
            ("* * * * * *", None, None, "cron"),
            ("@hourly", None, None, "cron"),
            ("0 0 31 2 *", None, None, "cron"),
            ("x * * * *", None, None, "cron"),
            (None, "999ms", None, "every"),
            (None, "367d", None, "every"),
            (None, "1s", "Nowhere/City", "timezone"),
            (None, "1s", "", "timezone"),
        ],
    )
    def test_refusals_name_the_field(self, cron, every, zone, field):
        with pytest.raises(InvalidRequest) as raised:
            timing.cadence(cron, every, zone, 0)
        assert raised.value.details is not None and raised.value.details[0]["field"] == field

    def test_default_zone_is_utc_and_spaces_are_normalised(self):
        cadence = timing.cadence("*/5   *  * * *", None, None, 0)
        assert (cadence.cron, cadence.timezone) == ("*/5 * * * *", "UTC")
