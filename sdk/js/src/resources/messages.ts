import { newIdempotencyKey, seg } from '../core/api-client.js';
import { QueueCoreError } from '../core/error.js';
import { APIResource } from '../core/resource.js';
import { currentTraceContext, withTraceContext } from '../core/tracing.js';
import type {
  BatchResult,
  Message,
  PublishParams,
  PublishResult,
  ReadParams,
  ReadResult,
  RequestOptions,
} from '../types.js';

const BATCH_BRAND = Symbol.for('queuecore.BatchMessage');

/**
 * A batch item with more than data (a key, headers, a partition, an idempotency key, a delay or a TTL). Plain values given to
 * `publishBatch` are each one message's data; wrap a value in `BatchMessage` to say more:
 *
 *     await pq.publishBatch('order.events', [new BatchMessage({ data: order, key: order.orderId })]);
 */
export class BatchMessage {
  readonly data: unknown;
  readonly key: string | undefined;
  readonly headers: Record<string, string> | undefined;
  readonly partition: number | undefined;
  readonly idempotencyKey: string | undefined;
  readonly delay: string | number | undefined;
  readonly deliverAt: string | number | Date | undefined;
  readonly ttl: string | number | undefined;
  readonly expiresAt: string | number | Date | undefined;
  readonly [BATCH_BRAND] = true;

  constructor(init: {
    data: unknown;
    key?: string;
    headers?: Record<string, string>;
    partition?: number;
    idempotencyKey?: string;
    delay?: string | number;
    deliverAt?: string | number | Date;
    ttl?: string | number;
    expiresAt?: string | number | Date;
  }) {
    this.data = init.data;
    this.key = init.key;
    this.headers = init.headers;
    this.partition = init.partition;
    this.idempotencyKey = init.idempotencyKey;
    this.delay = init.delay;
    this.deliverAt = init.deliverAt;
    this.ttl = init.ttl;
    this.expiresAt = init.expiresAt;
  }
}

type Timing = Pick<PublishParams, 'delay' | 'deliverAt' | 'ttl' | 'expiresAt'>;

/** A publish body's `delay` / `deliverAt` / `ttl` / `expiresAt` (the server checks them). */
function setTiming(body: Record<string, unknown>, timing: Timing): void {
  if (timing.delay !== undefined) body['delay'] = timing.delay;
  if (timing.deliverAt !== undefined) body['deliverAt'] = instant(timing.deliverAt);
  if (timing.ttl !== undefined) body['ttl'] = timing.ttl;
  if (timing.expiresAt !== undefined) body['expiresAt'] = instant(timing.expiresAt);
}

function instant(value: string | number | Date): string | number {
  return value instanceof Date ? value.toISOString() : value;
}

function isBatchMessage(value: unknown): value is BatchMessage {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BATCH_BRAND] === true;
}

function batchItem(message: unknown, trace: Record<string, string> | undefined): Record<string, unknown> {
  if (!isBatchMessage(message)) {
    if (trace !== undefined) return { data: message, headers: { ...trace }, idempotencyKey: newIdempotencyKey() };
    return { data: message, idempotencyKey: newIdempotencyKey() };
  }
  const item: Record<string, unknown> = { data: message.data };
  if (message.key !== undefined) item['key'] = message.key;
  const headers = withTraceContext(message.headers, trace);
  if (headers !== undefined) item['headers'] = headers;
  if (message.partition !== undefined) item['partition'] = message.partition;
  setTiming(item, message);
  item['idempotencyKey'] = message.idempotencyKey ?? newIdempotencyKey();
  return item;
}

/** Publishing and reading messages. */
export class Messages extends APIResource {
  /**
   * Publish one message; resolves once it is durable. An idempotency key is made once, before the first
   * attempt, and sent with every retry: a retried publish is written once (`replayed: true` on a replay).
   */
  async publish(
    topic: string,
    data: unknown,
    params: PublishParams = {},
    options?: RequestOptions,
  ): Promise<PublishResult> {
    if (data === undefined) throw new QueueCoreError('publish needs data (null is a valid value; undefined is not)');
    const body: Record<string, unknown> = { data };
    if (params.key !== undefined) body['key'] = params.key;
    if (params.headers !== undefined) body['headers'] = params.headers;
    if (params.partition !== undefined) body['partition'] = params.partition;
    setTiming(body, params);
    const trace = await currentTraceContext(); // the server keeps it as the message's headers
    const response = await this.client.request<PublishResult>({
      method: 'POST',
      path: `/v1/topics/${seg(topic)}/messages`,
      body,
      idempotencyKey: params.idempotencyKey ?? newIdempotencyKey(),
      ...options,
      ...(trace ? { headers: { ...trace, ...options?.headers } } : {}),
    });
    const replayed = (response.headers.get('idempotent-replayed') ?? '').toLowerCase() === 'true';
    return { ...response.body, replayed };
  }

  /**
   * Publish 1–1000 messages atomically: all of them or none. Plain values are each a message's data;
   * `BatchMessage`s carry a key, headers, a partition or an idempotency key. Every item gets an
   * idempotency key (made once, here), so a retried batch appends nothing twice.
   */
  publishBatch(topic: string, messages: readonly unknown[], options?: RequestOptions): Promise<BatchResult> {
    if (!Array.isArray(messages)) {
      throw new QueueCoreError('publishBatch takes an array of messages; to publish one message, use publish()');
    }
    // Each item carries the publisher's trace context (OpenTelemetry), read before the first attempt.
    return currentTraceContext().then((trace) =>
      this.client.requestObject<BatchResult>({
        method: 'POST',
        path: `/v1/topics/${seg(topic)}/messages/batch`,
        body: { messages: messages.map((message) => batchItem(message, trace)) },
        ...options,
      }),
    );
  }

  /** One message by id (`NotFoundError` MESSAGE_NOT_FOUND if there is none). */
  get<T = any>(topic: string, messageId: string, options?: RequestOptions): Promise<Message<T>> {
    return this.client.requestObject<Message<T>>({
      method: 'GET',
      path: `/v1/topics/${seg(topic)}/messages/${seg(messageId)}`,
      ...options,
    });
  }

  /** Read a partition by offset or time, without a consumer group. Follow `nextOffset` to read on. */
  read<T = any>(topic: string, partition: number, params: ReadParams = {}, options?: RequestOptions): Promise<ReadResult<T>> {
    const from = params.fromTimestamp instanceof Date ? params.fromTimestamp.toISOString() : params.fromTimestamp;
    return this.client.requestObject<ReadResult<T>>({
      method: 'GET',
      path: `/v1/topics/${seg(topic)}/partitions/${seg(partition)}/messages`,
      query: { fromOffset: params.fromOffset, fromTimestamp: from, limit: params.limit },
      ...options,
    });
  }
}
