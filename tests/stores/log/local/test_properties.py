"""Property tests: random appends, rolls, restarts, crashes and reads against an in-memory model;
retention moves the earliest offset and never loses unexpired data."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.stores.log.local import LocalLogEngine
from app.stores.log.protocol import RecordIn, TopicLogConfig
from tests.stores.log.conftest import crash, local_config

PARTITIONS = 3
TOPIC = "top_prop"

record = st.builds(
    RecordIn,
    value=st.binary(max_size=300),
    key=st.none() | st.binary(max_size=20),
    headers=st.none() | st.binary(max_size=20),
    timestamp_ms=st.integers(1, 10_000),
)
append_op = st.tuples(
    st.just("append"),
    st.dictionaries(
        st.integers(0, PARTITIONS - 1), st.lists(record, min_size=1, max_size=12), min_size=1, max_size=3
    ),
)
read_op = st.tuples(st.just("read"), st.integers(0, PARTITIONS - 1), st.integers(0, 200), st.integers(1, 50))
time_op = st.tuples(st.just("time"), st.integers(0, PARTITIONS - 1), st.integers(0, 11_000))
restart_op = st.tuples(st.just("restart"), st.booleans())
ops = st.lists(st.one_of(append_op, append_op, read_op, time_op, restart_op), min_size=1, max_size=25)
common = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def config_for(segment_bytes: int):
    return local_config(segment_bytes=segment_bytes, index_interval_bytes=128, open_files=12)


def as_tuple(r):
    return (r.value, r.key, r.headers, r.timestamp_ms)


async def run_ops(root: Path, segment_bytes: int, operations) -> None:
    engine = LocalLogEngine(root, config_for(segment_bytes))
    await engine.start()
    await engine.create_topic(TOPIC, PARTITIONS, TopicLogConfig())
    model: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    try:
        for op in operations:
            if op[0] == "append":
                bases = await engine.append(TOPIC, op[1])
                for p, records in op[1].items():
                    assert bases[p] == len(model[p])
                    model[p].extend(as_tuple(r) for r in records)
            elif op[0] == "read":
                _, p, offset, limit = op
                got = await engine.read(TOPIC, p, offset, max_records=limit)
                want = model[p][offset : offset + limit]
                assert [as_tuple(r) for r in got] == want
                assert [r.offset for r in got] == list(range(offset, offset + len(want)))
            elif op[0] == "time":
                _, p, ts = op
                want = next((i for i, r in enumerate(model[p]) if r[3] >= ts), len(model[p]))
                assert await engine.offset_for_time(TOPIC, p, ts) == want
            elif op[0] == "restart":
                if op[1]:
                    await engine.close()
                else:
                    crash(engine)
                engine = LocalLogEngine(root, config_for(segment_bytes))
                await engine.start()
        for p in range(PARTITIONS):
            info = await engine.partition_info(TOPIC, p)
            assert (info.earliest_offset, info.latest_offset) == (0, len(model[p]))
            got = await engine.read(TOPIC, p, 0, max_records=10_000, max_bytes=1 << 30)
            assert [as_tuple(r) for r in got] == model[p]
    finally:
        await engine.close()


@common
@given(operations=ops, segment_bytes=st.sampled_from([256, 1024, 8192, 1 << 20]))
def test_engine_matches_a_model(operations, segment_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run_ops(Path(tmp), segment_bytes, operations))


async def run_retention(root: Path, batches, retention_ms: int, now: int) -> None:
    engine = LocalLogEngine(root, config_for(512))
    await engine.start()
    try:
        await engine.create_topic(TOPIC, 1, TopicLogConfig(retention_ms=retention_ms))
        model: list[int] = []
        for timestamps in batches:
            await engine.append(TOPIC, {0: [RecordIn(value=b"v" * 40, timestamp_ms=t) for t in timestamps]})
            model.extend(timestamps)
        before = await engine.partition_info(TOPIC, 0)
        await engine.enforce_retention(now)
        info = await engine.partition_info(TOPIC, 0)
        cutoff = now - retention_ms
        assert info.latest_offset == before.latest_offset == len(model)
        assert info.earliest_offset >= before.earliest_offset
        # Nothing unexpired is lost: every record from the first unexpired one on is still there.
        first_unexpired = next((i for i, t in enumerate(model) if t >= cutoff), len(model))
        assert info.earliest_offset <= first_unexpired
        got = await engine.read(TOPIC, 0, 0, max_records=10_000, max_bytes=1 << 30)
        assert [r.offset for r in got] == list(range(info.earliest_offset, len(model)))
        assert [r.timestamp_ms for r in got] == model[info.earliest_offset :]
        # Whole expired segments at the start are gone: if everything expired, nothing is left.
        if first_unexpired == len(model):
            assert info.earliest_offset == len(model)
    finally:
        await engine.close()


@common
@given(
    batches=st.lists(st.lists(st.integers(1, 1000), min_size=1, max_size=10), min_size=1, max_size=30),
    retention_ms=st.integers(1, 500),
    now=st.integers(0, 1500),
)
def test_retention_moves_earliest_and_keeps_unexpired_data(batches, retention_ms, now):
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run_retention(Path(tmp), batches, retention_ms, now))
