"""The DLQ's building blocks: the policy, and delivering a replay from its copy once retention removed the
original."""

from __future__ import annotations

import orjson
import pytest

from app.broker import dead_letters, messages, publishing, topics
from app.broker.topics import Scope
from app.stores.log.protocol import Record, RecordIn, TopicLogConfig


def test_policy_of_the_group_config():
    assert dead_letters.Policy.of(None) is None
    policy = dead_letters.Policy.of({"maxRetries": 2, "retryDelay": "500ms", "alertThreshold": 3})
    assert policy == dead_letters.Policy(2, 500, 3)
    assert [policy.exhausted(a) for a in (1, 2, 3, 4)] == [False, False, True, True]


async def test_a_replay_whose_original_is_gone_is_read_from_its_copy(deployment):
    services = deployment.app.state.services
    project = await deployment.project()
    scope = Scope(project.project_id, "production")
    async with services.metadata.unit() as uow:
        await topics.create_topic(uow, services.log, scope, "gone", partitions=1)
    topic = await services.publisher.topics.resolve(scope, "gone")
    await services.publisher.publish_batch(scope, "gone", publishing.parse_batch({"messages": [{"data": 1}]}))
    group_id = "grp_testcopies00000"
    original = Record(41, 1_700_000_000_000, b'{"n":41}', b"k", orjson.dumps({"h": {"a": "b"}}))
    copy = dead_letters._copy_of(topic, dead_letters.Failure(0, 41, original, "boom", 2), 1_700_000_001_000)
    await services.log.create_topic(dead_letters.log_id(group_id), 1, TopicLogConfig())
    [base] = (await services.log.append(dead_letters.log_id(group_id), {0: [copy, RecordIn(b"0")]})).values()

    found = await dead_letters.records_for(
        services.log, topic, group_id, [(0, 0, None), (0, 41, base), (0, 42, None)]
    )
    assert set(found) == {(0, 0), (0, 41)}
    assert found[(0, 0)].value == b"1"  # still in the topic's log: read from there
    replayed = found[(0, 41)]
    assert (replayed.offset, replayed.value, replayed.key) == (41, b'{"n":41}', b"k")
    assert messages.decode_headers(replayed.headers)[0] == {"a": "b"}
    meta = orjson.loads(replayed.headers)["dlq"]
    assert (meta["partition"], meta["offset"], meta["reason"], meta["retryCount"]) == (0, 41, "boom", 2)
    await services.log.delete_topic(dead_letters.log_id(group_id))


@pytest.mark.parametrize("retry", [1, 2, 5])
def test_jitter_stays_within_ten_percent(retry):
    policy = dead_letters.Policy(10, 1000, 1)
    base = 1000 * 2 ** (retry - 1)
    for _ in range(200):
        assert base * 0.9 <= dead_letters.retry_delay_ms(policy, retry) <= base * 1.1
