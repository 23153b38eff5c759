// Trace context through messages with OpenTelemetry (an optional peer dependency): publishing injects the
// active span's W3C context, consumers run handlers in `process <topic>` spans of each message's context.
// Spans are read from the OpenTelemetry SDK's in-memory exporter; consuming runs against the real server.
import { test, describe, before, beforeEach } from 'node:test';
import assert from 'node:assert/strict';

import { context, trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = trace.getTracer('test');

const traceparentOf = (span) => {
  const c = span.spanContext();
  return `00-${c.traceId}-${c.spanId}-${c.traceFlags.toString(16).padStart(2, '0')}`;
};

/** A client over a fake fetch that records each request and answers a publish. */
function recording() {
  const requests = [];
  const pq = new sdk.QueueCore({
    apiKey: 'pq_test_sk_unit',
    baseUrl: 'http://queuecore.test',
    fetch: async (url, init) => {
      const body = JSON.parse(init.body);
      requests.push({ url: String(url), headers: { ...init.headers }, body });
      const one = { id: 'msg_1', offset: 0, partition: 0, timestamp: '2026-01-01T00:00:00.000Z' };
      const answer = body.messages
        ? { count: body.messages.length, latency: 1, durability: 'fsync', messages: body.messages.map(() => one) }
        : { ...one, latency: 1, durability: 'fsync' };
      return new Response(JSON.stringify(answer), { status: 201, headers: { 'content-type': 'application/json' } });
    },
  });
  return { pq, requests };
}

describe('publishing injects the active context', () => {
  test('a single publish sends it as request headers', async () => {
    const { pq, requests } = recording();
    const traceparent = await tracer.startActiveSpan('checkout', async (span) => {
      await pq.publish('orders', { n: 1 });
      span.end();
      return traceparentOf(span);
    });
    assert.equal(requests[0].headers['traceparent'], traceparent);
    assert.equal(requests[0].body.headers, undefined); // the server keeps it with the message
  });

  test('no active span, no header', async () => {
    const { pq, requests } = recording();
    await pq.publish('orders', 1);
    assert.equal(requests[0].headers['traceparent'], undefined);
  });

  test("a batch carries it in each item's headers unless the item has its own", async () => {
    const { pq, requests } = recording();
    const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const traceparent = await tracer.startActiveSpan('checkout', async (span) => {
      await pq.publishBatch('orders', [
        1,
        new sdk.BatchMessage({ data: 2, headers: { tenant: 'a' } }),
        new sdk.BatchMessage({ data: 3, headers: { traceparent: own } }),
      ]);
      span.end();
      return traceparentOf(span);
    });
    const items = requests[0].body.messages;
    assert.deepEqual(items[0].headers, { traceparent });
    assert.deepEqual(items[1].headers, { tenant: 'a', traceparent });
    assert.deepEqual(items[2].headers, { traceparent: own });
  });
});

describe('consumers run handlers in process spans', () => {
  let pq;
  before(async () => {
    ({ pq } = await client());
  });
  beforeEach(() => exporter.reset());

  for (const transport of ['websocket', 'pull']) {
    test(`over ${transport}: parented and linked to the message's creation context`, async () => {
      const topic = unique('trc');
      await pq.topics.create({ name: topic, partitions: 2 });
      let created;
      const published = await tracer.startActiveSpan('checkout', async (span) => {
        const result = await pq.publish(topic, { n: 1 }, { partition: 1 });
        span.end();
        created = span.spanContext();
        return result;
      });
      const consumer = pq.consume(topic, { group: unique('g'), startFrom: 'earliest', transport });
      const inside = [];
      consumer.on('message', async (msg) => {
        inside.push(trace.getActiveSpan()?.spanContext());
        await msg.ack();
      });
      await consumer.start();
      await eventually(() => inside.length >= 1, 20_000, 'the message');
      await consumer.stop();

      const [process] = exporter.getFinishedSpans().filter((s) => s.name === `process ${topic}`);
      assert.ok(process, 'a process span');
      assert.equal(process.kind, SpanKind.CONSUMER);
      assert.equal(process.spanContext().traceId, created.traceId);
      assert.equal(process.parentSpanContext?.spanId, created.spanId);
      assert.deepEqual(
        process.links.map((l) => [l.context.traceId, l.context.spanId]),
        [[created.traceId, created.spanId]],
      );
      assert.deepEqual(process.attributes, {
        'messaging.system': 'queuecore',
        'messaging.destination.name': topic,
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.consumer.group.name': consumer.group,
        'messaging.message.id': published.id,
        'messaging.destination.partition.id': '1',
      });
      assert.equal(inside[0].spanId, process.spanContext().spanId); // the handler ran inside it
    });
  }

  test('a failing handler marks its span; a message without context starts a new trace', async () => {
    const topic = unique('trc');
    await pq.topics.create({ name: topic, partitions: 1 });
    await pq.publish(topic, 1);
    const consumer = pq.consume(topic, { group: unique('g'), startFrom: 'earliest', transport: 'pull' });
    const errors = [];
    consumer.on('message', () => {
      throw new Error('boom');
    });
    consumer.on('error', (err) => errors.push(err));
    await consumer.start();
    await eventually(() => errors.length >= 1, 20_000, 'the failure');
    await consumer.stop();
    const [process] = exporter.getFinishedSpans().filter((s) => s.name === `process ${topic}`);
    assert.equal(process.status.code, SpanStatusCode.ERROR);
    assert.equal(process.parentSpanContext, undefined);
    assert.deepEqual(process.links, []);
  });
});
