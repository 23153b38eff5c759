// Unit tests of the request loop over a fake fetch: retries, backoff, Retry-After, idempotency keys, errors,
// options. No server, no real waiting: the client's sleep is overridden to record the waits.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import * as sdk from '../../dist/esm/index.js';

const { QueueCore } = sdk;

function envelope(status, code, message = 'nope', requestId = 'req_test') {
  return { error: { code, message, status, requestId } };
}

function reply(status, body, headers = {}) {
  return () =>
    new Response(body === undefined ? null : JSON.stringify(body), {
      status,
      headers: { 'content-type': 'application/json', 'x-request-id': 'req_test', ...headers },
    });
}

/** A client over a fake fetch answering each request with the next item (a function or an Error to throw). */
function fake(items, options = {}) {
  const requests = [];
  const sleeps = [];
  const pending = [...items];
  class Recording extends QueueCore {
    sleep(ms) {
      sleeps.push(ms);
      return Promise.resolve();
    }
  }
  const client = new Recording({
    apiKey: 'pq_test_sk_unit',
    baseUrl: 'http://queuecore.test',
    fetch: async (url, init) => {
      requests.push({ url: String(url), ...init, headers: { ...init.headers } });
      const item = pending.shift();
      if (item === undefined) throw new Error('no more answers');
      if (item instanceof Error) throw item;
      return item(url, init);
    },
    ...options,
  });
  return { client, requests, sleeps };
}

const PUBLISHED = { id: 'msg_1', offset: 0, partition: 0, timestamp: '2026-03-28T10:42:18.003Z', latency: 1, durability: 'fsync' };

describe('retries', () => {
  test('a 429 waits exactly its Retry-After, then succeeds; the publish keeps one idempotency key', async () => {
    const { client, requests, sleeps } = fake([
      reply(429, envelope(429, 'RATE_LIMIT_EXCEEDED'), { 'retry-after': '2' }),
      reply(201, PUBLISHED),
    ]);
    const result = await client.publish('order.events', { a: 1 });
    assert.equal(result.id, 'msg_1');
    assert.equal(result.replayed, false);
    assert.deepEqual(sleeps, [2000]);
    assert.equal(requests.length, 2);
    const keys = requests.map((r) => r.headers['Idempotency-Key']);
    assert.match(keys[0], /^qc-js-[0-9a-f-]{36}$/);
    assert.equal(keys[0], keys[1]);
    assert.equal(requests[0].body, requests[1].body);
  });

  test('two publishes get two different keys', async () => {
    const { client, requests } = fake([reply(201, PUBLISHED), reply(201, PUBLISHED)]);
    await client.publish('t', 1);
    await client.publish('t', 2);
    assert.notEqual(requests[0].headers['Idempotency-Key'], requests[1].headers['Idempotency-Key']);
  });

  test('an explicit idempotencyKey is sent as is; a replay is flagged', async () => {
    const { client, requests } = fake([reply(201, PUBLISHED, { 'idempotent-replayed': 'true' })]);
    const result = await client.publish('t', 1, { idempotencyKey: 'order-1', key: 'k', headers: { a: 'b' }, partition: 0 });
    assert.equal(requests[0].headers['Idempotency-Key'], 'order-1');
    assert.deepEqual(JSON.parse(requests[0].body), { data: 1, key: 'k', headers: { a: 'b' }, partition: 0 });
    assert.equal(result.replayed, true);
  });

  test('Retry-After is capped at 60 s', async () => {
    const { client, sleeps } = fake([
      reply(429, envelope(429, 'RATE_LIMIT_EXCEEDED'), { 'retry-after': '3600' }),
      reply(200, { data: [], nextCursor: null }),
    ]);
    await client.topics.list();
    assert.deepEqual(sleeps, [60_000]);
  });

  test('503 and connection errors back off exponentially with jitter, within bounds', async () => {
    const { client, sleeps, requests } = fake(
      [
        reply(503, envelope(503, 'SERVICE_UNAVAILABLE')),
        new TypeError('fetch failed'),
        reply(502, undefined),
        reply(201, { count: 1, latency: 1, messages: [] }),
      ],
      { maxRetries: 3 },
    );
    await client.publishBatch('t', [{ a: 1 }]);
    assert.equal(requests.length, 4);
    assert.equal(sleeps.length, 3);
    const bounds = [500, 1000, 2000];
    sleeps.forEach((ms, i) => {
      assert.ok(ms <= bounds[i] && ms >= bounds[i] * 0.75, `retry ${i}: ${ms} ms not in [${bounds[i] * 0.75}, ${bounds[i]}]`);
    });
    const bodies = requests.map((r) => JSON.parse(r.body));
    const key = bodies[0].messages[0].idempotencyKey;
    assert.match(key, /^qc-js-/);
    for (const body of bodies) assert.equal(body.messages[0].idempotencyKey, key);
  });

  test('the backoff is capped at 8 s', async () => {
    const items = [];
    for (let i = 0; i < 7; i++) items.push(reply(503, envelope(503, 'SERVICE_UNAVAILABLE')));
    items.push(reply(200, { data: [], nextCursor: null }));
    const { client, sleeps } = fake(items, { maxRetries: 7 });
    await client.topics.list();
    assert.ok(Math.max(...sleeps) <= 8000);
    assert.ok(sleeps[6] >= 6000);
  });

  for (const [status, code, cls] of [
    [400, 'INVALID_REQUEST', 'BadRequestError'],
    [401, 'INVALID_API_KEY', 'AuthenticationError'],
    [403, 'FORBIDDEN', 'PermissionDeniedError'],
    [404, 'TOPIC_NOT_FOUND', 'NotFoundError'],
    [409, 'TOPIC_ALREADY_EXISTS', 'ConflictError'],
    [413, 'PAYLOAD_TOO_LARGE', 'PayloadTooLargeError'],
    [500, 'INTERNAL_ERROR', 'InternalServerError'],
  ]) {
    test(`${status} is not retried and throws ${cls}`, async () => {
      const { client, requests, sleeps } = fake([reply(status, envelope(status, code, 'the message', 'req_abc'))]);
      const error = await client.topics.describe('x').then(
        () => assert.fail('no error'),
        (e) => e,
      );
      assert.equal(requests.length, 1);
      assert.deepEqual(sleeps, []);
      assert.ok(error instanceof sdk[cls], error.constructor.name);
      assert.ok(error instanceof sdk.APIError);
      assert.ok(error instanceof sdk.QueueCoreError);
      assert.ok(error instanceof Error);
      assert.equal(error.status, status);
      assert.equal(error.code, code);
      assert.equal(error.message, 'the message');
      assert.equal(error.requestId, 'req_test'); // the header wins over the body
      assert.equal(error.name, cls);
      assert.match(String(error), new RegExp(`^${cls}: Request req_test: ${status} ${code}: the message$`));
    });
  }

  test('retries used up: the last error is thrown (RateLimitError with retryAfter)', async () => {
    const { client, requests } = fake([
      reply(429, envelope(429, 'RATE_LIMIT_EXCEEDED'), { 'retry-after': '1' }),
      reply(429, envelope(429, 'RATE_LIMIT_EXCEEDED'), { 'retry-after': '1' }),
      reply(429, envelope(429, 'RATE_LIMIT_EXCEEDED'), { 'retry-after': '1' }),
    ]);
    await assert.rejects(client.topics.list(), (e) => e instanceof sdk.RateLimitError && e.retryAfter === 1);
    assert.equal(requests.length, 3); // 1 + maxRetries (2)
  });

  test('maxRetries 0 (per client or per call) fails fast', async () => {
    const { client, requests } = fake([reply(503, envelope(503, 'SERVICE_UNAVAILABLE'))], { maxRetries: 0 });
    await assert.rejects(client.topics.list(), sdk.ServiceUnavailableError);
    assert.equal(requests.length, 1);
    const second = fake([reply(503, envelope(503, 'SERVICE_UNAVAILABLE'))]);
    await assert.rejects(second.client.topics.describe('x', { maxRetries: 0 }), sdk.ServiceUnavailableError);
    assert.equal(second.requests.length, 1);
  });

  test('connection errors exhausted: APIConnectionError with the cause', async () => {
    const cause = new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED') });
    const { client } = fake([cause, cause, cause]);
    await assert.rejects(client.topics.list(), (e) => {
      assert.ok(e instanceof sdk.APIConnectionError);
      assert.ok(!(e instanceof sdk.APITimeoutError));
      assert.equal(e.status, undefined);
      assert.equal(e.cause, cause);
      assert.match(e.message, /ECONNREFUSED/);
      return true;
    });
  });

  test('a timed-out attempt is retried, then APITimeoutError', async () => {
    const hang = (_url, init) =>
      new Promise((_resolve, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
    const { client, requests, sleeps } = fake([hang, hang], { timeout: 20, maxRetries: 1 });
    await assert.rejects(client.topics.list(), sdk.APITimeoutError);
    assert.equal(requests.length, 2);
    assert.equal(sleeps.length, 1);
  });

  test('a caller abort is not retried', async () => {
    const controller = new AbortController();
    const hang = (_url, init) =>
      new Promise((_resolve, reject) => init.signal.addEventListener('abort', () => reject(new Error('aborted'))));
    const { client, requests } = fake([hang, hang]);
    const call = client.topics.describe('x', { signal: controller.signal });
    setTimeout(() => controller.abort(), 5);
    await assert.rejects(call, sdk.APIConnectionError);
    assert.equal(requests.length, 1);
  });

  test('a 2xx that is not JSON throws APIResponseValidationError', async () => {
    const { client } = fake([() => new Response('<html>proxy</html>', { status: 200 })]);
    await assert.rejects(client.topics.describe('x'), sdk.APIResponseValidationError);
  });
});

describe('requests', () => {
  test('auth, user agent, JSON body and query', async () => {
    const { client, requests } = fake([reply(200, { data: [{ name: 'a' }], nextCursor: 'c1' }), reply(200, { data: [{ name: 'b' }], nextCursor: null })]);
    const names = (await client.topics.list({ limit: 1 })).map((t) => t.name);
    assert.deepEqual(names, ['a', 'b']);
    assert.equal(requests[0].url, 'http://queuecore.test/v1/topics?limit=1');
    assert.equal(requests[1].url, 'http://queuecore.test/v1/topics?limit=1&cursor=c1');
    assert.equal(requests[0].headers['Authorization'], 'Bearer pq_test_sk_unit');
    assert.match(requests[0].headers['User-Agent'], /^queuecore-node\//);
  });

  test('a topic create sends replicas only when given, and reads it back', async () => {
    const topic = { id: 'top_1', name: 't', partitions: 3, retention: '7d', delivery: 'exactly-once', replicas: 5, status: 'active', createdAt: '2026-03-28T10:42:18.003Z' };
    const { client, requests } = fake([reply(201, topic), reply(201, topic)]);
    const created = await client.topics.create({ name: 't', replicas: 5 });
    assert.equal(created.replicas, 5);
    await client.topics.create({ name: 't' });
    assert.deepEqual(JSON.parse(requests[0].body), { name: 't', replicas: 5 });
    assert.deepEqual(JSON.parse(requests[1].body), { name: 't' });
  });

  test('path segments are encoded', async () => {
    const { client, requests } = fake([reply(200, {})]);
    await client.consumerGroups.describe('t', 'a/b c');
    assert.equal(requests[0].url, 'http://queuecore.test/v1/topics/t/groups/a%2Fb%20c');
  });

  test('NaN is refused before sending', async () => {
    const { client, requests } = fake([]);
    await assert.rejects(client.publish('t', { n: NaN }), sdk.QueueCoreError);
    assert.equal(requests.length, 0);
  });
});

describe('options', () => {
  test('the API key is trimmed; an empty or missing one is refused clearly', () => {
    const saved = process.env.QUEUECORE_API_KEY;
    try {
      assert.equal(new QueueCore({ apiKey: '  pq_test_sk_abc\n' }).apiKey, 'pq_test_sk_abc');
      assert.throws(() => new QueueCore({ apiKey: ' \n' }), /No API key/);
      delete process.env.QUEUECORE_API_KEY;
      assert.throws(() => new QueueCore(), (e) => e instanceof sdk.QueueCoreError && /QUEUECORE_API_KEY/.test(e.message));
      process.env.QUEUECORE_API_KEY = 'pq_test_sk_fromenv\n';
      assert.equal(new QueueCore().apiKey, 'pq_test_sk_fromenv');
    } finally {
      if (saved === undefined) delete process.env.QUEUECORE_API_KEY;
      else process.env.QUEUECORE_API_KEY = saved;
    }
  });

  test('region rule: explicit baseUrl, else QUEUECORE_BASE_URL, else region, else local', () => {
    const saved = process.env.QUEUECORE_BASE_URL;
    try {
      delete process.env.QUEUECORE_BASE_URL;
      assert.equal(new QueueCore({ apiKey: 'k', region: 'us-east-1' }).baseURL, 'https://us-east-1.api.queuecore.cloud');
      assert.equal(new QueueCore({ apiKey: 'k' }).baseURL, 'http://127.0.0.1:8080');
      assert.equal(new QueueCore({ apiKey: 'k', region: 'eu-west-1', baseUrl: 'http://h:1/' }).baseURL, 'http://h:1');
      process.env.QUEUECORE_BASE_URL = 'http://env:2';
      assert.equal(new QueueCore({ apiKey: 'k', region: 'us-east-1' }).baseURL, 'http://env:2');
      assert.equal(new QueueCore({ apiKey: 'k', baseUrl: 'http://explicit:3' }).baseURL, 'http://explicit:3');
      assert.throws(() => sdk.resolveBaseURL({ region: 'evil.com/x' }, {}), sdk.QueueCoreError);
    } finally {
      if (saved === undefined) delete process.env.QUEUECORE_BASE_URL;
      else process.env.QUEUECORE_BASE_URL = saved;
    }
  });

  test('bad options are refused', () => {
    assert.throws(() => new QueueCore({ apiKey: 'k', maxRetries: -1 }), sdk.QueueCoreError);
    assert.throws(() => new QueueCore({ apiKey: 'k', timeout: 0 }), sdk.QueueCoreError);
    const pq = new QueueCore({ apiKey: 'k' });
    assert.throws(() => pq.consume('t', {}), /group/);
    assert.throws(() => pq.consume('t', { group: 'g', maxInFlight: 0 }), /maxInFlight/);
    assert.throws(() => pq.consume('t', { group: 'g', transport: 'carrier-pigeon' }), /transport/);
  });

  test('the logger hears about retries', async () => {
    const lines = [];
    const logger = { debug() {}, info: (m) => lines.push(m), warn() {}, error() {} };
    const { client } = fake([reply(503, envelope(503, 'SERVICE_UNAVAILABLE')), reply(200, { data: [], nextCursor: null })], { logger });
    await client.topics.list();
    assert.equal(lines.length, 1);
    assert.match(lines[0], /^Retrying GET \/v1\/topics in \d\.\d\d seconds \(status 503\)$/);
    assert.ok(!lines[0].includes('pq_test_sk_unit'));
  });

  test('withOptions copies the client with changes', async () => {
    const { client, requests } = fake([reply(503, envelope(503, 'SERVICE_UNAVAILABLE'))]);
    const fast = client.withOptions({ maxRetries: 0 });
    assert.equal(fast.maxRetries, 0);
    assert.equal(fast.baseURL, client.baseURL);
    await assert.rejects(fast.topics.list(), sdk.ServiceUnavailableError);
    assert.equal(requests.length, 1);
  });
});

describe('health', () => {
  test('unreachable: status down, no throw, no retry', async () => {
    const { client, requests } = fake([new TypeError('fetch failed')]);
    const health = await client.health();
    assert.equal(health.status, 'down');
    assert.deepEqual(health.checks, {});
    assert.match(health.error, /fetch failed/);
    assert.equal(requests.length, 1);
    assert.equal(requests[0].headers['Authorization'], undefined);
  });

  test('a 503 with a health body is the answer', async () => {
    const body = { status: 'down', checks: { database: 'down', redis: 'ok', logEngine: 'ok' }, version: '1' };
    const { client } = fake([reply(503, body)]);
    assert.deepEqual(await client.health(), body);
  });

  test('an error envelope or garbage is down too', async () => {
    const { client } = fake([reply(500, envelope(500, 'INTERNAL_ERROR')), () => new Response('nope', { status: 200 })]);
    assert.equal((await client.health()).status, 'down');
    assert.equal((await client.health()).status, 'down');
  });
});

describe('the package', () => {
  test('CommonJS exports the same API as ESM', () => {
    const require = createRequire(import.meta.url);
    const cjs = require('../../dist/cjs/index.js');
    const names = (mod) => Object.keys(mod).filter((k) => k !== 'default' && k !== '__esModule').sort();
    assert.deepEqual(names(cjs), names(sdk));
    const pq = new cjs.QueueCore({ apiKey: 'k' });
    assert.equal(typeof pq.topics.create, 'function');
  });

  test('exported names', () => {
    for (const name of [
      'QueueCore', 'QueueCoreError', 'APIError', 'AuthenticationError', 'NotFoundError', 'ConflictError',
      'RateLimitError', 'BadRequestError', 'PayloadTooLargeError', 'ServiceUnavailableError', 'InternalServerError',
      'APIConnectionError', 'APITimeoutError', 'BatchMessage', 'Consumer', 'ConsumedMessage', 'PagedList',
    ]) assert.equal(typeof sdk[name], 'function', name);
    assert.equal(sdk.default, sdk.QueueCore);
  });
});
