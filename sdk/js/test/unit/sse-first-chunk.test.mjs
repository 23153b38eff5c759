// Over SSE the welcome and the first messages often arrive in one chunk of the stream. Every one of them
// reaches the handler (they were once dropped while the consumer was still taking the welcome, and came
// back only after the ack timeout). A scripted server writes them in a single write.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';

import * as sdk from '../../dist/esm/index.js';

const message = (offset) => ({
  id: `msg_${String(offset).padStart(26, 'a')}`, topic: 't', partition: 0, offset, key: null, headers: {},
  data: { offset }, timestamp: '2026-11-26T00:00:00.000Z', attempt: 1, ackDeadline: '2026-11-26T00:00:30.000Z',
});

test('messages in the same chunk as the welcome are all handled and acked', async () => {
  const acked = [];
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url.includes('/events')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const welcome = { memberId: 'csr_unit', generationId: 1, assignments: [0] };
      let chunk = `event: welcome\ndata: ${JSON.stringify(welcome)}\n\n`;
      for (const offset of [0, 1, 2]) chunk += `event: message\nid: ${message(offset).id}\ndata: ${JSON.stringify(message(offset))}\n\n`;
      res.write(chunk); // one write: one chunk
      req.on('close', () => res.end());
      return;
    }
    let body = '';
    req.on('data', (part) => (body += part));
    req.on('end', () => {
      if (req.url.endsWith('/ack')) {
        acked.push(...JSON.parse(body).ids);
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ acked: JSON.parse(body).ids, failed: [] }));
      } else {
        res.writeHead(204).end();
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  const client = new sdk.QueueCore({ apiKey: 'pq_test_sk_unit', baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 });
  const consumer = client.consume('t', { group: 'g', transport: 'sse' });
  const handled = [];
  let all;
  const three = new Promise((resolve) => (all = resolve));
  consumer.on('message', async (msg) => {
    handled.push(msg.offset);
    await msg.ack();
    if (handled.length === 3) all();
  });
  try {
    await consumer.start();
    await three;
  } finally {
    await consumer.stop();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  assert.deepEqual(handled, [0, 1, 2]);
  assert.deepEqual(acked.sort(), [0, 1, 2].map((o) => message(o).id).sort());
});
