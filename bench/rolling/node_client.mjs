// The Node.js SDK's share of the rolling-restart load (bench/rolling_restart.py,
// tests/system/faults/rollout.py): publishers sending sequential values with the SDK's retries and
// idempotency keys as shipped, and WebSocket members of one consumer group acking every message, through
// the deployment's one address for as long as the rollout lasts. It imports the SDK as built in sdk/js
// (make install-js), as a customer's project imports the package.
//
//   node bench/rolling/node_client.mjs --base-url URL --topic T --group G --out FILE
//        [--publishers 2] [--consumers 2] [--max-retries 8] [--drain 60]
//
// The key comes from QUEUECORE_API_KEY. It prints {"ready": true} once its members have joined, publishes
// until a line "stop" (or the end) on stdin, then waits until every acknowledged publish was delivered (or
// --drain seconds), 2 s more for a late redelivery, stops its members and exits. Every event is a JSON line
// of FILE, which the Python side reads (rollout.read_record):
//
//   {"event": "publish", "value": 7, "at": <unix seconds>, "seconds": <latency>}
//   {"event": "publish_error", "at": ..., "error": "..."}
//   {"event": "delivery", "value": 7, "partition": 1, "offset": 3, "attempt": 1, "at": ...}
//   {"event": "consumer_error", "at": ..., "error": "..."}
import { createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { QueueCore } from '../../sdk/js/dist/esm/index.js';

const { values: args } = parseArgs({
  options: {
    'base-url': { type: 'string' },
    topic: { type: 'string' },
    group: { type: 'string' },
    out: { type: 'string' },
    publishers: { type: 'string', default: '2' },
    consumers: { type: 'string', default: '2' },
    'max-retries': { type: 'string', default: '8' },
    drain: { type: 'string', default: '60' },
  },
});

const out = createWriteStream(args.out);
const acked = new Set();
const delivered = new Set();
const now = () => Date.now() / 1000;
const describe = (err) => `${err?.constructor?.name ?? typeof err}: ${err?.message ?? err}`;
function write(event) {
  out.write(`${JSON.stringify(event)}\n`);
  if (event.event === 'publish') acked.add(event.value);
  if (event.event === 'delivery') delivered.add(event.value);
}

const pq = new QueueCore({ baseUrl: args['base-url'], maxRetries: Number(args['max-retries']) });

const members = Array.from({ length: Number(args.consumers) }, () => {
  const consumer = pq.consume(args.topic, { group: args.group, startFrom: 'earliest', maxInFlight: 200 });
  consumer.on('message', async (msg) => {
    write({ event: 'delivery', value: msg.data.v, partition: msg.partition, offset: msg.offset, attempt: msg.attempt, at: now() });
    await msg.ack();
  });
  // Errors the consumer survives (reconnects, refused acks) are reported here, not thrown.
  consumer.on('error', (err) => write({ event: 'consumer_error', at: now(), error: describe(err) }));
  return consumer;
});
await Promise.all(members.map((consumer) => consumer.start()));
process.stdout.write('{"ready": true}\n');

let publishing = true;
let next = 0;
async function publisher() {
  while (publishing) {
    const value = next++;
    const started = performance.now();
    try {
      await pq.publish(args.topic, { v: value }, { key: String(value) });
    } catch (err) {
      // an error surfaced to the caller: what the run counts
      write({ event: 'publish_error', at: now(), error: describe(err) });
      continue;
    }
    write({ event: 'publish', value, at: now(), seconds: (performance.now() - started) / 1000 });
    await sleep(5);
  }
}
const publishers = Array.from({ length: Number(args.publishers) }, publisher);

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === 'stop') break;
}
publishing = false;
await Promise.all(publishers);
const deadline = Date.now() + Number(args.drain) * 1000;
while (Date.now() < deadline && [...acked].some((v) => !delivered.has(v))) await sleep(500);
await sleep(2000); // a redelivery after the last ack would show now
for (const consumer of members) {
  try {
    await consumer.stop();
  } catch (err) {
    write({ event: 'consumer_error', at: now(), error: `stop: ${describe(err)}` });
  }
}
await new Promise((resolve, reject) => out.end((err) => (err ? reject(err) : resolve())));
process.exit(0);
