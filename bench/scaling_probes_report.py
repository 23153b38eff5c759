"""The Markdown report of ``bench/scaling_probes.py`` (``bench/results/scaling_probes.md``)."""

from __future__ import annotations

from typing import Any


def render(report: dict[str, Any]) -> str:
    lines = [
        "# Scaling probes: what one component does on this machine",
        "",
        (
            f"Last written {report['generated']} by `bench/scaling_probes.py` (`{report['command']}`). "
            "Raw figures: `scaling_probes.json`."
        ),
        "",
        *[
            f"- section `{name}`: run {run['generated']} (`{run['command']}`), load average {run['load_average']}"
            for name, run in report.get("sections", {}).items()
        ],
        "",
        (
            f"Machine: {report['machine']['cpus']} shared vCPUs, {report['machine']['platform']}, Python "
            f"{report['machine']['python']}; load average at the start of that run {report['machine']['load_average']}. "
            "**Every client and every server below shares these 2 cores** (and other sessions' work): a "
            "figure is what this box did, not what the component does on a machine of its own. `cores` "
            "columns are CPU seconds per second of wall time (1.0 = one core busy); `µs` columns are CPU time per "
            "item (median over the rounds of each round's CPU / items): those are what `bench/capacity_model.py` "
            "scales from, since the wall rates mostly say how busy the box was."
        ),
        "",
    ]
    js = report.get("jetstream")
    if js:
        lines += [
            "## JetStream, 3-node cluster (nats-server 2.15, `sync_interval: always`), 200 B records",
            "",
            "| probe | msgs/s | client cores | NATS cores (3 servers) | client µs/msg | NATS µs/msg | runs |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for key, label in (
            ("raw_publish_async_r3", "nats-py publish_async ×1000, R=3 stream"),
            ("raw_publish_async_r1", "nats-py publish_async ×1000, R=1 stream"),
            ("engine_batch1000_p1", "engine append, batches of 1,000, 1 partition (R=3)"),
            ("engine_batch1000_p4", "engine append, batches of 1,000, 4 partitions at once"),
            ("engine_batch1000_p16", "engine append, batches of 1,000, 16 partitions at once"),
            ("engine_batch1000_p64", "engine append, batches of 1,000, 64 partitions at once"),
            ("engine_single_64_in_flight", "engine append, 1 record each, 64 in flight, 1 partition"),
            ("engine_batch1000_over_4_partitions_txn", "engine append, 1,000 records over 4 partitions (commit record)"),
            ("engine_read_1000_per_call", "engine read, 1,000 records per call, 1 partition"),
        ):  # fmt: skip
            row = js.get(key)
            if row:
                lines.append(
                    f"| {label} | {row['per_s']:,.0f} | {row['client_cores']:.2f} | "
                    f"{row['server_cores']:.2f} | {row['client_cpu_per_item'] * 1e6:.1f} | "
                    f"{row['server_cpu_per_item'] * 1e6:.1f} | {row['runs']} |"
                )
        lines.append("")
    st = report.get("streams")
    if st:
        lines += [
            f"## Streams: {st['streams']} R=3 streams on the same cluster",
            "",
            "| figure | value |",
            "|---|---:|",
            f"| created per second (8 at a time) | {st['create_per_s']:,.1f} |",
            f"| NATS cores while creating | {st['create_server_cores']:.2f} |",
            f"| resident memory per stream, 3 replicas together | {st['rss_bytes_per_stream_all_replicas'] / 1024:,.0f} KiB |",
            f"| disk per empty stream, 3 replicas together | {st['disk_bytes_per_stream_all_replicas'] / 1024:,.1f} KiB |",
            f"| idle NATS cores before / after | {st['idle_cores_before']:.3f} / {st['idle_cores_after']:.3f} |",
            f"| idle NATS cores per 1,000 idle streams | {st['idle_core_per_1000_streams']:.3f} |",
            f"| deleted per second | {st['delete_per_s']:,.1f} |",
            "",
        ]  # fmt: skip
    pg = report.get("postgres")
    if pg:
        lines += [
            "## Postgres metadata store (Postgres 15 on this host, `synchronous_commit` on)",
            "",
            "| probe | transactions/s | client cores | Postgres cores | client µs/tx | Postgres µs/tx | runs |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for key, label in (
            ("checkpoint_express_w1", "push checkpoint (1 UPDATE, commit), 1 writer"),
            ("checkpoint_express_w4", "push checkpoint, 4 writers (connections)"),
            ("checkpoint_express_w16", "push checkpoint, 16 writers"),
            ("push_beat_4_groups", "push member beat (heartbeat + due scan, claim read), 4 groups"),
        ):
            row = pg.get(key)
            if row:
                lines.append(
                    f"| {label} | {row['per_s']:,.0f} | {row['client_cores']:.2f} | "
                    f"{row['server_cores']:.2f} | {row['client_cpu_per_item'] * 1e6:.0f} | "
                    f"{row['server_cpu_per_item'] * 1e6:.0f} | {row['runs']} |"
                )
        row = pg.get("pull_poll100_ack_4_members")
        if row:
            lines += [
                "",
                (
                    "Pull, 4 members on 4 partitions, `poll_once` of 100 then `ack` of them (two units of work; "
                    "the broker's functions, no HTTP):"
                ),
                "",
                (
                    "| cycles/s | msgs/s | poll p50 ms | ack p50 ms | client cores | Postgres cores | "
                    "client ms/cycle | Postgres ms/cycle | runs |"
                ),
                "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
                (
                    f"| {row['per_s']:,.0f} | {row['msgs_per_s']:,.0f} | {row['poll_p50_ms']:.1f} | "
                    f"{row['ack_p50_ms']:.1f} | {row['client_cores']:.2f} | {row['server_cores']:.2f} | "
                    f"{row['client_cpu_per_item'] * 1e3:.2f} | {row['server_cpu_per_item'] * 1e3:.2f} | {row['runs']} |"
                ),
            ]
        lines.append("")
    rd = report.get("redis", {}).get("limiter_2_processes")
    if rd:
        lines += [
            "## Redis rate limiter, 2 client processes × 50 callers",
            "",
            "| decisions/s | Redis cores during run | Redis CPU s per 100k decisions | decisions per Redis core-second |",
            "|---:|---:|---:|---:|",
            (f"| {rd['per_s']:,.0f} | {rd['redis_cores_during_run']:.2f} | "
            f"{rd['redis_cpu_seconds_per_100k']:.2f} | {rd['decisions_per_redis_core_s']:,.0f} |"),
            "",
        ]  # fmt: skip
    lines += [
        "## Caveats",
        "",
        "- Two shared cores: the three NATS servers, Postgres, Redis and the Python client of each probe",
        "  compete for them, so a probe's throughput is bounded by the box as much as by the component.",
        "  The µs columns (CPU per item) are steadier than the rates; they still include contention (cache,",
        "  fsync queue, scheduler, CPU steal), so they overstate what an item costs on a dedicated core.",
        "- A 3-node cluster on one host shares one disk: a quorum write is three fsyncs on the same device.",
        "- Small samples (seconds per round); medians of the rounds; runs listed. Differences under ~15% are noise.",
        "",
    ]
    return "\n".join(lines)
