// Type-checked from CommonJS: require() resolves the package's "require" condition and its .d.ts.
import sdk = require('@queuecore/sdk');

const pq = new sdk.QueueCore({ apiKey: 'pq_test_sk_x' });
const pending: Promise<sdk.PublishResult> = pq.publish('order.events', { a: 1 });
const err: sdk.QueueCoreError = new sdk.NotFoundError('x', { status: 404 });
void pending;
void err;
