"""The rate-limit store: sliding-log limits per bucket, in Redis (shared) or in this process.

``protocol.RateLimiter`` is the interface; ``memory.MemoryRateLimiter`` the embedded default;
``redis.RedisRateLimiter`` the shared one (imported from its module, so the embedded default never
needs a Redis client).
"""

from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import Decision, RateLimiter

__all__ = ["Decision", "MemoryRateLimiter", "RateLimiter"]
