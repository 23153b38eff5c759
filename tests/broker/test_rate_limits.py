"""The tier table and how custom (enterprise) limits resolve."""

from __future__ import annotations

import pytest

from app.broker.rate_limits import DEFAULT_LIMITS, WINDOW_MS, Category, Tier, limit_for

PRODUCT_TABLE = {
    ("developer", "publish"): 100,
    ("developer", "consume"): 50,
    ("developer", "admin"): 10,
    ("pro", "publish"): 1000,
    ("pro", "consume"): 500,
    ("pro", "admin"): 50,
}


class TestTierTable:
    @pytest.mark.parametrize(("tier", "category"), PRODUCT_TABLE)
    def test_product_limits(self, tier, category):
        assert limit_for(tier, None, category) == PRODUCT_TABLE[tier, category]
        assert limit_for(Tier(tier), None, Category(category)) == PRODUCT_TABLE[tier, category]

    def test_every_tier_has_every_category(self):
        assert set(DEFAULT_LIMITS) == set(Tier)
        assert all(set(limits) == set(Category) for limits in DEFAULT_LIMITS.values())

    def test_enterprise_without_custom_limits_is_charged_as_pro(self):
        for category in Category:
            assert limit_for(Tier.enterprise, None, category) == limit_for(Tier.pro, None, category)
            assert limit_for(Tier.enterprise, {}, category) == limit_for(Tier.pro, None, category)

    def test_the_window_is_one_second(self):
        assert WINDOW_MS == 1000

    def test_the_table_is_read_only(self):
        with pytest.raises(TypeError):
            DEFAULT_LIMITS[Tier.pro][Category.publish] = 1  # type: ignore[index]


class TestCustomLimits:
    def test_enterprise_custom_limits_apply(self):
        custom = {"publish": 5000, "consume": 2000, "admin": 100}
        assert limit_for("enterprise", custom, Category.publish) == 5000
        assert limit_for("enterprise", custom, Category.consume) == 2000
        assert limit_for("enterprise", custom, Category.admin) == 100

    def test_a_category_left_out_falls_back_to_pro(self):
        custom = {"publish": 5000}
        assert limit_for("enterprise", custom, "publish") == 5000
        assert limit_for("enterprise", custom, "consume") == 500
        assert limit_for("enterprise", custom, "admin") == 50

    def test_custom_limits_may_be_lower_than_pro(self):
        assert limit_for("enterprise", {"admin": 3}, "admin") == 3

    @pytest.mark.parametrize("tier", ["developer", "pro"])
    def test_other_tiers_ignore_stale_custom_limits(self, tier):
        custom = {"publish": 5000, "consume": 2000, "admin": 100}
        for category in Category:
            assert limit_for(tier, custom, category) == DEFAULT_LIMITS[Tier(tier)][category]

    @pytest.mark.parametrize("value", [0, -5, "100", 1.5, None, True])
    def test_unusable_custom_values_fall_back_to_the_default(self, value):
        assert limit_for("enterprise", {"publish": value}, "publish") == 1000


class TestUnknownNames:
    def test_unknown_tier(self):
        with pytest.raises(ValueError):
            limit_for("platinum", None, "publish")

    def test_unknown_category(self):
        with pytest.raises(ValueError):
            limit_for("pro", None, "subscribe")
