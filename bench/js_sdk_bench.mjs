// One round of the Node SDK's figures against a running server (driven by bench/js_sdk_bench.py, which
// runs the Python SDK's twin, bench/py_sdk_bench.py, on the same server in the same run):
//
//   publishBatch: --messages 200-byte messages on a 3-partition topic, batches of 1,000, 4 in flight.
//   consume+ack:  --messages pre-published on a 1-partition topic; one consumer (WebSocket, maxInFlight
//                 1000) of a fresh group from earliest, whose handler awaits msg.ack(); from start() until
//                 every message is handled and stop() has resolved (every ack confirmed by the server).
//
//   node bench/js_sdk_bench.mjs --base-url URL --key KEY [--messages 20000]
// Prints one JSON line: {"publishBatch": msgs/s, "consume": msgs/s}. The key comes from --key or
// QUEUECORE_API_KEY; it is never printed.
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', 'sdk', 'js', 'package.json'));
const { QueueCore, BatchMessage } = require('./dist/cjs/index.js');

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => (arg.startsWith('--') ? [...pairs, [arg.slice(2), all[i + 1]]] : pairs), []),
);
const messages = Number(args.messages ?? 20000);
const pq = new QueueCore({ apiKey: args.key ?? process.env.QUEUECORE_API_KEY, baseUrl: args['base-url'] });

const payload = (i) => ({ type: 'order.created', orderId: `ord_${String(i).padStart(8, '0')}`, amount: 9900, note: 'x'.repeat(120) });
const name = (what) => `bench-js-${what}-${randomBytes(4).toString('hex')}`;

async function publishBatchRate() {
  const topic = name('pub');
  await pq.topics.create({ name: topic, partitions: 3 });
  const batches = [];
  for (let start = 0; start < messages; start += 1000) {
    batches.push(Array.from({ length: Math.min(1000, messages - start) }, (_, j) => payload(start + j)));
  }
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (next < batches.length) await pq.publishBatch(topic, batches[next++]);
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await pq.topics.delete(topic);
  return messages / seconds;
}

async function consumeRate() {
  const topic = name('csm');
  await pq.topics.create({ name: topic, partitions: 1 });
  for (let start = 0; start < messages; start += 1000) {
    const batch = Array.from({ length: Math.min(1000, messages - start) }, (_, j) => new BatchMessage({ data: payload(start + j) }));
    await pq.publishBatch(topic, batch);
  }
  const consumer = pq.consume(topic, { group: 'bench', startFrom: 'earliest', maxInFlight: 1000 });
  let handled = 0;
  let done;
  const all = new Promise((resolve) => (done = resolve));
  consumer.on('message', async (msg) => {
    await msg.ack();
    if (++handled === messages) done();
  });
  consumer.on('error', (err) => console.error(String(err)));
  const started = performance.now();
  await consumer.start();
  await all;
  await consumer.stop();
  const seconds = (performance.now() - started) / 1000;
  const lag = (await pq.offsets.get(topic, { group: 'bench', partition: 0 })).lag;
  if (lag !== 0) throw new Error(`lag ${lag} after stop(): acks not all confirmed`);
  await pq.topics.delete(topic);
  return messages / seconds;
}

const publishBatch = await publishBatchRate();
const consume = await consumeRate();
console.log(JSON.stringify({ client: 'node', node: process.version, publishBatch, consume }));
