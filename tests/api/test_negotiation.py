"""``Accept`` against one media type (``app/api/negotiation.py``): RFC 9110's rules, without a server."""

from __future__ import annotations

import pytest

from app.api.negotiation import admits

RECORDS = "application/vnd.queuecore.records"


class TestAdmits:
    @pytest.mark.parametrize(
        "accept",
        [
            None,
            "",
            "  ",
            "*/*",
            "application/*",
            RECORDS,
            "Application/Vnd.QueueCore.Records",
            f"{RECORDS};q=0.001",
            f" text/html , {RECORDS} ; q = 0.5 ",
            f"text/html,,{RECORDS}",
            "*/*;q=0.1, text/html",
            f"application/*;q=0, {RECORDS}",
            f"{RECORDS};q=0, {RECORDS};q=1",
        ],
    )
    def test_admitted(self, accept):
        assert admits(accept, RECORDS)

    @pytest.mark.parametrize(
        "accept",
        [
            "text/html",
            "application/json",
            "text/*",
            "*/records",
            "vnd.queuecore.records",
            f"{RECORDS};q=0",
            f"{RECORDS};q=0.000",
            f"*/*, {RECORDS};q=0",
            f"application/*, {RECORDS};q=0",
            "*/*;q=0",
            f"{RECORDS};q=1.5",
            f"{RECORDS};q=-1",
            f"{RECORDS};q=high",
            f"{RECORDS};q=nan",
            ",",
        ],
    )
    def test_refused(self, accept):
        assert not admits(accept, RECORDS)
