/**
 * The QueueCore client. This is the only module that reads the environment.
 *
 *     import { QueueCore } from '@queuecore/sdk';
 *     const pq = new QueueCore({ apiKey: process.env.QUEUECORE_API_KEY, region: 'us-east-1' });
 *     await pq.publish('order.events', { type: 'order.created', orderId: 'ord_92jf8x' });
 */
import {
  APIClient,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT,
  defaultLogger,
  type Fetch,
  type Logger,
} from './core/api-client.js';
import { Consumer, type ConsumeOptions } from './core/consumer.js';
import { QueueCoreError } from './core/error.js';
import { Alerts } from './resources/alerts.js';
import { ConsumerGroups } from './resources/consumer-groups.js';
import { Dlq } from './resources/dlq.js';
import { Messages } from './resources/messages.js';
import { Offsets } from './resources/offsets.js';
import { Schedules } from './resources/schedules.js';
import { Topics } from './resources/topics.js';
import type { BatchResult, Health, PublishParams, PublishResult, RequestOptions } from './types.js';

export const ENV_API_KEY = 'QUEUECORE_API_KEY';
export const ENV_BASE_URL = 'QUEUECORE_BASE_URL';
/** Where the client goes with neither `baseUrl`, `QUEUECORE_BASE_URL` nor `region` (a local server). */
export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';

export interface ClientOptions {
  /** The project environment's key (`pq_live_sk_…` / `pq_test_sk_…`). Default: `QUEUECORE_API_KEY`. */
  apiKey?: string | undefined;
  /**
   * The API's address. Default: `QUEUECORE_BASE_URL`; else, with `region`, `https://<region>.api.queuecore.cloud`;
   * else `http://127.0.0.1:8080`. An explicit `baseUrl` or the variable wins over `region`.
   */
  baseUrl?: string | undefined;
  /** Alias of `baseUrl`, as openai-node spells it. */
  baseURL?: string | undefined;
  /** A region, e.g. `'us-east-1'`: the base URL becomes `https://<region>.api.queuecore.cloud`. */
  region?: string | undefined;
  /** Milliseconds per attempt (default 30,000). */
  timeout?: number | undefined;
  /** Retries of a failed attempt: 429, 502/503/504, connection errors, timeouts (default 2). */
  maxRetries?: number | undefined;
  /** Where retries (`info`) and requests (`debug`) are logged; `console` fits. Default: warnings only. */
  logger?: Logger | undefined;
  /** Your own `fetch` (proxies, instrumentation, tests). Default: the global `fetch`. */
  fetch?: Fetch | undefined;
  /** Extra headers for every request. */
  defaultHeaders?: Record<string, string> | undefined;
}

/** The base URL by the rule every QueueCore SDK follows: explicit, else the variable, else region, else local. */
export function resolveBaseURL(options: Pick<ClientOptions, 'baseUrl' | 'baseURL' | 'region'>, env = readEnv()): string {
  const explicit = options.baseUrl ?? options.baseURL;
  if (explicit) return explicit;
  const fromEnv = env[ENV_BASE_URL]?.trim();
  if (fromEnv) return fromEnv;
  if (options.region !== undefined) {
    const region = options.region.trim();
    if (!/^[a-z0-9]+(?:-[a-z0-9]+)*$/.test(region)) {
      throw new QueueCoreError(`region must look like 'us-east-1', not ${JSON.stringify(options.region)}`);
    }
    return `https://${region}.api.queuecore.cloud`;
  }
  return DEFAULT_BASE_URL;
}

function readEnv(): Record<string, string | undefined> {
  return typeof process !== 'undefined' && process.env ? process.env : {};
}

function resolveApiKey(apiKey: string | undefined): string {
  const key = (apiKey ?? readEnv()[ENV_API_KEY] ?? '').trim();
  if (!key) {
    throw new QueueCoreError(
      `No API key: pass apiKey to the client or set the ${ENV_API_KEY} environment variable (it is empty or unset).`,
    );
  }
  if (/\s/.test(key)) throw new QueueCoreError('The API key contains whitespace: check how it was read.');
  return key;
}

export class QueueCore extends APIClient {
  /** Create, list, describe, update and delete topics. */
  readonly topics: Topics;
  /** Publish, get by id, read a partition. */
  readonly messages: Messages;
  /** List, describe, update and delete consumer groups; reset a stopped group's offsets. */
  readonly consumerGroups: ConsumerGroups;
  /** A group's offsets per partition; seek and reset, also while consuming. */
  readonly offsets: Offsets;
  /** A group's dead-letter queue: inspect, replay, replay all, delete, audit. */
  readonly dlq: Dlq;
  /** The project's alert webhook (DLQ depth alerts): set, get, delete, test, deliveries. */
  readonly alerts: Alerts;
  /** Schedules: a message published to a topic on a cron expression or a fixed period. */
  readonly schedules: Schedules;

  readonly #options: ClientOptions;

  constructor(options: ClientOptions = {}) {
    const fetchImpl = options.fetch ?? (globalThis.fetch as Fetch | undefined);
    if (typeof fetchImpl !== 'function') {
      throw new QueueCoreError('No fetch: run on Node.js 18 or later, or pass fetch to the client.');
    }
    super({
      apiKey: resolveApiKey(options.apiKey),
      baseURL: resolveBaseURL(options),
      timeout: options.timeout ?? DEFAULT_TIMEOUT,
      maxRetries: options.maxRetries ?? DEFAULT_MAX_RETRIES,
      logger: options.logger ?? defaultLogger,
      fetch: options.fetch ?? ((input, init) => fetchImpl(input, init)),
      defaultHeaders: { ...options.defaultHeaders },
    });
    this.#options = { ...options };
    this.topics = new Topics(this);
    this.messages = new Messages(this);
    this.consumerGroups = new ConsumerGroups(this);
    this.offsets = new Offsets(this);
    this.dlq = new Dlq(this);
    this.alerts = new Alerts(this);
    this.schedules = new Schedules(this);
  }

  /** The base URL in use (alias of `baseURL`). */
  get baseUrl(): string {
    return this.baseURL;
  }

  /** Publish one message; resolves once it is durable. Same as `pq.messages.publish`. */
  publish(topic: string, data: unknown, params?: PublishParams, options?: RequestOptions): Promise<PublishResult> {
    return this.messages.publish(topic, data, params, options);
  }

  /** Publish 1–1000 messages atomically. Same as `pq.messages.publishBatch`. */
  publishBatch(topic: string, messages: readonly unknown[], options?: RequestOptions): Promise<BatchResult> {
    return this.messages.publishBatch(topic, messages, options);
  }

  /**
   * A consumer of `topic` in `options.group`: register handlers with `on('message' | 'error' | 'rebalance')`,
   * then `await consumer.start()`; or `for await (const msg of consumer)`.
   */
  consume<T = any>(topic: string, options: ConsumeOptions): Consumer<T> {
    return new Consumer<T>(this, topic, options);
  }

  /**
   * The service's readiness, asked without the key. Never throws for a service that is down or cannot be
   * reached: it answers `{status: 'down', ...}` (with `error` saying why when there was no answer).
   */
  async health(options?: RequestOptions): Promise<Health> {
    try {
      const response = await this.request<unknown>({
        method: 'GET',
        path: '/v1/health',
        authenticated: false,
        acceptStatuses: [503],
        maxRetries: 0,
        ...options,
      });
      const body = response.body;
      if (typeof body === 'object' && body !== null && typeof (body as Health).status === 'string') {
        const health = body as Health;
        return { ...health, checks: health.checks ?? {} };
      }
      return { status: 'down', checks: {}, error: `unexpected answer (HTTP ${response.status})` };
    } catch (error) {
      return { status: 'down', checks: {}, error: error instanceof Error ? error.message : String(error) };
    }
  }

  /** A copy with some options changed (sharing `fetch`, hence Node's connection pool). */
  withOptions(options: ClientOptions): QueueCore {
    const copy = new QueueCore({
      ...this.#options,
      apiKey: this.apiKey,
      baseUrl: this.baseURL,
      timeout: this.timeout,
      maxRetries: this.maxRetries,
      logger: this.logger,
      fetch: this.fetch,
      defaultHeaders: this.defaultHeaders,
      ...options,
    });
    copy.rateLimitState = this.rateLimitState;
    return copy;
  }
}
