/**
 * The shapes of the API's answers and of the calls' parameters. Answers are the API's JSON as it is
 * (camelCase fields, timestamps as ISO-8601 UTC strings with milliseconds, e.g. `2026-03-28T10:42:18.003Z`).
 */
import type { RateLimit } from './core/error.js';

/** Any JSON value: what a message's `data` may be. */
export type JSONValue = string | number | boolean | null | JSONValue[] | { [key: string]: JSONValue };

export type Delivery = 'exactly-once' | 'at-least-once';
export type StartFrom = 'earliest' | 'latest';
export type Transport = 'websocket' | 'pull' | 'sse';
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

/** One copy of a partition. */
export interface Replica {
  /** The server holding it. */
  server: string;
  /** Whether this copy takes the partition's writes. */
  leader: boolean;
  /** Whether it has everything the leader acknowledged. */
  current: boolean;
  /**
   * The availability zone of its server (a NATS server's `az:<zone>` tag; on a single-node server, the
   * zone it is configured with); `null` when not known. Absent from servers older than zones.
   */
  zone?: string | null;
  /**
   * Operations it has yet to apply to catch up with the leader (0 for the leader and a caught-up copy);
   * `null` when the leader cannot reach it. Absent from servers older than zones.
   */
  lag?: number | null;
}

export interface PartitionDetail {
  id: number;
  earliestOffset: number;
  latestOffset: number;
  messages: number;
  bytes: number;
  /** Where the partition's copies live (server and zone), the leader first (one on a single-node server). */
  replicas: Replica[];
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
  /** The DLQ breaker (on by default with its defaults); `null` turns it off. */
  breaker?: BreakerConfig | null;
}

/**
 * The DLQ breaker: when, within `window`, at least `minAttempts` deliveries ended and more than
 * `failureRate` of them failed, the group pauses itself (`pausedReason: 'dlq-breaker'`) and the alert
 * endpoint gets a `dlq.breaker_tripped` event.
 */
export interface BreakerConfig {
  /** 0 to below 1; default 0.5. */
  failureRate?: number;
  /** 1 to 1,000,000; default 100. */
  minAttempts?: number;
  /** `"1s"` to `"1d"`; default `"60s"`. */
  window?: string;
}

export interface GroupConfig {
  ackTimeout: string;
  sessionTimeout: string;
  deadLetter: (Required<Omit<DeadLetterConfig, 'breaker'>> & { breaker: Required<BreakerConfig> | null }) | null;
  /** Unacked messages across all members of the group; `null`: no limit. */
  maxInFlight: number | null;
  /** Messages per second delivered to the group; `null`: no limit. */
  rate: number | null;
  /** Only messages matching it are delivered (docs/consuming.md, "Filters"); `null`: all of them. */
  filter: string | null;
  /** `null` unless the group POSTs its messages to a URL. */
  push?: PushConfig | null;
}

export interface GroupUpdateParams {
  ackTimeout?: string;
  sessionTimeout?: string;
  /** `null` removes the group's DLQ. */
  deadLetter?: DeadLetterConfig | null;
  /** Unacked messages across all members of the group, 1–100,000; `null` removes the limit. */
  maxInFlight?: number | null;
  /** Messages per second delivered to the group (> 0); `null` removes the limit. */
  rate?: number | null;
  /** E.g. `'headers.type = "order" AND hasPrefix(key, "eu-")'`; `null` removes it. */
  filter?: string | null;
  /** POST every message to a URL (`url` required the first time); `null` turns push off. */
  push?: PushParams | null;
}

/** Where a changed filter starts to decide, in one partition. */
export interface FilterStart {
  partition: number;
  offset: number;
}

/** A push group's settings, as given to `consumerGroups.update`; unset fields keep the server's value. */
export interface PushParams {
  /** Where each message is POSTed (`https://` in production). */
  url?: string;
  /** POSTs in flight at once per API process; default 16. */
  maxConcurrency?: number;
  /** Messages per second; `null`: no limit (the default). */
  rate?: number | null;
  /** Per POST, `"100ms"` to `"5m"`; default `"10s"`. */
  timeout?: string;
  /** One delivery in flight per partition, in offset order; default false. */
  ordered?: boolean;
  /** CloudEvents binary (default) or structured mode. */
  mode?: 'binary' | 'structured';
}

/** A push group's `config.push`. */
export interface PushConfig {
  url: string;
  maxConcurrency: number;
  rate: number | null;
  timeout: string;
  ordered: boolean;
  mode: 'binary' | 'structured';
  /** Masked (`whsec_…abcd`), except in the answer of the update that first set `push`: keep it. */
  secret: string;
  /** The endpoint's circuit breaker, as the delivery workers last wrote it. */
  breaker: 'closed' | 'open';
}

/** One POST of a message to a push group's URL. */
export interface PushAttempt {
  messageId: string;
  attempt: number;
  at: string;
  /** The HTTP status; `null` when no answer came (timeout, connection error). */
  status: number | null;
  latencyMs: number;
  error: string | null;
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
  /**
   * Only in the answer of an `update` that changed the filter: per partition, the offset from which the new
   * filter decides (messages before it were delivered, or passed over, under the old one); else `null`.
   */
  filterAppliesFrom?: FilterStart[] | null;
  /** No member receives messages while paused. */
  paused: boolean;
  /** When the pause ends by itself; `null` until resumed. */
  pausedUntil: string | null;
  pausedReason: 'user' | 'dlq-breaker' | null;
  /** Messages whose TTL passed before the group delivered them, since its creation. */
  expired: number;
}

/** The answer to `consumerGroups.pause` and `resume`. */
export interface GroupPause {
  paused: boolean;
  until?: string | null;
}

/** One failed delivery attempt of a dead letter: a nack (its reason), an ack timeout, expiry. */
export interface FailedAttempt {
  at: string;
  reason: string;
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
  /** When its first failed attempt failed. */
  firstFailedAt: string;
  /** Every failed attempt, oldest first (the last one is `reason` at `failedAt`). */
  attempts: FailedAttempt[];
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

/** A schedule: a message published to `topic` at every due time of `cron` or `every`. */
export interface Schedule {
  /** `sch_…` */
  id: string;
  topic: string;
  /** Five-field cron, evaluated in `timezone`; `null` for an `every` schedule. */
  cron: string | null;
  /** A period `<n>ms|s|m|h|d`; `null` for a `cron` schedule. */
  every: string | null;
  /** An IANA time zone name (default `UTC`). */
  timezone: string;
  status: 'active' | 'paused';
  /** The next due time; `null` while paused. */
  nextRunAt: string | null;
  createdAt: string;
  /** What every run publishes. */
  data: unknown;
  key: string | null;
  headers: Record<string, string>;
}

export interface ScheduleCreateParams {
  /** A topic of the key's environment. */
  topic: string;
  /** Five fields: minute hour day-of-month month day-of-week. Exactly one of `cron` and `every`. */
  cron?: string;
  /** A period `<n>ms|s|m|h|d` of at least `1s`, counted from creation. Exactly one of `cron` and `every`. */
  every?: string;
  /** An IANA time zone name for `cron`; default `UTC`. */
  timezone?: string;
  /** The message every run publishes: any JSON value (`null` included). */
  data: unknown;
  key?: string;
  /** Every run adds `queuecore-schedule` and `queuecore-scheduled-at`. */
  headers?: Record<string, string>;
}

/** One run of a schedule: its due time and the message it published. */
export interface ScheduleRun {
  /** The run's due time. */
  at: string;
  messageId: string;
  partition: number;
  offset: number;
}
