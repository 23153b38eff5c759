"""The quota table, enterprise custom quotas, the refusal's details, and custom limits as operators type them."""

from __future__ import annotations

import pytest

from app.broker import quotas, tenancy
from app.broker.errors import InvalidRequest, QuotaExceeded
from app.broker.quotas import Quota, QuotaLimits
from app.broker.rate_limits import Tier

GIB, TIB = 1 << 30, 1 << 40


class TestTable:
    def test_the_product_numbers(self):
        assert QuotaLimits("developer", None).all() == {
            "topics": 100,
            "partitions": 500,
            "groups": 20,
            "schedules": 25,
            "pushGroups": 10,
            "storedBytes": 10 * GIB,
        }
        assert QuotaLimits("pro", None).all() == {
            "topics": 2000,
            "partitions": 20_000,
            "groups": 500,
            "schedules": 1000,
            "pushGroups": 250,
            "storedBytes": TIB,
        }

    def test_enterprise_without_custom_quotas_holds_as_much_as_pro(self):
        assert QuotaLimits("enterprise", None).all() == QuotaLimits("pro", None).all()
        # Rate limits alone leave the quotas at pro's.
        custom = {"publish": 5000, "consume": 2000, "admin": 100}
        assert QuotaLimits("enterprise", custom).all() == QuotaLimits("pro", None).all()

    def test_enterprise_custom_quotas_apply_one_by_one(self):
        custom = {"publish": 5000, "topics": 7, "storedBytes": 0}
        limits = QuotaLimits("enterprise", custom)
        assert limits.limit(Quota.topics) == 7
        assert limits.limit(Quota.stored_bytes) == 0  # nothing may be stored: a limit, not "unset"
        assert limits.limit(Quota.partitions) == 20_000

    @pytest.mark.parametrize("tier", [Tier.developer, Tier.pro])
    def test_other_tiers_ignore_stale_custom_quotas(self, tier):
        assert quotas.limit_for(tier, {"topics": 99_999}, Quota.topics) == QuotaLimits(tier, None).limit(
            Quota.topics
        )

    @pytest.mark.parametrize("bad", [True, -1, "7", 7.5, None])
    def test_an_unusable_custom_entry_is_the_default(self, bad):
        assert quotas.limit_for("enterprise", {"topics": bad}, "topics") == 2000

    def test_unknown_names_raise(self):
        with pytest.raises(ValueError):
            quotas.limit_for("platinum", None, "topics")
        with pytest.raises(ValueError):
            quotas.limit_for("pro", None, "queues")


class TestCheck:
    def test_at_the_limit_is_refused_with_limit_and_use(self):
        limits = QuotaLimits("developer", None)
        quotas.check(Quota.topics, limits, 99)
        with pytest.raises(QuotaExceeded) as refused:
            quotas.check(Quota.topics, limits, 100)
        assert refused.value.code == "QUOTA_EXCEEDED"
        assert refused.value.details == [{"field": "topics", "issue": "limit 100, used 100"}]
        assert "topics per environment" in refused.value.message

    def test_several_at_once_must_all_fit(self):
        limits = QuotaLimits("developer", None)
        quotas.check(Quota.partitions, limits, 400, 100)
        with pytest.raises(QuotaExceeded) as refused:
            quotas.check(Quota.partitions, limits, 400, 101)
        assert refused.value.details == [{"field": "partitions", "issue": "limit 500, used 400"}]
        assert "would add 101" in refused.value.message


class TestCustomLimits:
    def test_rate_limits_and_quotas_together(self):
        parsed = tenancy.parse_custom_limits(
            "publish=5000,consume=2000,admin=100,topics=10,partitions=40,groups=3,schedules=0,"
            "pushGroups=2,storedBytes=5GiB"
        )
        assert parsed == {
            "publish": 5000,
            "consume": 2000,
            "admin": 100,
            "topics": 10,
            "partitions": 40,
            "groups": 3,
            "schedules": 0,
            "pushGroups": 2,
            "storedBytes": 5 * GIB,
        }

    @pytest.mark.parametrize(
        ("text", "size"),
        [("1234", 1234), ("64KiB", 64 << 10), ("512MiB", 512 << 20), ("10GiB", 10 * GIB), ("2TiB", 2 * TIB)],
    )
    def test_stored_bytes_in_binary_units(self, text, size):
        assert tenancy.parse_custom_limits(f"storedBytes={text}") == {"storedBytes": size}

    @pytest.mark.parametrize(
        "text",
        [
            "topics=-1",
            "topics=lots",
            "groupsPerTopic=3",
            "publish=0",  # a rate limit is at least 1
            "storedBytes=10GB",
            "storedBytes=GiB",
            "storedBytes=1.5GiB",
            "topics=²",
            f"topics={2**53}",
            "",
        ],
    )
    def test_refused(self, text):
        with pytest.raises(InvalidRequest) as refused:
            tenancy.parse_custom_limits(text)
        assert refused.value.details is not None and refused.value.details[0]["field"] == "limits"
