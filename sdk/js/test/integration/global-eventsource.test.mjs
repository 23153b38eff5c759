// Where the runtime has a global EventSource (browsers; Node 22+ with --experimental-eventsource), an 'sse'
// consumer uses it, authenticating with a short-lived ?token= (an EventSource sends no headers). Node 20 has
// none: this file installs the `eventsource` package's WHATWG EventSource as the global (this test file runs
// in its own process), recording the URLs it opens.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

const opened = [];
globalThis.EventSource = class RecordingEventSource extends EventSource {
  constructor(url, init) {
    opened.push(String(url));
    super(url, init);
  }
};

let pq;
let server;
before(async () => {
  ({ pq, server } = await client());
});

test('an sse consumer over the global EventSource (token auth): receives, acks through pull calls, stops', async () => {
  const topic = unique('ges');
  await pq.topics.create({ name: topic, partitions: 2 });
  const consumer = pq.consume(topic, { group: 'g', startFrom: 'earliest', transport: 'sse' });
  const seen = [];
  const errors = [];
  consumer.on('message', async (msg) => {
    seen.push(msg);
    await msg.ack();
  });
  consumer.on('error', (err) => errors.push(err));
  await consumer.start();
  assert.match(consumer.memberId, /^csr_/);
  const published = await pq.publishBatch(topic, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  await eventually(() => seen.length >= 3, 20_000, 'three messages');
  await consumer.stop();
  assert.deepEqual(seen.map((m) => m.id).sort(), published.messages.map((m) => m.id).sort());
  assert.equal(opened.length, 1);
  const url = new URL(opened[0]);
  assert.equal(url.pathname, `/v1/topics/${topic}/groups/g/events`);
  assert.ok(url.searchParams.get('token'), 'the key travels as a short-lived token, not a header');
  const lag = (await pq.offsets.get(topic, { group: 'g' })).reduce((n, p) => n + p.lag, 0);
  assert.equal(lag, 0, 'every ack was confirmed before stop() resolved');
  assert.equal((await pq.consumerGroups.describe(topic, 'g')).consumers, 0, 'the member left');
  assert.deepEqual(errors, []);
});

test('over the global EventSource, a missing topic ends start() with NotFoundError (at the token)', async () => {
  const consumer = pq.consume(unique('nope'), { group: 'g', transport: 'sse' });
  consumer.on('error', () => {});
  await assert.rejects(consumer.start(), (e) => e instanceof sdk.NotFoundError && e.code === 'TOPIC_NOT_FOUND');
});
