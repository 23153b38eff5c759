// The failure idempotency keys exist for, on a real server: the publish happened, its answer was lost on
// the way back. A proxy in front of the server forwards the request, waits until the server starts
// answering, then drops the connection without relaying a byte. The SDK retries with the same key(s): the
// message is written once, and the retry answers the original result.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';

import * as sdk from '../../dist/esm/index.js';
import { client, unique } from '../support/helpers.mjs';

let pq;
let server;
before(async () => {
  ({ pq, server } = await client());
});

/** A TCP proxy to the server that loses the answers of its first `lose` connections. */
async function losingProxy(lose) {
  const upstream = new URL(server.url);
  let lost = 0;
  const proxy = net.createServer((conn) => {
    const up = net.connect(Number(upstream.port), upstream.hostname);
    const losing = lost < lose;
    if (losing) lost += 1;
    conn.pipe(up);
    if (losing) {
      up.once('data', () => {
        conn.destroy(); // the server has handled the request and is answering: drop it
        up.destroy();
      });
    } else up.pipe(conn);
    const close = () => {
      conn.destroy();
      up.destroy();
    };
    conn.on('error', close);
    up.on('error', close);
    conn.on('close', close);
    up.on('close', close);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${proxy.address().port}`, lost: () => lost, close: () => proxy.close() };
}

test('a publish whose answer is lost is retried with its key and written once', async () => {
  const topic = unique('lost');
  await pq.topics.create({ name: topic, partitions: 1 });
  const proxy = await losingProxy(1);
  try {
    const via = new sdk.QueueCore({ apiKey: server.key, baseUrl: proxy.url, maxRetries: 2 });
    const result = await via.publish(topic, { orderId: 'ord_once' });
    assert.equal(proxy.lost(), 1);
    assert.equal(result.replayed, true, 'the retry answered the original result');
    assert.equal(result.offset, 0);
    const detail = await pq.topics.describe(topic);
    assert.equal(detail.partitionDetails[0].messages, 1, 'written once');
    const [copy, ...others] = detail.partitionDetails[0].replicas;
    assert.ok(copy.leader && copy.current && copy.server, 'one copy on the test server, leading');
    assert.equal(others.length, 0);
  } finally {
    proxy.close();
  }
});

test('a batch whose answer is lost is retried with the same item keys and written once', async () => {
  const topic = unique('lostb');
  await pq.topics.create({ name: topic, partitions: 2 });
  const proxy = await losingProxy(1);
  try {
    const via = new sdk.QueueCore({ apiKey: server.key, baseUrl: proxy.url, maxRetries: 2 });
    const result = await via.publishBatch(topic, [{ n: 1 }, { n: 2 }, { n: 3 }]);
    assert.equal(proxy.lost(), 1);
    assert.equal(result.messages.length, 3);
    assert.ok(result.messages.every((m) => m.replayed === true));
    const total = (await pq.topics.describe(topic)).partitionDetails.reduce((n, p) => n + p.messages, 0);
    assert.equal(total, 3, 'written once');
  } finally {
    proxy.close();
  }
});

test('without retries the lost answer is an APIConnectionError (and the message was written)', async () => {
  const topic = unique('lost0');
  await pq.topics.create({ name: topic, partitions: 1 });
  const proxy = await losingProxy(1);
  try {
    const via = new sdk.QueueCore({ apiKey: server.key, baseUrl: proxy.url, maxRetries: 0 });
    await assert.rejects(via.publish(topic, { n: 1 }), sdk.APIConnectionError);
    assert.equal((await pq.topics.describe(topic)).partitionDetails[0].messages, 1);
  } finally {
    proxy.close();
  }
});

test('connections are kept alive and reused: many sequential calls, one or two TCP connections', async () => {
  const upstream = new URL(server.url);
  let connections = 0;
  const proxy = net.createServer((conn) => {
    connections += 1;
    const up = net.connect(Number(upstream.port), upstream.hostname);
    conn.pipe(up).pipe(conn);
    const close = () => {
      conn.destroy();
      up.destroy();
    };
    conn.on('error', close);
    up.on('error', close);
    conn.on('close', close);
    up.on('close', close);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  try {
    const via = new sdk.QueueCore({ apiKey: server.key, baseUrl: `http://127.0.0.1:${proxy.address().port}` });
    const topic = unique('pool');
    await via.topics.create({ name: topic, partitions: 1 });
    for (let i = 0; i < 30; i++) await via.publish(topic, { i });
    assert.ok(connections <= 2, `${connections} connections for 31 calls`);
  } finally {
    proxy.close();
  }
});
