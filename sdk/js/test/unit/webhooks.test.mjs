// verifyWebhook / signWebhook against the Standard Webhooks spec's test vectors (the secret, id, payload
// and expected signature every library of standard-webhooks/standard-webhooks tests with). No server.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../../dist/esm/index.js';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const MSG_ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const PAYLOAD = '{"test": 2432232314}';
const TOLERANCE = 300;
const now = () => Math.floor(Date.now() / 1000);

async function signed(timestamp, secret = SECRET) {
  return {
    'webhook-id': MSG_ID,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': await sdk.signWebhook(secret, MSG_ID, timestamp, PAYLOAD),
  };
}

test('the spec vector signs as expected, with or without the whsec_ prefix', async () => {
  const expected = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';
  assert.equal(await sdk.signWebhook(SECRET, MSG_ID, 1614265330, PAYLOAD), expected);
  assert.equal(await sdk.signWebhook(SECRET.slice(6), MSG_ID, 1614265330, new TextEncoder().encode(PAYLOAD)), expected);
});

test('a valid signature resolves to the parsed body, from a Headers or a plain object', async () => {
  const headers = await signed(now());
  assert.deepEqual(await sdk.verifyWebhook(PAYLOAD, headers, SECRET), { test: 2432232314 });
  assert.deepEqual(await sdk.verifyWebhook(Buffer.from(PAYLOAD), new Headers(headers), SECRET), { test: 2432232314 });
  const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
  assert.deepEqual(await sdk.verifyWebhook(PAYLOAD, upper, SECRET), { test: 2432232314 });
});

for (const missing of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
  test(`a missing ${missing} is refused`, async () => {
    const headers = await signed(now());
    delete headers[missing];
    await assert.rejects(sdk.verifyWebhook(PAYLOAD, headers, SECRET), (e) => e instanceof sdk.WebhookVerificationError && e.message.includes(missing));
  });
}

test('an invalid signature, a changed body, old and future timestamps are refused', async () => {
  const t = now();
  const bad = { ...(await signed(t)), 'webhook-signature': 'v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=' };
  await assert.rejects(sdk.verifyWebhook(PAYLOAD, bad, SECRET), sdk.WebhookVerificationError);
  await assert.rejects(sdk.verifyWebhook('{"test": 2432232315}', await signed(t), SECRET), sdk.WebhookVerificationError);
  await assert.rejects(sdk.verifyWebhook(PAYLOAD, await signed(t - TOLERANCE - 1), SECRET, { now: t }), /too old/);
  await assert.rejects(sdk.verifyWebhook(PAYLOAD, await signed(t + TOLERANCE + 1), SECRET, { now: t }), /future/);
  assert.ok(sdk.WebhookVerificationError.prototype instanceof sdk.QueueCoreError);
});

test('tolerance null skips the time check, not the signature', async () => {
  const t = now();
  assert.ok(await sdk.verifyWebhook(PAYLOAD, await signed(t - 10 * TOLERANCE), SECRET, { tolerance: null }));
  const moved = { ...(await signed(t)), 'webhook-timestamp': '946684800' };
  await assert.rejects(sdk.verifyWebhook(PAYLOAD, moved, SECRET, { tolerance: null }), sdk.WebhookVerificationError);
});

test('one matching signature among several (v2 entries ignored) is enough; a rotation verifies with either secret', async () => {
  const t = now();
  const headers = await signed(t);
  const bogus = 'v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=';
  headers['webhook-signature'] = [bogus, 'v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=', headers['webhook-signature'], bogus].join(' ');
  assert.deepEqual(await sdk.verifyWebhook(PAYLOAD, headers, SECRET), { test: 2432232314 });
  const next = 'whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY';
  headers['webhook-signature'] += ' ' + (await sdk.signWebhook(next, MSG_ID, t, PAYLOAD));
  assert.deepEqual(await sdk.verifyWebhook(PAYLOAD, headers, next), await sdk.verifyWebhook(PAYLOAD, headers, [next, SECRET]));
  await assert.rejects(sdk.verifyWebhook(PAYLOAD, await signed(t), next), sdk.WebhookVerificationError);
});
