// Push groups through the Node SDK against a real queuecore-server: typed config, the one-time secret,
// rotation, attempts, and a delivery to a real local receiver verified with verifyWebhook.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

let pq;
let receiver;
const got = [];
before(async () => {
  ({ pq } = await client());
  receiver = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
});
after(() => receiver.close());

test('push config, secret once, delivery verified, rotation and attempts', async () => {
  const topic = unique('push');
  await pq.topics.create({ name: topic, partitions: 1 });
  const url = `http://127.0.0.1:${receiver.address().port}/hook`;
  const created = await pq.consumerGroups.update(topic, 'hooks', { push: { url, maxConcurrency: 4, ordered: true } });
  const secret = created.config.push.secret;
  assert.match(secret, /^whsec_/);
  assert.equal(created.config.push.maxConcurrency, 4);
  const described = await pq.consumerGroups.describe(topic, 'hooks');
  assert.equal(described.config.push.secret, `whsec_…${secret.slice(-4)}`);

  const sent = await pq.publish(topic, { hello: 'node' });
  await eventually(() => got.length > 0, 20_000, 'a delivery');
  assert.deepEqual(await sdk.verifyWebhook(got[0].body, got[0].headers, secret), { hello: 'node' });
  assert.equal(got[0].headers['webhook-id'], sent.id);

  const rotated = await pq.consumerGroups.rotatePushSecret(topic, 'hooks');
  assert.match(rotated.secret, /^whsec_/);
  assert.notEqual(rotated.secret, secret);
  const attempts = await eventually(async () => {
    const rows = await pq.consumerGroups.pushAttempts(topic, 'hooks', { limit: 5 });
    return rows.length ? rows : undefined;
  }, 20_000, 'an attempt recorded');
  assert.deepEqual(attempts.map((a) => [a.messageId, a.attempt, a.status]), [[sent.id, 1, 204]]);

  const off = await pq.consumerGroups.update(topic, 'hooks', { push: null });
  assert.equal(off.config.push, null);
  await assert.rejects(pq.consumerGroups.rotatePushSecret(topic, 'hooks'), sdk.BadRequestError);
});
