// What the three SDKs share (sdk/README.md's parity table), in Node: the error classes (APIStatusError
// above the status classes), and the rate-limit state from the draft structured fields, else the older ones,
// on errors and on the client. No server: a fake fetch.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../../dist/esm/index.js';

const DRAFT = {
  'RateLimit-Policy': '"admin";q=10;w=1, "publish";q=100;w=1',
  RateLimit: '"publish";r=37;t=1',
  'RateLimit-Limit': '999',
};

test('the draft structured fields win; the policy is matched by name', () => {
  assert.deepEqual(sdk.parseRateLimit(new Headers(DRAFT)), {
    policy: 'publish',
    limit: 100,
    remaining: 37,
    reset: 1,
    window: 1,
  });
});

test('the older fields when the structured ones are missing; nothing without either', () => {
  const old = new Headers({ 'RateLimit-Limit': '100', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '1' });
  assert.deepEqual(sdk.parseRateLimit(old), { policy: undefined, limit: 100, remaining: 0, reset: 1, window: undefined });
  assert.equal(sdk.parseRateLimit(new Headers({ 'x-request-id': 'req_1' })), undefined);
});

test('status errors are APIStatusErrors; a RateLimitError and the client carry the rate-limit state', async () => {
  const client = new sdk.QueueCore({
    apiKey: 'pq_test_sk_unit',
    baseUrl: 'http://queuecore.test',
    maxRetries: 0,
    fetch: async () =>
      new Response(JSON.stringify({ error: { code: 'RATE_LIMIT_EXCEEDED', message: 'slow down', status: 429 } }), {
        status: 429,
        headers: { 'content-type': 'application/json', 'retry-after': '1', ...DRAFT },
      }),
  });
  assert.equal(client.rateLimit, undefined);
  const error = await client.topics.describe('x').catch((err) => err);
  assert.ok(error instanceof sdk.RateLimitError && error instanceof sdk.APIStatusError && error instanceof sdk.APIError);
  assert.deepEqual(error.rateLimit, { policy: 'publish', limit: 100, remaining: 37, reset: 1, window: 1 });
  assert.deepEqual(client.rateLimit, error.rateLimit);
  assert.deepEqual(client.withOptions({ maxRetries: 1 }).rateLimit, error.rateLimit); // shared with copies
  for (const cls of [sdk.BadRequestError, sdk.NotFoundError, sdk.InternalServerError, sdk.ServiceUnavailableError]) {
    assert.ok(cls.prototype instanceof sdk.APIStatusError, cls.name);
  }
  assert.ok(!(sdk.APIConnectionError.prototype instanceof sdk.APIStatusError));
});

test('an extend of a message acked or nacked in the same batch is not sent', async () => {
  const { Pending } = await import('../../dist/esm/core/consumer-kit.js');
  const pending = new Pending();
  pending.extends.push({ id: 'a', seconds: 30 }, { id: 'b', seconds: 30 }, { id: 'c', seconds: 30 });
  pending.acks.push('a');
  pending.nacks.push({ id: 'b', reason: 'no', delay: undefined });
  const taken = pending.take();
  assert.deepEqual(taken.acks, ['a']);
  assert.deepEqual(taken.nacks.map((nack) => nack.id), ['b']);
  assert.deepEqual(taken.extends, [{ id: 'c', seconds: 30 }]);
});

test('an AckError says what was refused', () => {
  const error = new sdk.AckError('msg_1', 'ACK_EXPIRED', 'nack');
  assert.ok(error instanceof sdk.QueueCoreError && !(error instanceof sdk.APIError));
  assert.deepEqual([error.messageId, error.code, error.action], ['msg_1', 'ACK_EXPIRED', 'nack']);
  assert.equal(error.message, 'The nack of msg_1 failed: ACK_EXPIRED');
});

test('onResponse gets the final answer of a call, after retries, also when the call throws', async () => {
  const answers = [
    () => new Response('{}', { status: 503, headers: { 'retry-after': '0' } }),
    () =>
      new Response(JSON.stringify({ name: 'x', partitionDetails: [] }), {
        status: 200,
        headers: { 'content-type': 'application/json', 'x-request-id': 'req_ok', ...DRAFT },
      }),
    () =>
      new Response(JSON.stringify({ error: { code: 'TOPIC_NOT_FOUND', message: 'no', status: 404 } }), {
        status: 404,
        headers: { 'content-type': 'application/json', 'x-request-id': 'req_404' },
      }),
  ];
  class NoWait extends sdk.QueueCore {
    sleep() {
      return Promise.resolve();
    }
  }
  const client = new NoWait({
    apiKey: 'pq_test_sk_unit',
    baseUrl: 'http://queuecore.test',
    fetch: async () => answers.shift()(),
  });
  const seen = [];
  await client.topics.describe('x', { onResponse: (response) => seen.push(response) });
  assert.equal(seen.length, 1); // not the retried 503
  assert.equal(seen[0].status, 200);
  assert.equal(seen[0].requestId, 'req_ok');
  assert.equal(seen[0].rateLimit.policy, 'publish');
  await assert.rejects(client.topics.describe('y', { onResponse: (response) => seen.push(response) }), sdk.NotFoundError);
  assert.deepEqual([seen[1].status, seen[1].requestId, seen[1].rateLimit], [404, 'req_404', undefined]);
});
