"""``timing.parse``: a publish body's delay / deliverAt / ttl / expiresAt against a fixed ``now``."""

from __future__ import annotations

import pytest

from app.broker import timing
from app.broker.errors import InvalidRequest

NOW = 1_800_000_000_000
DAY = 86_400_000


class TestParse:
    @pytest.mark.parametrize(
        ("item", "expected"),
        [
            ({}, (None, None)),
            ({"delay": "500ms"}, (NOW + 500, None)),
            ({"delay": 1.5}, (NOW + 1500, None)),
            ({"delay": "30d"}, (NOW + 30 * DAY, None)),
            ({"delay": 0}, (None, None)),
            ({"deliverAt": NOW + 1000}, (NOW + 1000, None)),
            ({"deliverAt": str(NOW + 1000)}, (NOW + 1000, None)),
            ({"deliverAt": NOW - 1}, (None, None)),
            ({"deliverAt": "2027-01-15T08:00:00.250Z"}, (NOW + 250, None)),
            ({"ttl": "1h"}, (None, NOW + 3_600_000)),
            ({"delay": "1m", "ttl": "2m"}, (NOW + 60_000, NOW + 120_000)),
            ({"expiresAt": NOW + 5}, (None, NOW + 5)),
            ({"delay": None, "deliverAt": NOW + 7}, (NOW + 7, None)),
        ],
    )
    def test_accepted(self, item, expected):
        assert timing.parse(item, NOW) == expected

    @pytest.mark.parametrize(
        ("item", "field"),
        [
            ({"delay": "1s", "deliverAt": NOW}, "deliverAt"),
            ({"delay": -0.001}, "delay"),
            ({"delay": "30d1"}, "delay"),
            ({"delay": 30 * 86400 + 0.01}, "delay"),
            ({"delay": float("nan")}, "delay"),
            ({"deliverAt": NOW + 30 * DAY + 1}, "deliverAt"),
            ({"deliverAt": "2027-01-15T08:00:00"}, "deliverAt"),
            ({"deliverAt": [1]}, "deliverAt"),
            ({"ttl": "1s", "expiresAt": NOW + 5000}, "expiresAt"),
            ({"ttl": 0}, "ttl"),
            ({"ttl": "366d"}, "ttl"),
            ({"delay": "2m", "ttl": "2m"}, "ttl"),
            ({"deliverAt": NOW + 10, "expiresAt": NOW + 10}, "expiresAt"),
            ({"expiresAt": NOW}, "expiresAt"),
        ],
    )
    def test_refused_naming_the_field(self, item, field):
        with pytest.raises(InvalidRequest) as info:
            timing.parse(item, NOW)
        assert info.value.details[0]["field"] == field
        with pytest.raises(InvalidRequest) as info:
            timing.parse(item, NOW, index=3)
        assert info.value.details[0]["field"] == f"messages[3].{field}"
