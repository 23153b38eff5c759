// Consumers against a real server: push (WebSocket) and pull (REST), graceful stop, iteration, nack and
// redelivery, dead letters, rebalances, reconnects after a dropped connection, refusals.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

let pq;
let server;
before(async () => {
  ({ pq, server } = await client());
});

async function topicWith(partitions, count = 0) {
  const name = unique('csm');
  await pq.topics.create({ name, partitions });
  if (count) {
    const messages = Array.from({ length: count }, (_, i) => new sdk.BatchMessage({ data: { i }, partition: i % partitions }));
    await pq.publishBatch(name, messages);
  }
  return name;
}

const lagOf = async (topic, group) => (await pq.offsets.get(topic, { group })).reduce((n, p) => n + p.lag, 0);

for (const transport of ['websocket', 'pull', 'sse']) {
  describe(`consuming over ${transport}`, () => {
    test('the docs flow: on(message), start(), ack, stop() confirms the acks', async () => {
      const topic = await topicWith(3);
      const consumer = pq.consume(topic, { group: 'g', startFrom: 'latest', transport });
      const seen = [];
      const errors = [];
      const rebalances = [];
      consumer.on('message', async (msg) => {
        assert.ok(msg instanceof sdk.ConsumedMessage);
        seen.push(msg);
        await msg.ack();
      });
      consumer.on('error', (err) => errors.push(err));
      consumer.on('rebalance', (event) => rebalances.push(event));
      await consumer.start();
      assert.match(consumer.memberId, /^csr_/);
      assert.deepEqual(rebalances[0].assignments.slice().sort(), [0, 1, 2]);
      const published = await pq.publishBatch(topic, [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
      await eventually(() => seen.length >= 4, 20_000, 'four messages');
      await consumer.stop();
      assert.equal(consumer.running, false);
      assert.deepEqual(seen.map((m) => m.id).sort(), published.messages.map((m) => m.id).sort());
      const first = seen[0];
      assert.equal(first.topic, topic);
      assert.equal(first.attempt, 1);
      assert.equal(first.key, null);
      assert.deepEqual(first.headers, {});
      assert.match(first.ackDeadline, /Z$/);
      assert.equal(await lagOf(topic, 'g'), 0, 'every ack was confirmed before stop() resolved');
      assert.deepEqual(errors, []);
      assert.equal((await pq.consumerGroups.describe(topic, 'g')).consumers, 0, 'the member left');
    });

    test('stop(): no handler after it resolves; unhandled messages are not acked and come back', async () => {
      const topic = await topicWith(1, 20);
      const consumer = pq.consume(topic, { group: 'g', startFrom: 'earliest', transport, maxInFlight: 20 });
      const handled = [];
      let release;
      const gate = new Promise((r) => (release = r));
      consumer.on('message', async (msg) => {
        handled.push(msg.offset);
        if (handled.length === 3) await gate; // the third handler is running when stop() is called
        await msg.ack();
      });
      await consumer.start();
      await eventually(() => handled.length === 3, 20_000, 'three handled');
      const stopping = consumer.stop();
      setTimeout(release, 50);
      await stopping;
      const count = handled.length;
      assert.deepEqual(handled, [0, 1, 2]);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(handled.length, count, 'no handler ran after stop() resolved');
      const offset = await pq.offsets.get(topic, { group: 'g', partition: 0 });
      assert.equal(offset.current, 3, 'the three handled were acked, nothing else');

      const again = pq.consume(topic, { group: 'g', transport });
      const next = [];
      again.on('message', async (msg) => {
        next.push(msg.offset);
        await msg.ack();
      });
      await again.start();
      await eventually(() => next.length >= 17, 30_000, 'the rest redelivered');
      await again.stop();
      assert.deepEqual(next.slice(0, 17), Array.from({ length: 17 }, (_, i) => i + 3));
    });

    test('a handler may stop the consumer (no deadlock); its ack, made before, is confirmed', async () => {
      const topic = await topicWith(2, 10);
      const consumer = pq.consume(topic, { group: 'self-stop', startFrom: 'earliest', transport });
      let stopped;
      const seen = [];
      consumer.on('message', async (msg) => {
        seen.push(msg.id);
        await msg.ack();
        if (stopped === undefined) {
          stopped = consumer.stop();
          await stopped;
        }
      });
      await consumer.start();
      await eventually(() => stopped !== undefined, 20_000, 'a handler called stop()');
      await stopped;
      assert.equal(consumer.running, false);
      const current = (await pq.offsets.get(topic, { group: 'self-stop' })).reduce((n, p) => n + p.current, 0);
      assert.ok(current >= 1 && current === seen.length, `committed ${current}, handled ${seen.length}`);
    });

    test('for await over messages; leaving the loop stops the consumer', async () => {
      const topic = await topicWith(2, 6);
      const consumer = pq.consume(topic, { group: 'it', startFrom: 'earliest', transport });
      const got = [];
      for await (const msg of consumer) {
        got.push(msg);
        await msg.ack();
        if (got.length === 6) break;
      }
      assert.equal(consumer.running, false);
      for (const p of [0, 1]) {
        const offsets = got.filter((m) => m.partition === p).map((m) => m.offset);
        assert.deepEqual(offsets, [0, 1, 2], `partition ${p} in order`);
      }
      assert.equal(await lagOf(topic, 'it'), 0);
    });

    test('nack redelivers (attempt 2); a throwing handler nacks; extend is accepted', async () => {
      const topic = await topicWith(1, 2);
      const consumer = pq.consume(topic, { group: 'n', startFrom: 'earliest', transport });
      const attempts = [];
      const errors = [];
      consumer.on('error', (e) => errors.push(e));
      consumer.on('message', async (msg) => {
        attempts.push([msg.offset, msg.attempt]);
        if (msg.attempt === 1 && msg.offset === 0) return msg.nack('try again');
        if (msg.attempt === 1 && msg.offset === 1) throw new Error('handler failed');
        await msg.extend(60);
        await msg.ack();
      });
      await consumer.start();
      await eventually(() => attempts.filter(([, a]) => a === 2).length === 2, 30_000, 'two redeliveries');
      await consumer.stop();
      assert.ok(errors.some((e) => e.message === 'handler failed'));
      assert.ok(!errors.some((e) => e instanceof sdk.AckError), errors.map(String).join('; '));
      assert.equal(await lagOf(topic, 'n'), 0);
    });
  });
}

describe('dead letters', () => {
  test('deadLetter config, a poison message dead-lettered, inspect, replay, replayAll, audit, delete', async () => {
    const topic = await topicWith(1);
    const group = 'dlq';
    const consumer = pq.consume(topic, { group, startFrom: 'latest', deadLetter: { maxRetries: 1, retryDelay: '0s', alertThreshold: 100 } });
    const deliveries = [];
    consumer.on('error', () => {});
    consumer.on('message', async (msg) => {
      deliveries.push([msg.id, msg.attempt]);
      if (msg.data.poison) throw new Error('cannot process this order');
      await msg.ack();
    });
    await consumer.start();
    assert.equal((await pq.consumerGroups.describe(topic, group)).config.deadLetter.maxRetries, 1);
    const poison = await pq.publish(topic, { poison: true });
    const poison2 = await pq.publish(topic, { poison: true });
    await eventually(async () => (await pq.dlq.inspect(topic, { group })).total === 2, 30_000, 'two dead letters');
    await consumer.stop();

    const page = await pq.dlq.inspect(topic, { group, limit: 10 });
    assert.deepEqual(page.data.map((d) => d.messageId), [poison.id, poison2.id]);
    assert.equal(page.data[0].retryCount, 1);
    assert.match(page.data[0].reason, /cannot process this order/);
    assert.deepEqual(page.data[0].data, { poison: true });

    const replayed = await pq.dlq.replay(topic, group, { messageId: poison.id });
    assert.deepEqual(replayed, { messageId: poison.id, replayed: true });
    await pq.dlq.delete(topic, group, { messageId: poison2.id });
    assert.equal((await pq.dlq.inspect(topic, { group })).total, 0);
    assert.deepEqual(await pq.dlq.replayAll(topic, group), { replayed: 0 });
    const audit = await pq.dlq.audit(topic, group);
    assert.deepEqual(audit.data.map((e) => e.action).sort(), ['delete', 'replay', 'replay_all']);
    assert.equal(audit.data[0].actor.type, 'key');

    // The replayed message comes back to the group under its id, attempt 1.
    const again = pq.consume(topic, { group });
    const back = [];
    again.on('message', async (msg) => {
      back.push(msg);
      await msg.ack();
    });
    await again.start();
    await eventually(() => back.length >= 1, 30_000, 'the replay');
    await again.stop();
    assert.equal(back[0].id, poison.id);
    assert.equal(back[0].attempt, 1);
  });
});

describe('membership', () => {
  for (const transport of ['websocket', 'pull', 'sse']) test(`a second member triggers a rebalance event; partitions are split (${transport})`, async () => {
    const topic = await topicWith(4);
    const a = pq.consume(topic, { group: 'rb', transport });
    const b = pq.consume(topic, { group: 'rb', transport });
    const events = [];
    a.on('rebalance', (e) => events.push(e));
    await a.start();
    assert.equal(a.assignments.length, 4);
    await b.start();
    await eventually(() => a.assignments.length + b.assignments.length === 4 && a.assignments.length === 2, 20_000, 'a split');
    assert.ok(events.length >= 2);
    assert.ok(events.at(-1).generationId > events[0].generationId);
    await b.stop();
    await eventually(() => a.assignments.length === 4, 20_000, 'a gets all back');
    await a.stop();
  });

  test('no WebSocket client in the runtime: a websocket consumer falls back to REST pull by itself', async () => {
    const topic = await topicWith(1, 3);
    const lines = [];
    const logger = { debug() {}, info() {}, warn: (m) => lines.push(m), error() {} };
    const noWebSocket = Object.assign(
      async () => {
        throw new sdk.WebSocketUnavailableError('No WebSocket client: none in this runtime');
      },
      { auth: 'header' },
    );
    const local = new sdk.QueueCore({ apiKey: server.key, baseUrl: server.url, logger });
    const consumer = local.consume(topic, { group: 'fallback', startFrom: 'earliest', webSocket: noWebSocket });
    const got = [];
    consumer.on('message', async (msg) => {
      got.push(msg.offset);
      await msg.ack();
    });
    await consumer.start();
    assert.equal(consumer.activeTransport, 'pull');
    await eventually(() => got.length === 3, 20_000, 'three messages over pull');
    await consumer.stop();
    assert.deepEqual(got, [0, 1, 2]);
    assert.ok(lines.some((l) => /over REST pull instead/.test(l)));
    assert.equal(await lagOf(topic, 'fallback'), 0);
  });

  test('refusals retrying cannot fix end start(): missing topic, bad key', async () => {
    for (const transport of ['websocket', 'pull', 'sse']) {
      const consumer = pq.consume(unique('nope'), { group: 'g', transport });
      const errors = [];
      consumer.on('error', (e) => errors.push(e));
      await assert.rejects(consumer.start(), (e) => e instanceof sdk.NotFoundError && e.code === 'TOPIC_NOT_FOUND');
      assert.equal(consumer.running, false);
      const bad = new sdk.QueueCore({ apiKey: 'pq_test_sk_00000000000000000000000000000000', baseUrl: server.url });
      await assert.rejects(bad.consume('x', { group: 'g', transport }).on('error', () => {}).start(), sdk.AuthenticationError);
    }
  });

  for (const transport of ['websocket', 'sse']) test(`a dropped connection: the consumer reconnects, rejoins and goes on by itself (${transport})`, async () => {
    const topic = await topicWith(1);
    const upstream = new URL(server.url);
    const sockets = new Set();
    const proxy = net.createServer((conn) => {
      const up = net.connect(Number(upstream.port), upstream.hostname);
      sockets.add(conn);
      sockets.add(up);
      conn.pipe(up).pipe(conn);
      const drop = () => {
        conn.destroy();
        up.destroy();
      };
      conn.on('error', drop);
      up.on('error', drop);
      conn.on('close', drop);
      up.on('close', drop);
    });
    await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
    const via = new sdk.QueueCore({ apiKey: server.key, baseUrl: `http://127.0.0.1:${proxy.address().port}` });
    const consumer = via.consume(topic, { group: 're', transport });
    const seen = [];
    const errors = [];
    const joins = [];
    consumer.on('message', async (msg) => {
      seen.push(msg.data.n);
      await msg.ack();
    });
    consumer.on('error', (e) => errors.push(e));
    consumer.on('rebalance', (e) => joins.push(e.memberId));
    await consumer.start();
    await pq.publish(topic, { n: 1 });
    await eventually(() => seen.includes(1), 20_000, 'first message');
    for (const s of sockets) s.destroy(); // the network drops every connection
    await eventually(() => errors.length > 0, 20_000, 'the loss reported');
    assert.ok(errors[0] instanceof sdk.APIConnectionError);
    await eventually(() => joins.length >= 2 && consumer.memberId !== null, 20_000, 'rejoined');
    await pq.publish(topic, { n: 2 });
    await eventually(() => seen.includes(2), 20_000, 'a message after the reconnect');
    await consumer.stop();
    proxy.close();
    assert.notEqual(joins[0], joins.at(-1));
  });
});

describe('pause, nack to the DLQ, dead-letter history', () => {
  for (const transport of ['websocket', 'pull']) {
    test(`${transport}: nack({deadLetter: true}) moves a message at once, with every failed attempt`, async () => {
      const topic = await topicWith(1);
      const group = `dl-${transport}`;
      const consumer = pq.consume(topic, { group, startFrom: 'latest', transport, deadLetter: { maxRetries: 5, retryDelay: '0s' } });
      const attempts = [];
      consumer.on('message', async (msg) => {
        attempts.push(msg.attempt);
        if (msg.attempt === 1) await msg.nack('flaky');
        else await msg.nack('poison', { deadLetter: true });
      });
      await consumer.start();
      const sent = await pq.publish(topic, { n: 1 });
      await eventually(async () => (await pq.dlq.inspect(topic, { group })).total === 1, 30_000, 'the dead letter');
      await consumer.stop();
      const [entry] = (await pq.dlq.inspect(topic, { group })).data;
      assert.equal(entry.messageId, sent.id);
      assert.equal(entry.retryCount, 1);
      assert.deepEqual(entry.attempts.map((a) => a.reason), ['flaky', 'poison']);
      assert.equal(entry.firstFailedAt, entry.attempts[0].at);
      assert.deepEqual(attempts, [1, 2]);
    });
  }

  test('consumerGroups.pause holds deliveries until resume; the breaker config round-trips', async () => {
    const topic = await topicWith(1);
    const group = 'paused';
    const made = await pq.consumerGroups.update(topic, group, { deadLetter: { breaker: { minAttempts: 20 } } });
    assert.deepEqual(made.config.deadLetter.breaker, { failureRate: 0.5, minAttempts: 20, window: '60s' });
    const off = await pq.consumerGroups.update(topic, group, { deadLetter: { breaker: null } });
    assert.equal(off.config.deadLetter.breaker, null);
    const until = new Date(Date.now() + 3_600_000);
    const paused = await pq.consumerGroups.pause(topic, group, { until });
    assert.equal(paused.paused, true);
    assert.equal(new Date(paused.until).getTime(), until.getTime());
    assert.equal((await pq.consumerGroups.describe(topic, group)).pausedReason, 'user');
    const seen = [];
    const consumer = pq.consume(topic, { group, startFrom: 'earliest' });
    consumer.on('message', async (msg) => {
      seen.push(msg.data.n);
      await msg.ack();
    });
    await consumer.start();
    await pq.publish(topic, { n: 1 });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.deepEqual(seen, []); // paused: nothing delivered
    assert.deepEqual(await pq.consumerGroups.resume(topic, group), { paused: false });
    await eventually(() => seen.length === 1, 20_000, 'delivered after resume');
    await consumer.stop();
    const described = await pq.consumerGroups.describe(topic, group);
    assert.equal(described.paused, false);
    assert.equal(described.pausedUntil, null);
  });
});
