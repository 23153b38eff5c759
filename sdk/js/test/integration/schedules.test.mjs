// client.schedules against a real queuecore-server: create, list, get, runs (published by the server's
// runner), pause, resume, delete, and the errors.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';

import * as sdk from '../../dist/esm/index.js';
import { client, unique, eventually } from '../support/helpers.mjs';

let pq;
before(async () => {
  ({ pq } = await client());
});

describe('schedules', () => {
  test('create, get, list, runs with their messages, pause, resume, delete', async () => {
    const topic = unique('sch');
    await pq.topics.create({ name: topic, partitions: 1 });
    const schedule = await pq.schedules.create({ topic, every: '1s', data: { tick: 1 }, headers: { team: 'ops' } });
    assert.match(schedule.id, /^sch_/);
    assert.deepEqual(
      [schedule.topic, schedule.every, schedule.cron, schedule.timezone, schedule.status],
      [topic, '1s', null, 'UTC', 'active'],
    );
    assert.equal(typeof schedule.nextRunAt, 'string');
    assert.deepEqual(await pq.schedules.get(schedule.id), schedule);
    const all = await pq.schedules.list();
    assert.ok(all.some((s) => s.id === schedule.id));
    const seen = [];
    for await (const s of pq.schedules.list({ limit: 1 })) seen.push(s.id);
    assert.deepEqual(seen, all.map((s) => s.id));

    const runs = await eventually(async () => {
      const got = await pq.schedules.runs(schedule.id);
      return got.length >= 2 ? got : null;
    }, 20_000, 'two runs');
    assert.ok(runs[0].at > runs[1].at, 'newest first');
    const message = await pq.messages.get(topic, runs[0].messageId);
    assert.equal(message.headers['queuecore-schedule'], schedule.id);
    assert.equal(message.headers['queuecore-scheduled-at'], runs[0].at);
    assert.deepEqual(message.data, { tick: 1 });

    const paused = await pq.schedules.pause(schedule.id);
    assert.deepEqual([paused.status, paused.nextRunAt], ['paused', null]);
    assert.equal((await pq.schedules.resume(schedule.id)).status, 'active');
    await pq.schedules.delete(schedule.id);
    await assert.rejects(pq.schedules.get(schedule.id), (e) => e instanceof sdk.NotFoundError && e.code === 'NOT_FOUND');
  });

  test('refusals name the field', async () => {
    const topic = unique('sch');
    await pq.topics.create({ name: topic, partitions: 1 });
    const bad = await pq.schedules.create({ topic, cron: '* * *', data: 1 }).catch((e) => e);
    assert.ok(bad instanceof sdk.BadRequestError, String(bad));
    assert.equal(bad.details[0].field, 'cron');
    const both = await pq.schedules.create({ topic, cron: '* * * * *', every: '1m', data: 1 }).catch((e) => e);
    assert.ok(both instanceof sdk.BadRequestError);
    const missing = await pq.schedules.create({ topic: unique('none'), every: '1m', data: 1 }).catch((e) => e);
    assert.ok(missing instanceof sdk.NotFoundError && missing.code === 'TOPIC_NOT_FOUND');
  });
});
