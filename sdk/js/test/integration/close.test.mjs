// A graceful stop confirms the acks of every handled message, also when a periodic flush carrying some of
// them is still on its way at that moment (pull and SSE consumers settle over REST in the background).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { client, unique } from '../support/helpers.mjs';

/** The real fetch to the real server, except that the first ack request waits a second before it goes. */
function slowFirstAck() {
  let held = false;
  let seen;
  const arrived = new Promise((resolve) => (seen = resolve));
  const fetchImpl = async (input, init) => {
    const url = new URL(typeof input === 'string' ? input : input.url);
    if (!held && init?.method === 'POST' && url.pathname.endsWith('/ack')) {
      held = true;
      seen();
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    return fetch(input, init);
  };
  return { fetchImpl, arrived };
}

for (const transport of ['pull', 'sse']) {
  test(`${transport}: stop() confirms the acks whose flush was in flight`, async () => {
    const { pq } = await client();
    const slow = slowFirstAck();
    const { pq: through } = await client({ fetch: slow.fetchImpl });
    const topic = unique('close');
    await pq.topics.create({ name: topic, partitions: 1 });
    await pq.publish(topic, { n: 1 });
    const consumer = through.consume(topic, { group: 'g', startFrom: 'earliest', transport });
    consumer.on('error', () => {});
    consumer.on('message', async (msg) => {
      await msg.ack();
    });
    await consumer.start();
    await slow.arrived;
    await consumer.stop(); // while the ack is on its way
    const lag = (await pq.offsets.get(topic, { group: 'g' })).reduce((n, p) => n + p.lag, 0);
    assert.equal(lag, 0, 'the ack in flight at the stop was lost');
  });
}
