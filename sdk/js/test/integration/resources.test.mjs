// Every REST call of the SDK against a real queuecore-server.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

let pq;
let server;
before(async () => {
  ({ pq, server } = await client());
});

describe('topics', () => {
  test('create, describe, update, list (array and async iteration over pages), delete', async () => {
    const names = [unique('tp'), unique('tp'), unique('tp')];
    const created = await pq.topics.create({ name: names[0], retention: '30d', delivery: 'exactly-once', partitions: 6 });
    assert.match(created.id, /^top_/);
    assert.equal(created.name, names[0]);
    assert.equal(created.partitions, 6);
    assert.equal(created.status, 'active');
    assert.equal(created.retention, '30d');
    assert.equal(created.replicas, 1); // the test server's local engine: one copy by default
    await pq.topics.create({ name: names[1] });
    await pq.topics.create({ name: names[2], partitions: 1 });

    const detail = await pq.topics.describe(names[0]);
    assert.equal(detail.partitionDetails.length, 6);
    assert.equal(detail.replicas, 1);
    const more = await pq.topics.create({ name: unique('tp'), replicas: 3 }).catch((e) => e);
    assert.ok(more instanceof sdk.BadRequestError, String(more));
    assert.equal(more.code, 'INVALID_REQUEST');
    assert.match(more.message, /keeps one copy/);
    assert.deepEqual(Object.keys(detail.partitionDetails[0]).sort(), ['bytes', 'earliestOffset', 'id', 'latestOffset', 'messages', 'replicas']);
    // The test server's local engine: one copy, leading, caught up, in no zone (none is configured).
    const [copy, ...others] = detail.partitionDetails[0].replicas;
    assert.deepEqual(Object.keys(copy).sort(), ['current', 'lag', 'leader', 'server', 'zone']);
    assert.deepEqual([copy.leader, copy.current, copy.zone, copy.lag, others.length], [true, true, null, 0, 0]);

    const updated = await pq.topics.update(names[0], { partitions: 8, retention: '1d' });
    assert.equal(updated.partitions, 8);
    assert.equal(updated.retention, '1d');
    await assert.rejects(pq.topics.update(names[0], { partitions: 2 }), sdk.BadRequestError);

    const all = await pq.topics.list();
    assert.ok(Array.isArray(all));
    for (const name of names) assert.ok(all.some((t) => t.name === name), name);

    const seen = [];
    for await (const topic of pq.topics.list({ limit: 1 })) seen.push(topic.name);
    assert.deepEqual(seen, all.map((t) => t.name)); // one per page, every page
    const first = await pq.topics.list({ limit: 2 }).firstPage();
    assert.equal(first.data.length, 2);
    assert.equal(typeof first.nextCursor, 'string');

    await assert.rejects(pq.topics.create({ name: names[1] }), (e) => e instanceof sdk.ConflictError && e.code === 'TOPIC_ALREADY_EXISTS');
    await pq.topics.delete(names[2]);
    await assert.rejects(pq.topics.describe(names[2]), (e) => e instanceof sdk.NotFoundError && e.code === 'TOPIC_NOT_FOUND');
  });

  test('validation errors carry details', async () => {
    const error = await pq.topics.create({ name: 'Bad Name!' }).catch((e) => e);
    assert.ok(error instanceof sdk.BadRequestError);
    assert.equal(error.code, 'INVALID_REQUEST');
    assert.equal(error.status, 400);
    assert.match(error.requestId, /^req_/);
  });
});

describe('publishing', () => {
  test('publish answers {id, offset, partition, timestamp, latency, durability}', async () => {
    const topic = unique('pub');
    await pq.topics.create({ name: topic, partitions: 3 });
    const result = await pq.publish(topic, { type: 'order.created', orderId: 'ord_92jf8x', amount: 9900 }, { key: 'ord_92jf8x', headers: { source: 'test' } });
    assert.match(result.id, /^msg_/);
    assert.equal(result.offset, 0);
    assert.ok(result.partition >= 0 && result.partition < 3);
    assert.match(result.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(typeof result.latency, 'number');
    assert.equal(result.durability, 'fsync');
    assert.equal(result.replayed, false);

    const again = await pq.publish(topic, { other: true }, { key: 'ord_92jf8x' });
    assert.equal(again.partition, result.partition); // same key, same partition
    assert.equal(again.offset, 1);

    const message = await pq.messages.get(topic, result.id);
    assert.deepEqual(message.data, { type: 'order.created', orderId: 'ord_92jf8x', amount: 9900 });
    assert.equal(message.key, 'ord_92jf8x');
    assert.deepEqual(message.headers, { source: 'test' });

    const explicit = await pq.publish(topic, null, { partition: 2 });
    assert.equal(explicit.partition, 2);
    const page = await pq.messages.read(topic, 2, { fromOffset: 0 });
    assert.equal(page.data.at(-1).data, null);
    assert.equal(page.nextOffset, page.data.at(-1).offset + 1);
  });

  test('a user idempotency key publishes once and answers the original result', async () => {
    const topic = unique('idem');
    await pq.topics.create({ name: topic, partitions: 1 });
    const first = await pq.publish(topic, { n: 1 }, { idempotencyKey: 'job-1' });
    const again = await pq.publish(topic, { n: 2 }, { idempotencyKey: 'job-1' });
    assert.equal(again.replayed, true);
    assert.equal(again.id, first.id);
    assert.equal((await pq.topics.describe(topic)).partitionDetails[0].latestOffset, 1);
  });

  test('publishBatch: count, latency, per-message results, atomic, idempotent items', async () => {
    const topic = unique('batch');
    await pq.topics.create({ name: topic, partitions: 3 });
    const results = await pq.publishBatch(topic, [
      { type: 'order.created', orderId: 'ord_a1b2c3', amount: 4500 },
      { type: 'order.created', orderId: 'ord_d4e5f6', amount: 12000 },
      new sdk.BatchMessage({ data: { orderId: 'ord_g7h8i9' }, key: 'k1', headers: { h: 'v' }, idempotencyKey: 'item-3' }),
    ]);
    assert.equal(results.count, 3);
    assert.equal(typeof results.latency, 'number');
    assert.equal(results.messages.length, 3);
    for (const m of results.messages) assert.match(m.id, /^msg_/);
    const rerun = await pq.publishBatch(topic, [new sdk.BatchMessage({ data: { orderId: 'ord_g7h8i9' }, idempotencyKey: 'item-3' })]);
    assert.equal(rerun.messages[0].replayed, true);
    assert.equal(rerun.messages[0].id, results.messages[2].id);

    const big = 'x'.repeat(300 * 1024);
    await assert.rejects(pq.publishBatch(topic, [{ ok: 1 }, { big }]), (e) => e instanceof sdk.PayloadTooLargeError && e.code === 'PAYLOAD_TOO_LARGE');
    const total = (await pq.topics.describe(topic)).partitionDetails.reduce((n, p) => n + p.messages, 0);
    assert.equal(total, 3); // refused whole
  });

  test('a missing topic is NotFoundError, a bad key AuthenticationError', async () => {
    await assert.rejects(pq.publish(unique('none'), 1), (e) => e instanceof sdk.NotFoundError && e.code === 'TOPIC_NOT_FOUND');
    const bad = new sdk.QueueCore({ apiKey: 'pq_test_sk_00000000000000000000000000000000', baseUrl: server.url });
    await assert.rejects(bad.topics.list(), (e) => e instanceof sdk.AuthenticationError && e.code === 'INVALID_API_KEY' && e.status === 401);
  });
});

describe('groups, offsets, dlq', () => {
  test('consumerGroups list/describe/update/resetOffsets/delete and offsets get/seek/reset', async () => {
    const topic = unique('grp');
    await pq.topics.create({ name: topic, partitions: 2 });
    for (let i = 0; i < 4; i++) await pq.publish(topic, { i }, { partition: i % 2 });
    const group = await pq.consumerGroups.update(topic, 'g1', { ackTimeout: '45s', deadLetter: { maxRetries: 3 } });
    assert.equal(group.config.ackTimeout, '45s');
    assert.equal(group.config.deadLetter.maxRetries, 3);
    assert.equal(group.config.deadLetter.retryDelay, '30s');

    const groups = await pq.consumerGroups.list(topic);
    assert.deepEqual(groups.map((g) => g.name), ['g1']);
    assert.deepEqual(Object.keys(groups[0]).sort(), ['consumers', 'lag', 'name']);

    const described = await pq.consumerGroups.describe(topic, 'g1');
    assert.equal(described.name, 'g1');
    assert.equal(described.topic, topic);
    assert.equal(described.partitions.length, 2);

    const reset = await pq.consumerGroups.resetOffsets(topic, 'g1', { to: 'latest' });
    assert.deepEqual(reset.map((p) => p.current).sort(), [2, 2]);
    const offset = await pq.offsets.get(topic, { group: 'g1', partition: 0 });
    assert.deepEqual(offset, { current: 2, latest: 2, lag: 0 });
    const all = await pq.offsets.get(topic, { group: 'g1' });
    assert.equal(all.length, 2);
    assert.deepEqual(await pq.offsets.seek(topic, { group: 'g1', partition: 0, offset: 1 }), { partition: 0, offset: 1 });
    assert.equal((await pq.offsets.get(topic, { group: 'g1', partition: 0 })).lag, 1);
    const warnings = [];
    const { pq: logged } = await client({ logger: { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} } });
    assert.deepEqual(await logged.offsets.seek(topic, { group: 'g1', partition: 0, offset: 4800 }), { partition: 0, offset: 2 });
    assert.deepEqual(warnings, [`seek ${topic}/g1 partition 0: asked for offset 4800, landed at 2 (the partition's range ends there)`]);
    await logged.offsets.seek(topic, { group: 'g1', partition: 0, offset: 1 });
    assert.equal(warnings.length, 1); // landed where asked: nothing to say
    await pq.offsets.seek(topic, { group: 'g1', partition: 1, timestamp: new Date(Date.now() - 3600_000) });
    assert.equal((await pq.offsets.get(topic, { group: 'g1', partition: 1 })).current, 0);
    const back = await pq.offsets.reset(topic, { group: 'g1', to: 'earliest' });
    assert.deepEqual(back.map((p) => p.current), [0, 0]);
    await pq.offsets.reset(topic, { group: 'g1', to: 'latest', partition: 0 });
    assert.equal((await pq.offsets.get(topic, { group: 'g1', partition: 0 })).current, 2);

    await pq.consumerGroups.update(topic, 'g1', { deadLetter: null });
    assert.equal((await pq.consumerGroups.describe(topic, 'g1')).config.deadLetter, null);
    const dlq = await pq.dlq.inspect(topic, { group: 'g1' });
    assert.equal(dlq.total, 0);
    await pq.consumerGroups.delete(topic, 'g1');
    await assert.rejects(pq.consumerGroups.describe(topic, 'g1'), sdk.NotFoundError);
  });

  test('consumerGroups.update: maxInFlight, rate and filter; filterAppliesFrom; a bad filter\'s details; null removes', async () => {
    const topic = unique('tp');
    await pq.topics.create({ name: topic, partitions: 2 });
    const flow = await pq.consumerGroups.update(topic, 'g', { maxInFlight: 100, rate: 2.5, filter: 'headers.type = "order"' });
    assert.equal(flow.config.maxInFlight, 100);
    assert.equal(flow.config.rate, 2.5);
    assert.equal(flow.config.filter, 'headers.type = "order"');
    assert.deepEqual(flow.filterAppliesFrom, [{ partition: 0, offset: 0 }, { partition: 1, offset: 0 }]);
    const kept = await pq.consumerGroups.update(topic, 'g', { ackTimeout: '20s' });
    assert.equal(kept.config.maxInFlight, 100);
    assert.equal(kept.filterAppliesFrom, null);
    const bad = await pq.consumerGroups.update(topic, 'g', { filter: 'headers.type =' }).catch((e) => e);
    assert.ok(bad instanceof sdk.BadRequestError, String(bad));
    assert.equal(bad.details[0].field, 'filter');
    assert.equal(bad.details[0].position, 15);
    const removed = await pq.consumerGroups.update(topic, 'g', { maxInFlight: null, rate: null, filter: null });
    assert.deepEqual([removed.config.maxInFlight, removed.config.rate, removed.config.filter], [null, null, null]);
    await pq.topics.delete(topic);
  });

  test('alerts: set (secret once), get, test event, deliveries, delete', async () => {
    const endpoint = await pq.alerts.set({ url: 'http://127.0.0.1:9/hook' });
    assert.equal(endpoint.url, 'http://127.0.0.1:9/hook');
    assert.equal(typeof endpoint.secret, 'string');
    const got = await pq.alerts.get();
    assert.equal(got.secretHint, endpoint.secret.slice(-4));
    assert.ok(!got.secret);
    const event = await pq.alerts.sendTestEvent();
    assert.equal(typeof event.eventId, 'string');
    const deliveries = await pq.alerts.deliveries();
    assert.ok(Array.isArray(deliveries.data));
    await pq.alerts.delete();
    await assert.rejects(pq.alerts.get(), sdk.NotFoundError);
  });
});

describe('health', () => {
  test('a live server is ok; an unreachable one is down without throwing', async () => {
    const health = await pq.health();
    assert.equal(health.status, 'ok');
    assert.equal(typeof health.checks.database, 'string');
    assert.equal(typeof health.version, 'string');
    const gone = new sdk.QueueCore({ apiKey: server.key, baseUrl: 'http://127.0.0.1:9' });
    const down = await gone.health();
    assert.equal(down.status, 'down');
    assert.equal(typeof down.error, 'string');
  });
});

describe('rate limits', () => {
  test('a developer-tier key over its admin limit: retried after Retry-After, then through', async () => {
    const lines = [];
    const logger = { debug() {}, info: (m) => lines.push(m), warn() {}, error() {} };
    const dev = new sdk.QueueCore({ apiKey: server.keys['js-dev'].development, baseUrl: server.url, logger, maxRetries: 5 });
    const calls = [];
    for (let i = 0; i < 25; i++) calls.push(dev.topics.list());
    const answers = await Promise.all(calls);
    assert.equal(answers.length, 25); // every call got through
    assert.ok(lines.some((l) => /status 429/.test(l)), 'some calls were retried after a 429');

    const strict = new sdk.QueueCore({ apiKey: server.keys['js-dev'].development, baseUrl: server.url, maxRetries: 0 });
    const results = await Promise.allSettled(Array.from({ length: 25 }, () => strict.topics.list()));
    const refused = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
    assert.ok(refused.length > 0);
    for (const e of refused) {
      assert.ok(e instanceof sdk.RateLimitError, String(e));
      assert.equal(e.code, 'RATE_LIMIT_EXCEEDED');
      assert.ok(e.retryAfter >= 0);
    }
    await eventually(async () => (await dev.topics.list()) && true);
  });
});
