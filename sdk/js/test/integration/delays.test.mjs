// Delayed delivery and TTL from the Node SDK against a real server: publish / publishBatch options, the
// deliverAt / expiresAt fields of answers, reads and deliveries, and the group's expired count.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

let pq;
before(async () => {
  ({ pq } = await client());
});

async function newTopic(partitions = 1) {
  const name = unique('dly');
  await pq.topics.create({ name, partitions });
  return name;
}

describe('delays and TTL', () => {
  test('publish takes delay and ttl; answers and reads carry deliverAt and expiresAt', async () => {
    const topic = await newTopic();
    const before = Date.now();
    const result = await pq.publish(topic, { n: 1 }, { delay: '1h', ttl: 7200 });
    assert.ok(Date.parse(result.deliverAt) >= before + 3_600_000 - 1);
    assert.equal(Date.parse(result.expiresAt) - Date.parse(result.deliverAt), 3_600_000);
    const plain = await pq.publish(topic, 2);
    assert.equal(plain.deliverAt, null);
    assert.equal(plain.expiresAt, null);
    const read = await pq.messages.read(topic, 0);
    assert.deepEqual(read.data.map((m) => m.deliverAt), [result.deliverAt, null]);
    const fetched = await pq.messages.get(topic, result.id);
    assert.equal(fetched.expiresAt, result.expiresAt);
  });

  test('batch items take deliverAt (a Date) and expiresAt', async () => {
    const topic = await newTopic();
    const at = new Date(Math.ceil(Date.now() / 1000) * 1000 + 600_000);
    const result = await pq.publishBatch(topic, [
      new sdk.BatchMessage({ data: 1, deliverAt: at, expiresAt: at.getTime() + 300_000 }),
      new sdk.BatchMessage({ data: 2, delay: 90 }),
      3,
    ]);
    const [first, second, third] = result.messages;
    assert.equal(first.deliverAt, at.toISOString());
    assert.equal(Date.parse(first.expiresAt), at.getTime() + 300_000);
    assert.notEqual(second.deliverAt, null);
    assert.equal(third.deliverAt, null);
  });

  test('both delay and deliverAt is a BadRequestError naming the field', async () => {
    const topic = await newTopic();
    const error = await pq.publish(topic, 1, { delay: '1m', deliverAt: Date.now() + 60_000 }).catch((e) => e);
    assert.ok(error instanceof sdk.BadRequestError, String(error));
    assert.equal(error.code, 'INVALID_REQUEST');
    assert.match(error.message, /deliverAt/);
  });

  for (const transport of ['websocket', 'pull']) {
    test(`a delayed message reaches a ${transport} consumer when due, with deliverAt`, async () => {
      const topic = await newTopic();
      const published = await pq.publish(topic, { n: 1 }, { delay: '1s' });
      const consumer = pq.consume(topic, { group: unique('g'), startFrom: 'earliest', transport });
      const seen = [];
      consumer.on('message', async (msg) => {
        seen.push({ msg, at: Date.now() });
        await msg.ack();
      });
      await consumer.start();
      await eventually(() => seen.length >= 1, 20_000, 'the delayed message');
      await consumer.stop();
      assert.equal(seen[0].msg.id, published.id);
      assert.equal(seen[0].msg.deliverAt, published.deliverAt);
      assert.equal(seen[0].msg.expiresAt, null);
      assert.ok(seen[0].at >= Date.parse(published.deliverAt));
    });
  }

  test('group describe counts expired messages', async () => {
    const topic = await newTopic();
    const group = unique('g');
    await pq.consumerGroups.update(topic, group, { ackTimeout: '30s' });
    await pq.publish(topic, 1, { expiresAt: Date.now() + 300 });
    await new Promise((resolve) => setTimeout(resolve, 600));
    const consumer = pq.consume(topic, { group, startFrom: 'earliest', transport: 'pull' });
    consumer.on('message', async (msg) => msg.ack());
    await consumer.start();
    await eventually(async () => (await pq.consumerGroups.describe(topic, group)).expired === 1, 20_000, 'expired');
    await consumer.stop();
  });
});
