// How a consumer leaves a server that ends its member: a deploy's `draining` (then 1012), or an `error`
// frame (then a normal close). Either way it reconnects at once (here to the same scripted address, as to
// another node behind one balancer) and consumes there.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocketServer } from 'ws';

import * as sdk from '../../dist/esm/index.js';

const ID = 'msg_aaaaaaaaaaaaaaaaaaaaaaaaaa';

/**
 * A scripted server whose first connection is ended by `endFirst(ws)`; the second delivers one message and
 * answers its ack. Runs a consumer until that ack, and answers how many connections it made and the errors
 * it reported.
 */
async function leaveTheFirstServer(endFirst) {
  let connections = 0;
  let markAcked;
  const acked = new Promise((resolve) => (markAcked = resolve));
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => wss.once('listening', resolve));
  wss.on('connection', (ws) => {
    connections += 1;
    ws.send(JSON.stringify({ type: 'welcome', memberId: `csr_${connections}`, generationId: 1, assignments: [0] }));
    if (connections === 1) {
      endFirst(ws);
      return;
    }
    ws.send(
      JSON.stringify({
        type: 'message', id: ID, topic: 't', partition: 0, offset: 0, key: null, headers: {}, data: 1,
        timestamp: '2026-11-26T00:00:00.000Z', attempt: 1,
      }),
    );
    ws.on('message', (raw) => {
      const frame = JSON.parse(String(raw));
      if (frame.type === 'ack') {
        ws.send(JSON.stringify({ type: 'acked', ids: [ID], failed: [] }));
        markAcked();
      }
    });
  });
  const { port } = wss.address();
  const client = new sdk.QueueCore({ apiKey: 'pq_test_sk_unit', baseURL: `http://127.0.0.1:${port}` });
  const consumer = client.consume('t', { group: 'g' });
  const errors = [];
  consumer.on('error', (err) => errors.push(err));
  consumer.on('message', async (msg) => {
    await msg.ack();
  });
  await consumer.start();
  await acked;
  await consumer.stop();
  await new Promise((resolve) => wss.close(resolve));
  return { connections, errors };
}

test('a draining server is left for another without an error', async () => {
  const { connections, errors } = await leaveTheFirstServer((ws) => {
    ws.send(JSON.stringify({ type: 'draining' }));
    ws.close(1012);
  });
  assert.equal(connections, 2);
  assert.deepEqual(errors, []);
});

// The server ends a member for a reason of its own with an `error` frame, then a normal close (1000): one
// end, reported once (the frame, which says why), as the Python SDK does; the consumer reconnects as after
// any failure. Seen in the rolling restart (bench/rolling_restart.py): a JetStream read refused while a
// NATS node restarted was reported twice, the 503 and then "WebSocket connection lost (code 1000)".
test('an error frame and the normal close after it are one report', async () => {
  const { connections, errors } = await leaveTheFirstServer((ws) => {
    ws.send(
      JSON.stringify({
        type: 'error',
        error: { code: 'SERVICE_UNAVAILABLE', status: 503, message: 'JetStream did not answer a read', requestId: 'req_1' },
      }),
    );
    ws.close(1000);
  });
  assert.equal(connections, 2);
  assert.equal(errors.length, 1, errors.map(String).join('; '));
  // Typed by its status, as the Python and Go SDKs type it (and as an HTTP 503 is).
  assert.ok(errors[0] instanceof sdk.ServiceUnavailableError, errors[0].constructor.name);
  assert.equal(errors[0].status, 503);
  assert.equal(errors[0].code, 'SERVICE_UNAVAILABLE');
});
