"""Rate limits: who may make how many requests per second, per API key and category.

Every API key is charged per :class:`Category` on a one-second sliding window (``WINDOW_MS``); the limit
depends on the project's :class:`Tier`:

=========== ======= ======= =====
tier        publish consume admin
=========== ======= ======= =====
developer       100      50    10
pro           1,000     500    50
enterprise   custom  custom custom
=========== ======= ======= =====

An enterprise project without custom limits (or without one for a category) gets the pro limit. Custom
limits belong to the enterprise tier only (``tenancy.set_tier`` refuses them elsewhere); a project moved
off enterprise is charged its tier's table even if stale custom limits were left behind.

The counting itself is the limiter store's job (``app/stores/limits``); this module is the table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

# The product's window: "in no one-second window are more than the limit accepted".
WINDOW_MS = 1000


class Category(enum.StrEnum):
    """What a request is charged as: the two publish calls, consuming, or everything else."""

    publish = "publish"
    consume = "consume"
    admin = "admin"


class Tier(enum.StrEnum):
    """A project's plan; enterprise limits are set per project by an operator."""

    developer = "developer"
    pro = "pro"
    enterprise = "enterprise"


DEFAULT_LIMITS: Mapping[Tier, Mapping[Category, int]] = MappingProxyType(
    {
        Tier.developer: MappingProxyType({Category.publish: 100, Category.consume: 50, Category.admin: 10}),
        Tier.pro: MappingProxyType({Category.publish: 1000, Category.consume: 500, Category.admin: 50}),
        # Until an operator sets custom limits, enterprise is charged as pro.
        Tier.enterprise: MappingProxyType(
            {Category.publish: 1000, Category.consume: 500, Category.admin: 50}
        ),
    }
)


def limit_for(tier: Tier | str, custom_limits: Mapping[str, object] | None, category: Category | str) -> int:
    """Requests per second allowed for ``category`` on ``tier``, honouring enterprise custom limits.

    ``custom_limits`` maps category names to positive integers, as stored on the project; a missing or
    unusable entry falls back to the tier's default. An unknown tier or category raises ``ValueError``.
    """
    if not custom_limits or tier != Tier.enterprise:
        found = _DEFAULTS.get((tier, category))  # on every request: no Enum construction
        if found is not None:
            return found
    tier = Tier(tier)
    category = Category(category)
    if tier is Tier.enterprise and custom_limits:
        custom = custom_limits.get(category.value)
        # bool is an int subclass; ``True`` is not a limit.
        if isinstance(custom, int) and not isinstance(custom, bool) and custom >= 1:
            return custom
    return DEFAULT_LIMITS[tier][category]


# The table by plain (tier, category) strings; StrEnum members hash and compare as their values.
_DEFAULTS: dict[tuple[str, str], int] = {
    (t.value, c.value): n for t, per in DEFAULT_LIMITS.items() for c, n in per.items()
}
