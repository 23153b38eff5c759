// A deploy: the node sends `draining` and closes with 1012; the consumer reconnects at once (here to the
// same scripted address, as to another node behind one balancer) and reports no error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocketServer } from 'ws';

import * as sdk from '../../dist/esm/index.js';

const ID = 'msg_aaaaaaaaaaaaaaaaaaaaaaaaaa';

test('a draining server is left for another without an error', async () => {
  let connections = 0;
  let markAcked;
  const acked = new Promise((resolve) => (markAcked = resolve));
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => wss.once('listening', resolve));
  wss.on('connection', (ws) => {
    connections += 1;
    ws.send(JSON.stringify({ type: 'welcome', memberId: `csr_${connections}`, generationId: 1, assignments: [0] }));
    if (connections === 1) {
      ws.send(JSON.stringify({ type: 'draining' }));
      ws.close(1012);
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
  assert.equal(connections, 2);
  assert.deepEqual(errors, []);
});
