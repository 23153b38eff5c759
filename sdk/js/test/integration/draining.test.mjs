// A real server gets SIGTERM while a handler is still running (#36): the consumer hands over (the handler
// finishes, its ack goes to the draining node and is answered) before it moves on, so the message is settled
// and never delivered again. Checked after a restart on the same data: the group's committed offset is past
// the message. The server is this test's own (the run's shared one is never signalled).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../../dist/esm/index.js';
import { startServer, unique } from '../support/server.mjs';

test('a real server draining settles the ack of a handler still running', async () => {
  const server = await startServer();
  try {
    const pq = new sdk.QueueCore({ apiKey: server.key, baseURL: server.url });
    const topic = unique('drain');
    await pq.topics.create({ name: topic, partitions: 1 });
    await pq.publish(topic, { n: 1 });
    const consumer = pq.consume(topic, { group: 'g', startFrom: 'earliest', transport: 'websocket' });
    consumer.on('error', () => {}); // the refusals while the server restarts are expected
    const attempts = [];
    let started;
    const running = new Promise((resolve) => (started = resolve));
    let markAcked;
    const acked = new Promise((resolve) => (markAcked = resolve));
    consumer.on('message', async (msg) => {
      attempts.push(msg.attempt);
      if (msg.attempt === 1) {
        started();
        await new Promise((resolve) => setTimeout(resolve, 1000)); // still running when the node drains
        await msg.ack();
        markAcked();
        return;
      }
      await msg.ack();
    });
    await consumer.start();
    await running;
    await server.stop({ keep: true }); // SIGTERM: drains (the consumer hands over), then exits
    await acked;
    await server.restart();
    const offsets = await pq.offsets.get(topic, { group: 'g' });
    await consumer.stop();
    assert.deepEqual(
      offsets.map((p) => p.current),
      [1],
      'the ack settled before the drain ended',
    );
    assert.deepEqual(attempts, [1], 'the message was not delivered again');
  } finally {
    await server.stop();
  }
});
