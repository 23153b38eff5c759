// Where the runtime has a global WebSocket (Node 22+, or Node 20/21 with --experimental-websocket), the
// consumer uses it, authenticating with a short-lived ?token= (the WHATWG WebSocket sends no headers).
// Run in a child Node process that has one; skipped where this Node cannot provide it.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { SDK_DIR } from '../support/server.mjs';
import { client, unique } from '../support/helpers.mjs';

let pq;
let server;
before(async () => {
  ({ pq, server } = await client());
});

function nodeFlagsForGlobalWebSocket() {
  const probe = (flags) => spawnSync(process.execPath, [...flags, '-e', 'process.exit(typeof WebSocket === "function" ? 0 : 1)']).status === 0;
  if (probe([])) return [];
  if (probe(['--experimental-websocket'])) return ['--experimental-websocket'];
  return null;
}

test('a consumer over the global WebSocket (token auth): joins, receives, acks, stops; a bad topic is NotFoundError', async (t) => {
  const flags = nodeFlagsForGlobalWebSocket();
  if (flags === null) return t.skip('this Node has no global WebSocket');
  const topic = unique('gws');
  await pq.topics.create({ name: topic, partitions: 2 });
  await pq.publishBatch(topic, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  const dir = mkdtempSync(join(tmpdir(), 'qc-gws-'));
  const script = join(dir, 'consume.mjs');
  writeFileSync(
    script,
    `import { QueueCore, NotFoundError } from ${JSON.stringify(pathToFileURL(join(SDK_DIR, 'dist', 'esm', 'index.js')).href)};
if (typeof WebSocket !== 'function') throw new Error('no global WebSocket');
const pq = new QueueCore();
const consumer = pq.consume(${JSON.stringify(topic)}, { group: 'gws', startFrom: 'earliest' });
const got = [];
const all = new Promise((resolve) => consumer.on('message', async (msg) => { got.push(msg.data.n); await msg.ack(); if (got.length === 3) resolve(); }));
await consumer.start();
await all;
await consumer.stop();
const missing = pq.consume('no.such.topic.gws', { group: 'g' });
missing.on('error', () => {});
try { await missing.start(); throw new Error('started'); } catch (e) { if (!(e instanceof NotFoundError)) throw e; }
console.log(JSON.stringify(got.sort()));
`,
  );
  try {
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('QUEUECORE_')));
    const result = spawnSync(process.execPath, [...flags, script], {
      env: { ...env, QUEUECORE_API_KEY: server.key, QUEUECORE_BASE_URL: server.url },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(result.status, 0, result.stderr + result.stdout);
    assert.equal(result.stdout.trim().split('\n').at(-1), '[1,2,3]');
    const offsets = await pq.offsets.get(topic, { group: 'gws' });
    assert.equal(offsets.reduce((n, p) => n + p.lag, 0), 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
