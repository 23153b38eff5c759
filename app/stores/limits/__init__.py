"""The limits store: sliding-log limits per bucket, and token buckets of group rates, in Redis (shared)
or in this process.

``protocol.RateLimiter`` is the interface; ``memory.MemoryRateLimiter`` the embedded default;
``redis.RedisRateLimiter`` the shared one (imported from its module, so the embedded default never
needs a Redis client). ``protocol.TokenBuckets`` likewise, implemented in ``tokens.py``.
"""

from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import Decision, RateLimiter, Taken, TokenBuckets

__all__ = ["Decision", "MemoryRateLimiter", "RateLimiter", "Taken", "TokenBuckets"]
