"""Every rate limiter honours one contract: an exact sliding log per bucket, refusals not counted.

The parametrized classes run every scenario on ``memory`` and ``redis``. Windows are short (a few hundred
ms) so the sliding is observed without long sleeps; timing margins are ~150 ms for a noisy machine.
Implementation-specific behaviour (the memory sweep, the Redis key layout and clock, exactness across
OS processes) follows at the end.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import pytest

from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import Decision, RateLimiter
from app.stores.limits.redis import RedisRateLimiter
from tests.stores.limits.conftest import IMPLEMENTATIONS, REDIS_URL

every_limiter = pytest.mark.parametrize("limiter", IMPLEMENTATIONS, indirect=True)


def assert_sliding(accepted_us: list[int], limit: int, window_ms: int) -> None:
    """No half-open window of ``window_ms`` holds more than ``limit`` of the acceptance times."""
    times = sorted(accepted_us)
    window_us = window_ms * 1000
    for i in range(len(times) - limit):
        assert times[i + limit] - times[i] >= window_us, (
            f"{limit + 1} accepted within {(times[i + limit] - times[i]) / 1000:.3f} ms "
            f"(window {window_ms} ms)"
        )


async def burst(limiter: RateLimiter, bucket: str, n: int, limit: int, window_ms: int) -> list[Decision]:
    return [await limiter.acquire(bucket, limit, window_ms) for _ in range(n)]


async def sleep_until(deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))


@every_limiter
class TestExactLimit:
    async def test_accepts_exactly_the_limit_then_refuses(self, limiter, bucket):
        name = bucket()
        decisions = await burst(limiter, name, 8, 5, 5000)
        assert [d.allowed for d in decisions] == [True] * 5 + [False] * 3
        assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0, 0, 0, 0]
        assert {d.limit for d in decisions} == {5}

    async def test_limit_of_one(self, limiter, bucket):
        name = bucket()
        assert [d.allowed for d in await burst(limiter, name, 3, 1, 5000)] == [True, False, False]

    async def test_status(self, limiter):
        expected = "embedded" if isinstance(limiter, MemoryRateLimiter) else "ok"
        assert await limiter.status() == expected

    @pytest.mark.parametrize(("limit", "window_ms"), [(0, 1000), (-1, 1000), (5, 0)])
    async def test_refuses_impossible_arguments(self, limiter, bucket, limit, window_ms):
        with pytest.raises(ValueError):
            await limiter.acquire(bucket(), limit, window_ms)


@every_limiter
class TestRefusedRequestsDoNotCount:
    async def test_refusals_do_not_delay_the_next_window(self, limiter, bucket):
        name = bucket()
        window_ms = 400
        assert all(d.allowed for d in await burst(limiter, name, 2, 2, window_ms))
        accepted_at = time.monotonic()
        # Refusals keep arriving for most of the window; were they counted, the bucket would stay full.
        while time.monotonic() < accepted_at + 0.3:
            assert not (await limiter.acquire(name, 2, window_ms)).allowed
            await asyncio.sleep(0.01)
        await sleep_until(accepted_at + window_ms / 1000 + 0.05)
        assert [d.allowed for d in await burst(limiter, name, 3, 2, window_ms)] == [True, True, False]


@every_limiter
class TestSlidingWindow:
    async def test_one_more_is_accepted_when_the_oldest_leaves(self, limiter, bucket):
        name, limit, window_ms = bucket(), 3, 400
        assert (await limiter.acquire(name, limit, window_ms)).allowed  # A
        a_done = time.monotonic()
        await asyncio.sleep(0.2)
        b_start = time.monotonic()
        assert [d.allowed for d in await burst(limiter, name, 3, limit, window_ms)] == [True, True, False]
        # A has left, B and C (accepted 200 ms later) have not: exactly one more.
        await sleep_until(a_done + window_ms / 1000 + 0.04)
        assert time.monotonic() < b_start + window_ms / 1000, "machine too slow for this scenario"
        assert [d.allowed for d in await burst(limiter, name, 2, limit, window_ms)] == [True, False]
        # Then B and C leave: two more.
        await sleep_until(b_start + window_ms / 1000 + 0.05)
        got = [d.allowed for d in await burst(limiter, name, 3, limit, window_ms)]
        assert got[:2] == [True, True]

    async def test_no_window_ever_holds_more_than_the_limit(self, limiter, bucket):
        """Hammered without pause across many windows, the accepted times form an exact sliding log."""
        name, limit, window_ms = bucket(), 5, 150
        accepted: list[int] = []
        end = time.monotonic() + 0.8
        while time.monotonic() < end:
            decision = await limiter.acquire(name, limit, window_ms)
            if decision.allowed:
                assert decision.at_us is not None
                accepted.append(decision.at_us)
        assert_sliding(accepted, limit, window_ms)
        # The window really slid: several windows' worth were accepted, not just the first.
        assert len(accepted) >= 3 * limit


@every_limiter
class TestDecisionValues:
    async def test_accepted_decision(self, limiter, bucket):
        decision = await limiter.acquire(bucket(), 10, 200)
        assert decision == Decision(True, 10, 9, 1, 0, decision.at_us)

    async def test_decision_time_is_epoch_microseconds(self, limiter, bucket):
        first = await limiter.acquire(bucket(), 1, 1000)
        second = await limiter.acquire(bucket(), 1, 1000)
        # Redis runs on this host in the suite, so its clock and ours agree to well within a second.
        assert abs(first.at_us - time.time_ns() // 1000) < 1_000_000
        assert second.at_us >= first.at_us

    async def test_reset_and_retry_after_round_up(self, limiter, bucket):
        name = bucket()
        first = await limiter.acquire(name, 2, 2500)
        assert (first.remaining, first.reset_seconds, first.retry_after_seconds) == (1, 3, 0)
        second = await limiter.acquire(name, 2, 2500)
        refused = await limiter.acquire(name, 2, 2500)
        assert (second.allowed, refused.allowed) == (True, False)
        assert (refused.remaining, refused.reset_seconds, refused.retry_after_seconds) == (0, 3, 3)

    async def test_retry_after_is_the_real_time_until_room(self, limiter, bucket):
        """Retry-After counts from the oldest request's departure, Reset from the newest's."""
        name, lowered = bucket(), bucket()
        await burst(limiter, name, 1, 2, 2500)
        await burst(limiter, lowered, 3, 5, 2500)
        await asyncio.sleep(0.6)
        assert (await limiter.acquire(name, 2, 2500)).allowed
        await burst(limiter, lowered, 2, 5, 2500)
        refused = await limiter.acquire(name, 2, 2500)
        # The oldest leaves in ~1.9 s, the newest in ~2.5 s.
        assert (refused.allowed, refused.retry_after_seconds, refused.reset_seconds) == (False, 2, 3)
        # Five counted and the limit lowered to two: room appears when the fourth oldest leaves (~2.5 s).
        lowered_decision = await limiter.acquire(lowered, 2, 2500)
        assert (lowered_decision.allowed, lowered_decision.remaining) == (False, 0)
        assert lowered_decision.retry_after_seconds == 3

    async def test_retry_after_is_at_least_one_second(self, limiter, bucket):
        name = bucket()
        await limiter.acquire(name, 1, 50)
        refused = await limiter.acquire(name, 1, 50)
        assert (refused.allowed, refused.retry_after_seconds, refused.reset_seconds) == (False, 1, 1)


@every_limiter
class TestIndependentBuckets:
    async def test_a_full_bucket_leaves_others_alone(self, limiter, bucket):
        full, other = bucket(), bucket()
        await burst(limiter, full, 3, 3, 5000)
        assert not (await limiter.acquire(full, 3, 5000)).allowed
        decisions = await burst(limiter, other, 4, 3, 5000)
        assert [d.allowed for d in decisions] == [True, True, True, False]
        assert decisions[0].remaining == 2

    async def test_each_bucket_has_its_own_limit(self, limiter, bucket):
        small, large = bucket(), bucket()
        assert sum(d.allowed for d in await burst(limiter, small, 10, 2, 5000)) == 2
        assert sum(d.allowed for d in await burst(limiter, large, 10, 7, 5000)) == 7


@every_limiter
class TestConcurrentAcquires:
    async def test_gathered_acquires_never_exceed_the_limit(self, limiter, bucket):
        name, limit = bucket(), 37
        decisions = await asyncio.gather(*(limiter.acquire(name, limit, 5000) for _ in range(150)))
        accepted = [d for d in decisions if d.allowed]
        assert len(accepted) == limit
        assert sorted(d.remaining for d in accepted) == list(range(limit))
        assert all(d.remaining == 0 and d.retry_after_seconds >= 1 for d in decisions if not d.allowed)

    async def test_gathered_acquires_are_decided_in_arrival_order(self, limiter, bucket):
        name = bucket()
        decisions = await asyncio.gather(*(limiter.acquire(name, 4, 5000) for _ in range(9)))
        assert [d.allowed for d in decisions] == [True] * 4 + [False] * 5
        assert [d.remaining for d in decisions] == [3, 2, 1, 0, 0, 0, 0, 0, 0]

    async def test_gathered_across_buckets(self, limiter, bucket):
        names = [bucket() for _ in range(8)]
        calls = [limiter.acquire(name, 6, 5000) for name in names for _ in range(15)]
        decisions = await asyncio.gather(*calls)
        for i in range(len(names)):
            assert sum(d.allowed for d in decisions[i * 15 : (i + 1) * 15]) == 6


@every_limiter
class TestPeekAndForget:
    async def test_peek_answers_without_counting(self, limiter, bucket):
        name = bucket()
        for _ in range(3):
            assert (await limiter.peek(name, 2, 5000)).allowed
        assert [d.allowed for d in await burst(limiter, name, 3, 2, 5000)] == [True, True, False]
        refused = await limiter.peek(name, 2, 5000)
        assert not refused.allowed and refused.retry_after_seconds >= 1

    async def test_forget_empties_the_bucket_and_no_other(self, limiter, bucket):
        name, other = bucket(), bucket()
        await burst(limiter, name, 2, 2, 5000)
        await burst(limiter, other, 2, 2, 5000)
        await limiter.forget(name)
        assert (await limiter.peek(name, 2, 5000)).remaining == 2
        assert not (await limiter.peek(other, 2, 5000)).allowed
        await limiter.forget(bucket())  # an unknown bucket is no error


class FakeClock:
    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns

    def advance(self, ms: float) -> None:
        self.ns += int(ms * 1_000_000)


class TestMemoryLimiter:
    """In-process specifics: the half-open window on an exact clock, and the sweep of idle buckets."""

    async def test_window_is_half_open(self):
        clock = FakeClock()
        limiter = MemoryRateLimiter(clock)
        assert (await limiter.acquire("b", 1, 1000)).allowed
        clock.advance(999.999999)
        refused = await limiter.acquire("b", 1, 1000)
        assert (refused.allowed, refused.retry_after_seconds) == (False, 1)
        clock.advance(0.000001)
        assert (await limiter.acquire("b", 1, 1000)).allowed

    async def test_retry_after_counts_real_time(self):
        clock = FakeClock()
        limiter = MemoryRateLimiter(clock)
        await limiter.acquire("b", 1, 3000)
        clock.advance(900)
        assert (await limiter.acquire("b", 1, 3000)).retry_after_seconds == 3  # 2.1 s
        clock.advance(200)
        assert (await limiter.acquire("b", 1, 3000)).retry_after_seconds == 2  # 1.9 s

    async def test_idle_buckets_are_dropped(self):
        clock = FakeClock()
        limiter = MemoryRateLimiter(clock)
        for i in range(1000):
            await limiter.acquire(f"idle-{i}", 10, 1000)
        assert len(limiter) == 1000
        clock.advance(500)
        await limiter.acquire("busy", 10, 1000)
        assert len(limiter) == 1001, "buckets still inside their window are kept"
        clock.advance(500)
        for _ in range(200):
            await limiter.acquire("busy", 10_000, 1000)
            clock.advance(1)
        assert len(limiter) == 1

    async def test_a_bucket_holds_at_most_the_limit(self):
        clock = FakeClock()
        limiter = MemoryRateLimiter(clock)
        for _ in range(1000):
            await limiter.acquire("b", 3, 1000)
            clock.advance(10)
        assert len(limiter._buckets["b"].times) == 3


@pytest.fixture
async def redis_limiter():
    instance = RedisRateLimiter(REDIS_URL, key_prefix="qc:test:rl:specific:")
    try:
        yield instance
    finally:
        await instance.close()


class TestRedisLimiter:
    """Redis specifics: the clock is Redis's, the key layout, and idle keys vanishing."""

    async def test_decisions_use_the_redis_clock(self, redis_limiter, redis_client, bucket):
        seconds, micros = await redis_client.time()
        before = seconds * 1_000_000 + micros
        decision = await redis_limiter.acquire(bucket(), 5, 1000)
        seconds, micros = await redis_client.time()
        assert decision.at_us is not None
        assert before <= decision.at_us <= seconds * 1_000_000 + micros

    async def test_one_member_per_accepted_request_and_a_ttl_of_one_window(
        self, redis_limiter, redis_client, bucket
    ):
        name = bucket()
        key = redis_limiter.key_prefix + name
        decisions = await burst(redis_limiter, name, 6, 4, 300)
        assert sum(d.allowed for d in decisions) == 4
        assert await redis_client.zcard(key) == 4
        members = await redis_client.zrange(key, 0, -1, withscores=True)
        assert len({m for m, _ in members}) == 4
        assert all(int(score) == int(m.split(b":")[0]) for m, score in members)
        assert 0 < await redis_client.pttl(key) <= 300
        await asyncio.sleep(0.4)
        assert await redis_client.exists(key) == 0

    async def test_requests_waiting_for_a_bucket_are_decided_in_one_call(
        self, redis_limiter, redis_client, bucket
    ):
        # Group commit: 100 gathered requests are the first request's call and one more for the other 99.
        name = bucket()
        before = redis_limiter.calls
        decisions = await asyncio.gather(*(redis_limiter.acquire(name, 60, 5000) for _ in range(100)))
        assert redis_limiter.calls - before == 2
        assert sum(d.allowed for d in decisions) == 60
        assert await redis_client.zcard(redis_limiter.key_prefix + name) == 60
        assert len({d.at_us for d in decisions}) == 2  # two decisions, two Redis clock readings

    async def test_two_instances_share_a_bucket(self, redis_limiter, bucket):
        other = RedisRateLimiter(REDIS_URL, key_prefix=redis_limiter.key_prefix)
        try:
            name = bucket()
            first = await burst(redis_limiter, name, 3, 5, 5000)
            second = await burst(other, name, 3, 5, 5000)
            assert [d.allowed for d in first + second] == [True] * 5 + [False]
        finally:
            await other.close()


_WORKER = r"""
import asyncio, json, sys, time
from app.stores.limits.redis import RedisRateLimiter

async def main(url, prefix, bucket, limit, window_ms, duration, tasks):
    limiter = RedisRateLimiter(url, key_prefix=prefix)
    assert await limiter.status() == "ok"
    accepted, refused = [], 0
    print("ready", flush=True)
    sys.stdin.readline()  # every process starts hammering at the same moment
    end = time.monotonic() + duration

    async def hammer():
        nonlocal refused
        while time.monotonic() < end:
            decision = await limiter.acquire(bucket, limit, window_ms)
            if decision.allowed:
                accepted.append(decision.at_us)
            else:
                refused += 1

    await asyncio.gather(*(hammer() for _ in range(tasks)))
    degraded = limiter.degraded
    await limiter.close()
    print(json.dumps({"accepted": accepted, "refused": refused, "degraded": degraded}), flush=True)

asyncio.run(main(*json.loads(sys.argv[1])))
"""


@pytest.mark.slow
class TestRedisAcrossProcesses:
    async def test_processes_sharing_a_bucket_never_exceed_the_limit(self, bucket):
        """Three OS processes, eight concurrent callers each, one bucket: the Redis accept times form an
        exact sliding log, and the limit was really reached."""
        limit, window_ms, duration = 20, 100, 1.0
        args = json.dumps([REDIS_URL, "qc:test:rl:procs:", bucket(), limit, window_ms, duration, 8])
        root = Path(__file__).resolve().parents[3]
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", _WORKER, args, cwd=root,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(3)
        ]  # fmt: skip
        try:
            for proc in procs:
                line = await asyncio.wait_for(proc.stdout.readline(), 30)
                assert line.strip() == b"ready"
            for proc in procs:
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
            results = []
            for proc in procs:
                out, _ = await asyncio.wait_for(proc.communicate(), 30)
                assert proc.returncode == 0
                results.append(json.loads(out))
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        assert not any(r["degraded"] for r in results)
        accepted = [at for r in results for at in r["accepted"]]
        assert all(r["accepted"] and r["refused"] for r in results), "every process got some of each"
        assert_sliding(accepted, limit, window_ms)
        # The check has teeth: the limiter ran full (a whole limit accepted inside one window) again
        # and again over the run.
        times = sorted(accepted)
        assert any(times[i + limit - 1] - times[i] < window_ms * 1000 for i in range(len(times) - limit))
        assert len(accepted) >= limit * math.floor(duration * 1000 / window_ms) // 2
