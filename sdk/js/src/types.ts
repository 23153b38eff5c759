/**
 * The shapes of the API's answers and of the calls' parameters. Answers are the API's JSON as it is
 * (camelCase fields, timestamps as ISO-8601 UTC strings with milliseconds, e.g. `2026-03-28T10:42:18.003Z`).
 */
import type { RateLimit } from './core/error.js';

/** Any JSON value: what a message's `data` may be. */
export type JSONValue = string | number | boolean | null | JSONValue[] | { [key: string]: JSONValue };

export type Delivery = 'exactly-once' | 'at-least-once';
export type StartFrom = 'earliest' | 'latest';
export type Transport = 'websocket' | 'pull';
/** How many copies of each message a topic's engine keeps. */
export type Replicas = 1 | 3 | 5;

export interface Topic {
  id: string;
  name: string;
  partitions: number;
  retention: string;
  delivery: Delivery;
  /** Copies of each message the engine keeps: 1, 3 or 5, fixed at creation. */
  replicas: Replicas;
  status: string;
  createdAt: string;
}

export interface PartitionDetail {
  id: number;
  earliestOffset: number;
  latestOffset: number;
  messages: number;
  bytes: number;
}

export interface TopicDetail extends Topic {
  partitionDetails: PartitionDetail[];
}

export interface TopicCreateParams {
  /** 1–249 chars of `a-z 0-9 . _ -`; dot notation for namespaces. */
  name: string;
  /** `<n>m`, `<n>h` or `<n>d`, from `1m` to `365d`. Default `7d`. */
  retention?: string;
  /** Default `exactly-once`. */
  delivery?: Delivery;
  /** 1 to 256; default 3; can be increased later. */
  partitions?: number;
  /**
   * Copies of each message the engine keeps: 1, 3 or 5, fixed at creation. Default 3 on the replicated
   * JetStream engine, 1 on the local engine (which refuses more with a `BadRequestError`).
   */
  replicas?: Replicas;
}

export interface TopicUpdateParams {
  /** Increase only. */
  partitions?: number;
  retention?: string;
}

export interface ListParams {
  /** Page size. */
  limit?: number;
  /** Start after this cursor (a `nextCursor` of an earlier page). */
  cursor?: string;
}

export interface Page<T> {
  data: T[];
  nextCursor: string | null;
}

export interface PublishParams {
  /** Messages with the same key land on the same partition, in order. */
  key?: string;
  headers?: Record<string, string>;
  /** An explicit partition (else a hash of `key`, else spread evenly). */
  partition?: number;
  /** Your own key, to make a publish idempotent across processes too (24 h window per topic). */
  idempotencyKey?: string;
  /** Deliver to consumer groups this much later: `'90s'` (`<n>ms|s|m|h|d`) or seconds; at most 30 days. */
  delay?: string | number;
  /** Or deliver from this time on: a `Date`, ISO-8601 or epoch ms (a past time means now). Not with `delay`. */
  deliverAt?: string | number | Date;
  /** Never deliver it once this long has passed since the publish (a DLQ gets it with reason `expired`). */
  ttl?: string | number;
  /** Or never deliver it from this time on. Not with `ttl`. */
  expiresAt?: string | number | Date;
}

export interface PublishResult {
  id: string;
  offset: number;
  partition: number;
  timestamp: string;
  /** When consumer groups receive it (`null`: at once, not delayed). */
  deliverAt: string | null;
  /** When it expires undelivered (`null`: never). */
  expiresAt: string | null;
  /** Server-side milliseconds. */
  latency: number;
  /** `fsync` or `replicated:<n>`: on what terms the message is durable. */
  durability: string;
  /** True when the idempotency key had been seen: nothing was appended, this is the original result. */
  replayed: boolean;
}

/** A batch item with more than data: give `publishBatch` these (or plain values, each one a message's data). */
export interface BatchMessage {
  data: unknown;
  key?: string;
  headers?: Record<string, string>;
  partition?: number;
  idempotencyKey?: string;
  /** Deliver to consumer groups this much later: `'90s'` (`<n>ms|s|m|h|d`) or seconds; at most 30 days. */
  delay?: string | number;
  /** Or deliver from this time on: a `Date`, ISO-8601 or epoch ms (a past time means now). Not with `delay`. */
  deliverAt?: string | number | Date;
  /** Never deliver it once this long has passed since the publish (a DLQ gets it with reason `expired`). */
  ttl?: string | number;
  /** Or never deliver it from this time on. Not with `ttl`. */
  expiresAt?: string | number | Date;
}

export interface BatchMessageResult {
  id: string;
  offset: number;
  partition: number;
  timestamp: string;
  /** When consumer groups receive it (`null`: at once, not delayed). */
  deliverAt: string | null;
  /** When it expires undelivered (`null`: never). */
  expiresAt: string | null;
  /** True for an item whose idempotency key had been seen. */
  replayed?: boolean;
}

export interface BatchResult {
  count: number;
  latency: number;
  durability?: string;
  messages: BatchMessageResult[];
}

/** A message as stored. */
export interface Message<T = any> {
  id: string;
  topic: string;
  partition: number;
  offset: number;
  key: string | null;
  headers: Record<string, string>;
  data: T;
  timestamp: string;
  /** When consumer groups receive it (`null`: at once, not delayed). */
  deliverAt: string | null;
  /** When it expires undelivered (`null`: never). */
  expiresAt: string | null;
}

export interface ReadParams {
  fromOffset?: number;
  /** ISO-8601, epoch milliseconds or a `Date`. */
  fromTimestamp?: string | number | Date;
  /** 1–1000, default 100. */
  limit?: number;
}

export interface ReadResult<T = any> {
  data: Message<T>[];
  nextOffset: number;
  earliestOffset: number;
}

export interface DeadLetterConfig {
  /** Retries before a message is dead-lettered; default 5. */
  maxRetries?: number;
  /** Base of the exponential retry delay (`"30s"`, `"500ms"`); default `"30s"`. */
  retryDelay?: string;
  /** DLQ depth at which the alert webhook fires; default 100. */
  alertThreshold?: number;
}

export interface GroupConfig {
  ackTimeout: string;
  sessionTimeout: string;
  deadLetter: Required<DeadLetterConfig> | null;
}

export interface GroupUpdateParams {
  ackTimeout?: string;
  sessionTimeout?: string;
  /** `null` removes the group's DLQ. */
  deadLetter?: DeadLetterConfig | null;
}

export interface ConsumerGroupSummary {
  name: string;
  consumers: number;
  lag: number;
}

export interface GroupPartition {
  id: number;
  consumer: string | null;
  offset: number;
  lag: number;
}

export interface ConsumerGroup {
  name: string;
  topic: string;
  consumers: number;
  partitions: GroupPartition[];
  config: GroupConfig;
  /** Messages whose TTL passed before the group delivered them, since its creation. */
  expired: number;
}

export interface PartitionPosition {
  partition: number;
  current: number;
}

export interface Offset {
  current: number;
  latest: number;
  lag: number;
}

export interface PartitionOffset extends Offset {
  partition: number;
}

export interface SeekResult {
  partition: number;
  offset: number;
}

export interface DeadLetterMessage<T = any> {
  messageId: string;
  data: T;
  key: string | null;
  headers: Record<string, string>;
  partition: number;
  offset: number;
  /** The last failure: a nack's reason, or `"ack timeout"`. */
  reason: string;
  retryCount: number;
  failedAt: string;
}

export interface DeadLetterPage<T = any> {
  data: DeadLetterMessage<T>[];
  /** How many messages the DLQ holds. */
  total: number;
  nextCursor?: string | null;
}

export interface ReplayResult {
  messageId: string;
  replayed: boolean;
}

export interface ReplayAllResult {
  replayed: number;
}

export interface AuditEntry {
  id: string;
  action: 'replay' | 'replay_all' | 'delete';
  messageId?: string | null;
  count?: number | null;
  actor: { type: 'key' | 'user'; id: string };
  at: string;
}

export interface AuditPage {
  data: AuditEntry[];
  nextCursor?: string | null;
}

export type HealthStatus = 'ok' | 'degraded' | 'down';

export interface Health {
  status: HealthStatus;
  /** Per dependency (`database`, `redis`, `logEngine`): `ok`, `degraded`, `down` or `embedded`. */
  checks: Record<string, string>;
  version?: string;
  /** Set when the service could not be reached (then `status` is `down`). */
  error?: string;
}

export interface AlertEndpoint {
  url: string;
  /** The signing secret's last four characters. */
  secretHint: string;
  state: 'closed' | 'open' | 'half-open';
  createdAt: string;
  updatedAt: string;
  /** Only in the answer that generated it: keep it, it is never shown again. */
  secret?: string | null;
}

export interface AlertTestEvent {
  eventId: string;
}

export interface AlertDelivery {
  id: string;
  eventId: string;
  eventType: string;
  attempt: number;
  ok: boolean;
  statusCode?: number | null;
  error?: string | null;
  durationMs: number;
  at: string;
}

export interface AlertDeliveryPage {
  data: AlertDelivery[];
  nextCursor?: string | null;
}

/** What `consumer.on('rebalance', ...)` receives: the member's partitions after a (re)join or rebalance. */
export interface RebalanceEvent {
  memberId: string | null;
  generationId: number;
  assignments: number[];
}

/** Per-call options, the last argument of every call. */
export interface RequestOptions {
  /** Milliseconds per attempt; overrides the client's `timeout`. */
  timeout?: number;
  /** Overrides the client's `maxRetries` for this call. */
  maxRetries?: number;
  /** Abort the call (no retry after an abort). */
  signal?: AbortSignal;
  headers?: Record<string, string>;
  /**
   * Called with the call's final HTTP answer (after retries; also when the call then throws an API error):
   * the counterpart of Python's `with_raw_response` and Go's `option.WithResponseInto`.
   */
  onResponse?: (response: RawResponse) => void;
}

/** The HTTP answer of one call, as `RequestOptions.onResponse` gets it. */
export interface RawResponse {
  status: number;
  headers: Headers;
  /** The answer's `X-Request-Id`. */
  requestId: string | undefined;
  /** The key's rate-limit state the answer reported (`undefined` on routes without a limit). */
  rateLimit: RateLimit | undefined;
}
