"""Rate-limit decision latency and throughput: Redis over loopback next to the in-process limiter.

What one API request pays for its rate-limit decision (one ``acquire``), measured in one run for both
stores so the machine's mood is shared:

* sequential latency: ``--decisions`` back-to-back decisions per repetition, each timed alone; p50,
  p99 and p99.9 per repetition, the median over ``--repeats`` repetitions reported. Two workloads:
  ``spread`` (1,000 buckets at the pro publish limit, every decision accepted, as many keys would be)
  and ``hot`` (one bucket at limit 1,000 hammered past its limit: the sorted set stays full and most
  decisions are refusals, the script's most expensive path). A Redis ``PING`` through the same client
  is timed too: the floor any Redis round trip pays here.
* throughput: ``--concurrency`` callers sharing one limiter until ``--concurrent-decisions`` decisions
  are made; decisions per second and the per-call latency under that load.

Run: ``.venv/bin/python bench/limiter_bench.py`` (Redis at 127.0.0.1:6379). It writes
``bench/results/limiter.json`` and ``bench/results/limiter.md``; ``--no-write`` only prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis
from redis.asyncio import Redis

from app.stores.limits.memory import MemoryRateLimiter
from app.stores.limits.protocol import RateLimiter
from app.stores.limits.redis import RedisRateLimiter

TARGET_P50_MS = 0.3
SPREAD_BUCKETS = 1000


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def summarise(latencies_ns: list[int]) -> dict[str, float]:
    values = sorted(v / 1_000_000 for v in latencies_ns)
    return {
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "p999_ms": percentile(values, 99.9),
        "mean_ms": statistics.fmean(values),
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["runs"] = runs
    return out


def workload(name: str, tag: str) -> Callable[[int], tuple[str, int]]:
    """Bucket and limit for the i-th decision of a workload."""
    if name == "spread":
        return lambda i: (f"{tag}:spread:{i % SPREAD_BUCKETS}", 1000)
    if name == "hot":
        return lambda i: (f"{tag}:hot", 1000)
    raise ValueError(name)


async def time_sequential(call: Callable[[int], Awaitable[object]], n: int) -> list[int]:
    latencies = [0] * n
    clock = time.perf_counter_ns
    for i in range(n):
        start = clock()
        await call(i)
        latencies[i] = clock() - start
    return latencies


async def sequential(limiter: RateLimiter, name: str, n: int) -> dict[str, float]:
    pick = workload(name, secrets.token_hex(4))
    accepted = 0

    async def call(i: int) -> object:
        nonlocal accepted
        bucket, limit = pick(i)
        decision = await limiter.acquire(bucket, limit)
        accepted += decision.allowed
        return decision

    await time_sequential(call, min(n, 2000))  # warm-up: connections, script cache, allocator
    accepted = 0
    latencies = await time_sequential(call, n)
    return {**summarise(latencies), "accepted_share": accepted / n}


async def ping(client: Redis, n: int) -> dict[str, float]:
    async def call(_: int) -> object:
        return await client.ping()

    await time_sequential(call, min(n, 2000))
    return summarise(await time_sequential(call, n))


async def redis_cpu_seconds(client: Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def concurrent(
    limiter: RateLimiter, callers: int, total: int, client: Redis | None = None
) -> dict[str, float]:
    """Throughput of ``callers`` sharing ``limiter``; with ``client``, the CPU Redis and this process used."""
    pick = workload("spread", secrets.token_hex(4))
    latencies: list[int] = []
    next_index = 0
    clock = time.perf_counter_ns

    async def caller() -> None:
        nonlocal next_index
        while next_index < total:
            i = next_index
            next_index += 1
            bucket, limit = pick(i)
            start = clock()
            await limiter.acquire(bucket, limit)
            latencies.append(clock() - start)

    redis_cpu = await redis_cpu_seconds(client) if client is not None else 0.0
    own_cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    elapsed = time.perf_counter() - started
    out = {"decisions_per_s": total / elapsed, **summarise(latencies)}
    out["client_cpu_share"] = (time.process_time() - own_cpu) / elapsed
    if client is not None:
        out["redis_cpu_share"] = (await redis_cpu_seconds(client) - redis_cpu) / elapsed
    return out


async def bench_loop(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"qc:bench:{secrets.token_hex(4)}:"
    redis_limiter = RedisRateLimiter(args.redis_url, key_prefix=prefix, max_connections=args.max_connections)
    memory_limiter = MemoryRateLimiter()
    client = Redis.from_url(args.redis_url)
    if await redis_limiter.status() != "ok":
        raise SystemExit(f"redis at {args.redis_url} does not answer")
    results: dict[str, Any] = {"sequential": {}, "concurrent": {}}
    try:
        for name in ("spread", "hot"):
            for store, limiter in (("memory", memory_limiter), ("redis", redis_limiter)):
                runs = [await sequential(limiter, name, args.decisions) for _ in range(args.repeats)]
                results["sequential"][f"{store}/{name}"] = median_of(runs)
        runs = [await ping(client, args.decisions) for _ in range(args.repeats)]
        results["sequential"]["redis PING (floor)"] = median_of(runs)
        for store, limiter in (("memory", memory_limiter), ("redis", redis_limiter)):
            probe = client if store == "redis" else None
            runs = [
                await concurrent(limiter, args.concurrency, args.concurrent_decisions, probe)
                for _ in range(args.repeats)
            ]
            results["concurrent"][store] = median_of(runs)
        if redis_limiter.degraded:
            raise SystemExit("the Redis limiter degraded during the run: figures would be wrong")
    finally:
        await client.aclose()
        await redis_limiter.close()
        await memory_limiter.close()
    return results


def run_with(loop_name: str, args: argparse.Namespace) -> dict[str, Any]:
    if loop_name == "uvloop":
        import uvloop

        return uvloop.run(bench_loop(args))
    return asyncio.run(bench_loop(args))


def machine(redis_url: str) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    server = redis.Redis.from_url(redis_url).info("server")
    return {
        "platform": platform.platform(),
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "redis_server": server.get("redis_version"),
        "redis_url": redis_url,
    }


def render_markdown(report: dict[str, Any]) -> str:
    cfg, info = report["config"], report["machine"]
    lines = [
        "# Rate-limit decision: Redis over loopback vs in-process",
        "",
        (
            f"Generated {report['generated_at']} by `bench/limiter_bench.py` "
            f"(`--decisions {cfg['decisions']} --repeats {cfg['repeats']} --concurrency {cfg['concurrency']} "
            f"--concurrent-decisions {cfg['concurrent_decisions']}`). Raw figures: `limiter.json`."
        ),
        "",
        (
            f"Machine: {info['cpus']} shared vCPUs ({info['cpu_model'] or 'unknown CPU'}), {info['platform']}, "
            f"Python {info['python']}, redis-py {info['redis_py']} (pure-Python parser, no hiredis), "
            f"redis-server {info['redis_server']} on the same host (loopback TCP). Load average at start: "
            f"{', '.join(f'{x:.2f}' for x in info['load_average_at_start'])}."
        ),
        "",
        (
            "**Caveat**: 2 shared, noisy cores; the client, its event loop and Redis compete for them, so "
            "figures move by tens of percent between runs. Each figure is the median of the repetitions' "
            "percentiles; the per-repetition values are in the JSON."
        ),
        "",
    ]
    for loop_name, results in report["loops"].items():
        lines += [
            f"## Event loop: {loop_name}",
            "",
            "Sequential, one decision at a time (ms per decision):",
            "",
            "| store / workload | p50 | p99 | p99.9 | mean | accepted |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, r in results["sequential"].items():
            share = f"{r['accepted_share']:.0%}" if "accepted_share" in r else "–"
            lines.append(
                f"| {name} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['p999_ms']:.3f} | {r['mean_ms']:.3f} "
                f"| {share} |"
            )
        lines += [
            "",
            f"{cfg['concurrency']} concurrent callers, `spread` workload:",
            "",
            "| store | decisions/s | p50 ms | p99 ms | client CPU | Redis CPU |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, r in results["concurrent"].items():
            redis_share = f"{r['redis_cpu_share']:.0%}" if "redis_cpu_share" in r else "–"
            lines.append(
                f"| {name} | {r['decisions_per_s']:,.0f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} "
                f"| {r['client_cpu_share']:.0%} | {redis_share} |"
            )
        seq = results["sequential"]
        added = seq["redis/spread"]["p50_ms"] - seq["memory/spread"]["p50_ms"]
        verdict = "meets" if added <= TARGET_P50_MS else "misses"
        lines += [
            "",
            (
                f"Added per request at p50 (`spread`, Redis minus in-process): **{added:.3f} ms**, which "
                f"{verdict} the {TARGET_P50_MS} ms target; `hot`: "
                f"{seq['redis/hot']['p50_ms'] - seq['memory/hot']['p50_ms']:.3f} ms. The bare PING round trip "
                f"through the same client is {seq['redis PING (floor)']['p50_ms']:.3f} ms at p50."
            ),
            "",
        ]
    lines += [
        "## Reading the figures",
        "",
        (
            "- One decision is one `EVALSHA` round trip. Its p50 sits a few tens of microseconds above a bare "
            "`PING` through the same client: the script itself is cheap; most of the cost is redis-py's "
            "Python-side command packing and reply parsing plus the loopback hop."
        ),
        (
            "- With many concurrent callers one API process is CPU-bound in the Redis client, not in Redis: "
            "throughput stays near the sequential rate (1 / mean latency) whatever the pool size (runs with "
            "`--max-connections` from 4 to 64 all gave 12-16k decisions/s here), and each call's latency "
            "is mostly queueing on the event loop (Little's law: about callers / throughput). CPU columns are shares of one core "
            "over the run: the client process spends most of a core (packing, parsing, event loop) while "
            "Redis uses a fraction of one, so more API processes, not more connections, add throughput."
        ),
        (
            "- These are the limiter call alone, timed around `acquire`; a request through FastAPI pays it "
            "once (one decision per request), on top of everything else it does."
        ),
        (
            "- The in-process limiter costs a few microseconds; it is what the embedded default and the "
            "degraded fallback pay."
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--decisions", type=int, default=20_000, help="sequential decisions per repetition")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=50, help="concurrent callers")
    parser.add_argument("--concurrent-decisions", type=int, default=20_000)
    parser.add_argument("--max-connections", type=int, default=32, help="the Redis limiter's pool size")
    parser.add_argument(
        "--loops", default="uvloop,asyncio", help="event loops to run, comma separated (uvloop, asyncio)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "limiter")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()

    loops = [name.strip() for name in args.loops.split(",") if name.strip()]
    if "uvloop" in loops:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print("uvloop not installed: skipping it", file=sys.stderr)
            loops.remove("uvloop")
    report: dict[str, Any] = {
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": {
            "decisions": args.decisions,
            "repeats": args.repeats,
            "concurrency": args.concurrency,
            "concurrent_decisions": args.concurrent_decisions,
            "max_connections": args.max_connections,
            "window_ms": 1000,
            "workloads": {
                "spread": f"{SPREAD_BUCKETS} buckets round robin, limit 1000/s: every decision accepted",
                "hot": "one bucket, limit 1000/s, hammered: the set stays full, most decisions refused",
            },
        },
        "machine": machine(args.redis_url),
        "target_p50_added_ms": TARGET_P50_MS,
        "loops": {},
    }
    started = time.perf_counter()
    for loop_name in loops:
        report["loops"][loop_name] = run_with(loop_name, args)
    report["duration_s"] = round(time.perf_counter() - started, 1)
    markdown = render_markdown(report)
    print(markdown)
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown)
        print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}", file=sys.stderr)


if __name__ == "__main__":
    main()
