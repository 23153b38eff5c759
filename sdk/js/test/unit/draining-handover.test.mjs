// A deploy's handover (#36). The scripted peer follows the server's drain (app/api/ws.py `_end_for_drain`):
// it stops delivering, sends `draining`, settles the ack frames the client still sends until the client
// closes (or 3 s), then closes 1012; a message whose ack never reached it comes back on the next connection
// with attempt 2, as the server redelivers it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocketServer } from 'ws';

import * as sdk from '../../dist/esm/index.js';

const ID = 'msg_bbbbbbbbbbbbbbbbbbbbbbbbbb';

function message(attempt) {
  return JSON.stringify({
    type: 'message', id: ID, topic: 't', partition: 0, offset: 0, key: null, headers: {}, data: 1,
    timestamp: '2026-11-26T00:00:00.000Z', attempt,
  });
}

async function listen(onConnection) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => wss.once('listening', resolve));
  wss.on('connection', onConnection);
  return wss;
}

test('a handler running when the server drains gets its ack settled before the handover', async () => {
  let connections = 0;
  let ackedOnFirst = false;
  let firstClose; // who closed the first connection: the client (its code) or the peer's 3 s limit
  let reconnected;
  const second = new Promise((resolve) => (reconnected = resolve));
  let drain;
  const wss = await listen((ws) => {
    connections += 1;
    const n = connections;
    ws.send(JSON.stringify({ type: 'welcome', memberId: `csr_${n}`, generationId: n, assignments: [0] }));
    if (n > 1) {
      if (!ackedOnFirst) ws.send(message(2)); // the server redelivers what was not settled
      ws.on('message', (raw) => {
        const frame = JSON.parse(String(raw));
        if (frame.type === 'ack') ws.send(JSON.stringify({ type: 'acked', ids: frame.ids, failed: [] }));
      });
      reconnected();
      return;
    }
    let draining = false;
    const limit = setTimeout(() => {
      firstClose = 'peer after 3 s';
      ws.close(1012);
    }, 3000);
    ws.on('close', (code) => {
      clearTimeout(limit);
      firstClose ??= `client ${code}`;
    });
    ws.on('message', (raw) => {
      const frame = JSON.parse(String(raw));
      if (frame.type === 'ack' && draining) {
        ackedOnFirst = frame.ids.includes(ID);
        ws.send(JSON.stringify({ type: 'acked', ids: frame.ids, failed: [] }));
      }
    });
    drain = () => {
      draining = true;
      ws.send(JSON.stringify({ type: 'draining' }));
    };
    ws.send(message(1));
  });
  const { port } = wss.address();
  const client = new sdk.QueueCore({ apiKey: 'pq_test_sk_unit', baseURL: `http://127.0.0.1:${port}` });
  const consumer = client.consume('t', { group: 'g' });
  const errors = [];
  const attempts = [];
  consumer.on('error', (err) => errors.push(err));
  let started;
  const running = new Promise((resolve) => (started = resolve));
  consumer.on('message', async (msg) => {
    attempts.push(msg.attempt);
    if (msg.attempt === 1) {
      started();
      await new Promise((resolve) => setTimeout(resolve, 300)); // still running when the node drains
    }
    await msg.ack();
  });
  await consumer.start();
  await running;
  drain();
  await second;
  await new Promise((resolve) => setTimeout(resolve, 200)); // a redelivery, if any, is handled by now
  await consumer.stop();
  await new Promise((resolve) => wss.close(resolve));
  assert.equal(ackedOnFirst, true, 'the ack was sent to the draining node');
  assert.deepEqual(attempts, [1], 'the message was not delivered again');
  assert.equal(firstClose, 'client 1000', 'the consumer closed once its acks were answered');
  assert.equal(connections, 2);
  assert.deepEqual(errors, []);
});

// A close with 1012 whose `draining` frame was not seen is a deploy all the same; and a connection opened on a
// node already draining gets `draining` instead of its welcome, then 1012: a deploy too.
for (const first of ['welcome', 'draining']) {
  test(`a close with 1012 after ${first} is a deploy: no error, reconnected`, async () => {
    let connections = 0;
    let reconnected;
    const second = new Promise((resolve) => (reconnected = resolve));
    const wss = await listen((ws) => {
      connections += 1;
      if (connections === 1 && first === 'draining') ws.send(JSON.stringify({ type: 'draining' }));
      else ws.send(JSON.stringify({ type: 'welcome', memberId: `csr_${connections}`, generationId: 1, assignments: [0] }));
      if (connections === 1) ws.close(1012);
      else reconnected();
    });
    const { port } = wss.address();
    const client = new sdk.QueueCore({ apiKey: 'pq_test_sk_unit', baseURL: `http://127.0.0.1:${port}` });
    const consumer = client.consume('t', { group: 'g' });
    const errors = [];
    consumer.on('error', (err) => errors.push(err));
    consumer.on('message', async (msg) => msg.ack());
    await consumer.start();
    await second;
    await consumer.stop();
    await new Promise((resolve) => wss.close(resolve));
    assert.equal(connections, 2);
    assert.deepEqual(errors, []);
  });
}
