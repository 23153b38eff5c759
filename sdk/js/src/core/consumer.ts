/**
 * Consumers: `pq.consume(topic, {group})` joins a consumer group and runs handlers on its messages, batching
 * acks, riding out rebalances, restarts and dropped connections. Two transports: WebSocket push (the default:
 * the connection is the membership) and REST pull (`transport: 'pull'`: long polls, heartbeats, explicit join
 * and leave; for environments without WebSocket).
 *
 * Life cycle: `start()` resolves once the member has joined (the consumer then runs in the background);
 * `stop()` takes no new messages, lets running handlers finish, sends the pending acks, waits for the server
 * to confirm them, and leaves the group. Messages received but not handled are not acked: the server
 * redelivers them once the member has left. Each partition's messages reach the handlers in offset order,
 * one at a time; partitions run concurrently.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

import type { APIClient } from './api-client.js';
import { seg } from './api-client.js';
import {
  AckError,
  APIConnectionError,
  APIError,
  InternalServerError,
  QueueCoreError,
  RateLimitError,
  ServiceUnavailableError,
} from './error.js';
import { defaultOpener, SocketOpenError, WebSocketUnavailableError, type OpenSocket, type Socket } from './websocket.js';
import type { DeadLetterConfig, Message, RebalanceEvent, StartFrom, Transport } from '../types.js';

export interface ConsumeOptions {
  /** The consumer group; its members split the topic's partitions. */
  group: string;
  /** Where a group with no committed offset starts: `'latest'` (default) or `'earliest'`. */
  startFrom?: StartFrom;
  /** Set as the group's dead-letter queue before joining. */
  deadLetter?: DeadLetterConfig;
  /** Messages delivered and not yet settled, at most (websocket: 1–10,000; pull: 1–1000 per poll). Default 100. */
  maxInFlight?: number;
  /** `'websocket'` (push, the default) or `'pull'` (REST long polls). */
  transport?: Transport;
  /** How to open WebSockets (default: the global `WebSocket` where the runtime has one, else the `ws` package). */
  webSocket?: OpenSocket;
}

export type MessageHandler<T = any> = (message: ConsumedMessage<T>) => unknown;
export type ErrorHandler = (error: Error) => unknown;
export type RebalanceHandler = (event: RebalanceEvent) => unknown;

export interface ConsumerEvents<T = any> {
  message: MessageHandler<T>;
  error: ErrorHandler;
  rebalance: RebalanceHandler;
}

interface Settler {
  ack(id: string): void;
  nack(id: string, reason: string | undefined, delay: string | number | undefined): void;
  extend(id: string, seconds: number): void;
}

const ACK_LINGER = 5; // ms acks wait for company before they go out as one frame
const ACK_BATCH = 500;
const PULL_FLUSH_INTERVAL = 100;
const POLL_WAIT_SECONDS = 5;
const STOP_FLUSH_TIMEOUT = 5_000;
const MAX_BACKOFF = 5_000;
const OPEN_TIMEOUT = 10_000;
const RETRY_STATUSES = new Set([408, 425, 429, 500, 502, 503, 504]);
const REJOIN_CODES = new Set(['MEMBER_NOT_FOUND', 'STALE_GENERATION']);

/** A message delivered to a consumer: settle it with `ack()`, `nack(reason)` or `extend(seconds)`. */
export class ConsumedMessage<T = any> implements Message<T> {
  readonly id: string;
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly key: string | null;
  readonly headers: Record<string, string>;
  readonly data: T;
  readonly timestamp: string;
  /** 1 on first delivery, +1 on every redelivery. */
  readonly attempt: number;
  /** Unacked by then, the message is redelivered (`extend` moves it). */
  readonly ackDeadline: string;
  #settler: Settler;
  #settled = false;

  constructor(wire: Record<string, any>, settler: Settler) {
    this.id = wire['id'];
    this.topic = wire['topic'];
    this.partition = wire['partition'];
    this.offset = wire['offset'];
    this.key = wire['key'] ?? null;
    this.headers = wire['headers'] ?? {};
    this.data = wire['data'];
    this.timestamp = wire['timestamp'];
    this.attempt = wire['attempt'];
    this.ackDeadline = wire['ackDeadline'];
    this.#settler = settler;
  }

  /**
   * Mark the message processed; it is not delivered to this group again. Acks are sent in batches within
   * milliseconds; the promise resolves once this one is queued, and `consumer.stop()` waits until the server
   * has confirmed every ack (a refused one, e.g. `ACK_EXPIRED`, is reported on `'error'` as an `AckError`).
   */
  async ack(): Promise<void> {
    if (this.#settled) return;
    this.#settled = true;
    this.#settler.ack(this.id);
  }

  /**
   * Give the message back for redelivery (after `delay`: `'30s'` or seconds), or to the dead-letter queue
   * once its retries are spent.
   */
  async nack(reason?: string, options: { delay?: string | number } = {}): Promise<void> {
    if (this.#settled) return;
    this.#settled = true;
    this.#settler.nack(this.id, reason, options.delay);
  }

  /** Move the ack deadline to `seconds` from now (1 to 43200). */
  async extend(seconds: number): Promise<void> {
    if (this.#settled) return;
    this.#settler.extend(this.id, seconds);
  }

  /** The message's fields as the API sent them. */
  toJSON(): Message<T> & { attempt: number; ackDeadline: string } {
    const { id, topic, partition, offset, key, headers, data, timestamp, attempt, ackDeadline } = this;
    return { id, topic, partition, offset, key, headers, data, timestamp, attempt, ackDeadline };
  }
}

type Nack = { id: string; reason: string | undefined; delay: string | number | undefined };

/** Acks, nacks and extends waiting to be sent. */
class Pending {
  acks: string[] = [];
  nacks: Nack[] = [];
  extends: Array<{ id: string; seconds: number }> = [];
  take() {
    const taken = { acks: this.acks, nacks: this.nacks, extends: this.extends };
    this.acks = [];
    this.nacks = [];
    this.extends = [];
    return taken;
  }
  get size(): number {
    return this.acks.length + this.nacks.length + this.extends.length;
  }
}

function retryable(error: unknown): boolean {
  return (
    error instanceof APIConnectionError ||
    error instanceof SocketOpenError ||
    error instanceof InternalServerError ||
    error instanceof ServiceUnavailableError ||
    error instanceof RateLimitError ||
    (error instanceof APIError && error.status !== undefined && RETRY_STATUSES.has(error.status))
  );
}

function backoff(failures: number, floorMs = 0): number {
  return Math.max(floorMs, Math.min(MAX_BACKOFF, 100 * 2 ** failures) * (0.5 + Math.random() / 2));
}

function durationSeconds(value: unknown, fallback: number): number {
  const match = typeof value === 'string' ? /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(value.trim()) : null;
  if (!match) return fallback;
  const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
  return Number(match[1]) * (units[match[2] as string] ?? 1);
}

/** A settled promise plus its resolvers. */
function deferred<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

class StopSignal {
  stopped = false;
  private waiters: Array<() => void> = [];
  private fired = deferred<'stopped'>();
  /** Resolves when the consumer is told to stop. */
  readonly promise: Promise<'stopped'> = this.fired.promise;
  fire(): void {
    this.stopped = true;
    this.fired.resolve('stopped');
    for (const wake of this.waiters.splice(0)) wake();
  }
  /** Sleep `ms`, or less if the consumer stops meanwhile. */
  sleep(ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const waiters = this.waiters;
      function done() {
        clearTimeout(timer);
        const index = waiters.indexOf(done);
        if (index >= 0) waiters.splice(index, 1);
        resolve();
      }
      waiters.push(done);
    });
  }
}

const handlerContext = new AsyncLocalStorage<{ consumer: Consumer<any>; partition: number }>();

/**
 * A member of a consumer group. Build it with `pq.consume(topic, {group, ...})`.
 *
 *     const consumer = pq.consume('order.events', { group: 'order-processing' });
 *     consumer.on('message', async (msg) => { await handle(msg.data); await msg.ack(); });
 *     consumer.on('error', (err) => console.error(err));
 *     await consumer.start();   // joined; runs until consumer.stop()
 *
 * Or iterate: `for await (const msg of consumer) { ...; await msg.ack(); }` (leaving the loop stops it).
 */
export class Consumer<T = any> implements AsyncIterable<ConsumedMessage<T>> {
  readonly topic: string;
  readonly group: string;
  readonly startFrom: StartFrom;
  readonly deadLetter: DeadLetterConfig | undefined;
  readonly maxInFlight: number;
  readonly transport: Transport;

  #client: APIClient;
  #open: OpenSocket;
  #handlers: { message: MessageHandler<T>[]; error: ErrorHandler[]; rebalance: RebalanceHandler[] } = {
    message: [],
    error: [],
    rebalance: [],
  };
  #pending = new Pending();
  #flushTimer: ReturnType<typeof setTimeout> | undefined;
  #flushNow: (() => void) | undefined;
  #stop = new StopSignal();
  #running = false;
  #run: Promise<void> | undefined;
  #joined = deferred<void>();
  #memberId: string | null = null;
  #generation = 0;
  #assignments: number[] = [];
  #accepting = true;
  // per partition: messages waiting, and the handler chain running them
  #queues = new Map<number, ConsumedMessage<T>[]>();
  #workers = new Map<number, Promise<void>>();
  #unanswered = 0;
  #answered: Array<() => void> = [];
  #pollAbort: AbortController | undefined;
  #releaseIteration: (() => void) | undefined;
  #fatal: unknown;
  /** True once a WebSocket consumer found no WebSocket client and went on over REST pull. */
  #pullFallback = false;
  /** Partitions whose running handler called stop(): stop() cannot wait for them (it would wait for itself). */
  #stopCallers = new Set<number>();

  constructor(client: APIClient, topic: string, options: ConsumeOptions) {
    if (!options || typeof options.group !== 'string' || options.group === '') {
      throw new QueueCoreError('consume() needs a group: pq.consume(topic, { group: "my-group" })');
    }
    const transport = options.transport ?? 'websocket';
    if (transport !== 'websocket' && transport !== 'pull') {
      throw new QueueCoreError(`unknown transport ${JSON.stringify(transport)}: 'websocket' or 'pull'`);
    }
    const limit = transport === 'websocket' ? 10_000 : 1000;
    const maxInFlight = options.maxInFlight ?? 100;
    if (!Number.isInteger(maxInFlight) || maxInFlight < 1 || maxInFlight > limit) {
      throw new QueueCoreError(`maxInFlight must be an integer from 1 to ${limit}`);
    }
    const startFrom = options.startFrom ?? 'latest';
    if (startFrom !== 'earliest' && startFrom !== 'latest') {
      throw new QueueCoreError(`startFrom must be 'earliest' or 'latest'`);
    }
    this.#client = client;
    this.topic = topic;
    this.group = options.group;
    this.startFrom = startFrom;
    this.deadLetter = options.deadLetter;
    this.maxInFlight = maxInFlight;
    this.transport = transport;
    this.#open = options.webSocket ?? defaultOpener();
    this.#joined.promise.catch(() => {}); // start() reports it; never an unhandled rejection
  }

  /** The member id while joined (`csr_…`), else `null`. */
  get memberId(): string | null {
    return this.#memberId;
  }

  /** The partitions this member holds now. */
  get assignments(): readonly number[] {
    return this.#assignments;
  }

  /** The transport in use: `'pull'` also when a `'websocket'` consumer found no WebSocket client. */
  get activeTransport(): Transport {
    return this.#pullFallback ? 'pull' : this.transport;
  }

  /** Whether the consumer is running (between `start()` and the end of `stop()`). */
  get running(): boolean {
    return this.#running;
  }

  /**
   * Register a handler: `'message'` gets each `ConsumedMessage` (sync or async; throw to nack it),
   * `'error'` each error the consumer survives or ends with, `'rebalance'` the member's partitions after each
   * join and rebalance.
   */
  on<E extends keyof ConsumerEvents<T>>(event: E, handler: ConsumerEvents<T>[E]): this {
    const list = this.#handlers[event] as unknown[] | undefined;
    if (!list) throw new QueueCoreError(`unknown event ${JSON.stringify(event)}: 'message', 'error' or 'rebalance'`);
    list.push(handler);
    return this;
  }

  /** Remove a handler registered with `on`. */
  off<E extends keyof ConsumerEvents<T>>(event: E, handler: ConsumerEvents<T>[E]): this {
    const list = this.#handlers[event] as unknown[] | undefined;
    const index = list ? list.indexOf(handler) : -1;
    if (list && index >= 0) list.splice(index, 1);
    return this;
  }

  /**
   * Join the group and start consuming in the background. Resolves once joined; rejects with the typed
   * error when the service refuses in a way retrying cannot fix (a bad key, a missing topic). Connection
   * trouble is retried with backoff (reported on `'error'`) until it joins or `stop()` is called.
   */
  async start(): Promise<void> {
    if (this.#running) throw new QueueCoreError('the consumer is already running');
    this.#running = true;
    this.#stop = new StopSignal();
    this.#joined = deferred<void>();
    this.#joined.promise.catch(() => {});
    this.#accepting = true;
    this.#fatal = undefined;
    this.#stopCallers.clear();
    this.#run = this.#main().finally(() => {
      this.#running = false;
    });
    await this.#joined.promise;
  }

  /**
   * Stop gracefully: no new messages, running handlers finish, pending acks are sent and confirmed, and the
   * member leaves the group. Messages received but not yet handled are left unacked: the server redelivers
   * them. No handler runs after the returned promise resolves (but the one calling `stop()`, if any).
   */
  async stop(): Promise<void> {
    const caller = handlerContext.getStore();
    if (caller && caller.consumer === this) this.#stopCallers.add(caller.partition); // a handler stops us
    this.#stop.fire();
    this.#releaseIteration?.();
    this.#pollAbort?.abort();
    this.#joined.resolve(); // a start() still waiting returns: stopped before it joined
    const run = this.#run;
    if (run) await run;
  }

  // -- events ----------------------------------------------------------------------------------------------

  async #emitError(error: unknown): Promise<void> {
    const err = error instanceof Error ? error : new QueueCoreError(String(error));
    if (this.#handlers.error.length === 0) {
      this.#client.logger.warn(`consumer ${this.topic}/${this.group}: ${err.toString()}`);
      return;
    }
    for (const handler of [...this.#handlers.error]) {
      try {
        await handler(err);
      } catch (failure) {
        this.#client.logger.error(`the consumer's error handler failed: ${String(failure)}`);
      }
    }
  }

  #emitRebalance(): void {
    const event: RebalanceEvent = {
      memberId: this.#memberId,
      generationId: this.#generation,
      assignments: [...this.#assignments],
    };
    for (const handler of [...this.#handlers.rebalance]) {
      try {
        const result = handler(event);
        if (result instanceof Promise) result.catch((err: unknown) => void this.#emitError(err));
      } catch (err) {
        void this.#emitError(err);
      }
    }
  }

  // -- settling --------------------------------------------------------------------------------------------

  #settler: Settler = {
    ack: (id) => {
      this.#pending.acks.push(id);
      this.#scheduleFlush(this.transport === 'websocket' && !this.#pullFallback ? ACK_LINGER : PULL_FLUSH_INTERVAL);
    },
    nack: (id, reason, delay) => {
      this.#pending.nacks.push({ id, reason, delay });
      this.#scheduleFlush(0);
    },
    extend: (id, seconds) => {
      this.#pending.extends.push({ id, seconds });
      this.#scheduleFlush(0);
    },
  };

  #scheduleFlush(ms: number): void {
    if (!this.#flushNow) return; // not connected: sent on the next connection
    if (this.#flushTimer !== undefined) {
      if (ms > 0) return;
      clearTimeout(this.#flushTimer);
    }
    const flush = this.#flushNow;
    this.#flushTimer = setTimeout(() => {
      this.#flushTimer = undefined;
      flush();
    }, ms);
  }

  #cancelFlush(): void {
    if (this.#flushTimer !== undefined) clearTimeout(this.#flushTimer);
    this.#flushTimer = undefined;
    this.#flushNow = undefined;
  }

  #reportFailed(failed: unknown, action: 'ack' | 'nack' | 'extend' = 'ack'): void {
    if (!Array.isArray(failed)) return;
    for (const item of failed) {
      if (item && typeof item === 'object') {
        const { id, code } = item as { id?: unknown; code?: unknown };
        void this.#emitError(new AckError(String(id), String(code), action));
      }
    }
  }

  // -- handling --------------------------------------------------------------------------------------------

  #deliver(wire: Record<string, any>): void {
    if (!this.#accepting || this.#stop.stopped) return;
    const message = new ConsumedMessage<T>(wire, this.#settler);
    const queue = this.#queues.get(message.partition);
    if (queue) {
      queue.push(message);
      return;
    }
    this.#queues.set(message.partition, [message]);
    const worker = this.#work(message.partition).finally(() => {
      this.#workers.delete(message.partition);
    });
    this.#workers.set(message.partition, worker);
  }

  /** One partition's messages, in offset order, one at a time. */
  async #work(partition: number): Promise<void> {
    try {
      for (;;) {
        const queue = this.#queues.get(partition);
        const message = queue?.shift();
        if (!message || !this.#accepting || this.#stop.stopped) return;
        await this.#handle(message);
      }
    } finally {
      this.#queues.delete(partition);
    }
  }

  async #handle(message: ConsumedMessage<T>): Promise<void> {
    await handlerContext.run({ consumer: this, partition: message.partition }, async () => {
      for (const handler of [...this.#handlers.message]) {
        try {
          await handler(message);
        } catch (error) {
          const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
          await message.nack(text.slice(0, 1024));
          await this.#emitError(error);
          return;
        }
      }
    });
  }

  /** Stop taking messages; drop those not started; wait for running handlers (but the caller's own). */
  async #drain(): Promise<void> {
    this.#accepting = false;
    for (const queue of this.#queues.values()) queue.length = 0;
    const waits = [...this.#workers.entries()]
      .filter(([partition]) => !this.#stopCallers.has(partition))
      .map(([, worker]) => worker);
    await Promise.allSettled(waits);
  }

  // -- the engine ------------------------------------------------------------------------------------------

  async #main(): Promise<void> {
    try {
      if (this.deadLetter !== undefined) {
        await this.#withRetries(() =>
          this.#client.request({
            method: 'PUT',
            path: this.#path(''),
            body: { deadLetter: this.deadLetter },
          }),
        );
      }
      if (this.transport === 'websocket' && !this.#pullFallback) {
        try {
          await this.#runPush();
        } catch (error) {
          if (!(error instanceof WebSocketUnavailableError) || this.#stop.stopped) throw error;
          // No WebSocket client in this runtime: the same consumer over REST long polls.
          this.#client.logger.warn(`${error.message}; consuming ${this.topic}/${this.group} over REST pull instead`);
          this.#pullFallback = true;
          await this.#runPull();
        }
      } else await this.#runPull();
    } catch (error) {
      if (!this.#stop.stopped) {
        this.#fatal = error;
        await this.#emitError(error);
      }
      this.#joined.reject(error);
    } finally {
      this.#cancelFlush();
      this.#memberId = null;
      this.#generation = 0;
      this.#assignments = [];
    }
  }

  #path(tail: string): string {
    return `/v1/topics/${seg(this.topic)}/groups/${seg(this.group)}${tail}`;
  }

  async #withRetries<R>(call: () => Promise<R>): Promise<R> {
    for (let failures = 1; ; failures++) {
      try {
        return await call();
      } catch (error) {
        if (!retryable(error) || this.#stop.stopped) throw error;
        await this.#emitError(error);
        await this.#stop.sleep(backoff(failures));
        if (this.#stop.stopped) throw error;
      }
    }
  }

  // -- push (WebSocket) --------------------------------------------------------------------------------------

  async #wsURL(): Promise<string> {
    const base = new URL(this.#client.baseURL);
    const scheme = base.protocol === 'https:' ? 'wss:' : 'ws:';
    const path = `${base.pathname.replace(/\/+$/, '')}/v1/topics/${seg(this.topic)}/consume`;
    const query = new URLSearchParams({
      group: this.group,
      startFrom: this.startFrom,
      maxInFlight: String(this.maxInFlight),
    });
    if (this.#open.auth === 'token') {
      const answer = await this.#client.requestObject<{ token: string }>({
        method: 'POST',
        path: '/v1/tokens/websocket',
        body: { topic: this.topic, group: this.group },
      });
      query.set('token', answer.token);
    }
    return `${scheme}//${base.host}${path}?${query.toString()}`;
  }

  async #runPush(): Promise<void> {
    let failures = 0;
    while (!this.#stop.stopped) {
      let socket: Socket | undefined;
      try {
        const url = await this.#wsURL();
        const headers: Record<string, string> = { 'User-Agent': 'queuecore-node' };
        if (this.#open.auth === 'header') headers['Authorization'] = `Bearer ${this.#client.apiKey}`;
        const session = new PushSession();
        socket = await this.#open(url, headers, session, OPEN_TIMEOUT);
        session.socket = socket;
        failures = 0;
        await this.#pushSession(session);
      } catch (error) {
        if (this.#stop.stopped) return;
        if (!retryable(error)) throw error;
        failures += 1;
        const wrapped =
          error instanceof SocketOpenError
            ? new APIConnectionError(`WebSocket connection failed: ${error.message}`, { cause: error })
            : error;
        await this.#emitError(wrapped);
        const floor = error instanceof RateLimitError ? (error.retryAfter ?? 0) * 1000 : 0;
        await this.#stop.sleep(backoff(failures, floor));
      } finally {
        socket?.close();
        this.#cancelFlush();
        await this.#drainAfterLoss();
      }
    }
  }

  /** A connection ended without stop(): handlers running finish (their acks wait for the next connection). */
  async #drainAfterLoss(): Promise<void> {
    if (this.#stop.stopped) return;
    for (const queue of this.#queues.values()) queue.length = 0;
    await Promise.allSettled([...this.#workers.values()]);
    this.#memberId = null;
    this.#generation = 0;
    this.#accepting = true;
  }

  async #pushSession(session: PushSession): Promise<void> {
    const welcome = await session.welcome;
    if (welcome['type'] === 'error') {
      const error = (welcome['error'] ?? {}) as Record<string, unknown>;
      throw new APIError(String(error['message'] ?? 'refused'), {
        status: typeof error['status'] === 'number' ? error['status'] : undefined,
        code: typeof error['code'] === 'string' ? error['code'] : undefined,
        requestId: typeof error['requestId'] === 'string' ? error['requestId'] : undefined,
        body: welcome,
      });
    }
    this.#memberId = typeof welcome['memberId'] === 'string' ? welcome['memberId'] : null;
    this.#generation = Number(welcome['generationId'] ?? 0);
    this.#assignments = Array.isArray(welcome['assignments']) ? (welcome['assignments'] as number[]) : [];
    this.#unanswered = 0;
    this.#accepting = true;
    this.#client.logger.debug(`joined ${this.topic}/${this.group} as ${this.#memberId} over WebSocket`);
    this.#flushNow = () => this.#flushPush(session);
    this.#emitRebalance();
    this.#joined.resolve();
    session.onFrame = (frame) => this.#onFrame(frame);
    if (this.#pending.size > 0) this.#scheduleFlush(0);
    const ended = await Promise.race([session.ended, this.#stop.promise]);
    if (ended === 'stopped') {
      await this.#finishPush(session);
      return;
    }
    throw new APIConnectionError(`WebSocket connection lost (${ended})`);
  }

  #onFrame(frame: Record<string, any>): void {
    switch (frame['type']) {
      case 'message':
        this.#deliver(frame);
        break;
      case 'messages':
        for (const item of (frame['messages'] as Record<string, any>[] | undefined) ?? []) this.#deliver(item);
        break;
      case 'acked':
        this.#unanswered = Math.max(0, this.#unanswered - 1);
        for (const wake of this.#answered.splice(0)) wake();
        this.#reportFailed(frame['failed']);
        break;
      case 'rebalance':
        this.#generation = Number(frame['generationId'] ?? this.#generation);
        if (Array.isArray(frame['assignments'])) this.#assignments = frame['assignments'] as number[];
        this.#emitRebalance();
        break;
      case 'error': {
        const error = (frame['error'] ?? {}) as Record<string, unknown>;
        void this.#emitError(
          new APIError(String(error['message'] ?? 'error'), {
            status: typeof error['status'] === 'number' ? error['status'] : undefined,
            code: typeof error['code'] === 'string' ? error['code'] : undefined,
            requestId: typeof error['requestId'] === 'string' ? error['requestId'] : undefined,
            body: frame,
          }),
        );
        break;
      }
      default:
        break;
    }
  }

  #flushPush(session: PushSession): void {
    const socket = session.socket;
    if (!socket || session.closed) return;
    const { acks, nacks, extends: extensions } = this.#pending.take();
    const sent: string[] = [];
    try {
      // Extends first: an extend sent after the message's ack would only fail (ACK_EXPIRED).
      for (const extension of extensions) {
        socket.send(JSON.stringify({ type: 'extend', id: extension.id, seconds: extension.seconds }));
        this.#unanswered += 1;
      }
      for (let start = 0; start < acks.length; start += ACK_BATCH) {
        const ids = acks.slice(start, start + ACK_BATCH);
        socket.send(JSON.stringify({ type: 'ack', ids }));
        sent.push(...ids);
        this.#unanswered += 1;
      }
      for (const nack of nacks) {
        const frame: Record<string, unknown> = { type: 'nack', id: nack.id };
        if (nack.reason !== undefined) frame['reason'] = nack.reason;
        if (nack.delay !== undefined) frame['delay'] = nack.delay;
        socket.send(JSON.stringify(frame));
        this.#unanswered += 1;
      }
    } catch {
      // Not sent: keep the acks for the next connection (where they may fail as ACK_EXPIRED: the server
      // redelivers what this member held once it left).
      const sentSet = new Set(sent);
      this.#pending.acks.push(...acks.filter((id) => !sentSet.has(id)));
    }
  }

  /** Graceful stop: no new messages, running handlers finish, acks flushed and answered, close, leave. */
  async #finishPush(session: PushSession): Promise<void> {
    await this.#drain();
    if (this.#flushTimer !== undefined) clearTimeout(this.#flushTimer);
    this.#flushTimer = undefined;
    this.#flushPush(session);
    const deadline = Date.now() + STOP_FLUSH_TIMEOUT;
    while (this.#unanswered > 0 && !session.closed && Date.now() < deadline) {
      await Promise.race([
        new Promise<void>((resolve) => this.#answered.push(resolve)),
        session.ended,
        new Promise<void>((resolve) => setTimeout(resolve, Math.max(1, deadline - Date.now())).unref?.()),
      ]);
    }
    if (this.#unanswered > 0) {
      await this.#emitError(new APIConnectionError(`stop(): ${this.#unanswered} settle frame(s) not confirmed`));
    }
    session.socket?.close(1000);
    await Promise.race([session.socket?.closed(), new Promise((resolve) => setTimeout(resolve, 2000).unref?.())]);
    // The server removes the member when it sees the close; leaving explicitly too makes stop() resolve only
    // once the group knows (a second leave is a harmless 404).
    if (this.#memberId !== null) {
      try {
        await this.#client.request({ method: 'DELETE', path: this.#path(`/members/${seg(this.#memberId)}`), maxRetries: 0 });
      } catch {
        /* already gone */
      }
    }
  }

  // -- pull (REST) --------------------------------------------------------------------------------------------

  #sessionSeconds = 10;

  async #join(): Promise<void> {
    const body: Record<string, unknown> = { startFrom: this.startFrom };
    if (this.#memberId !== null) body['memberId'] = this.#memberId;
    const joined = await this.#client.requestObject<{
      memberId: string;
      generationId: number;
      assignments: number[];
      sessionTimeout: string;
    }>({ method: 'POST', path: this.#path('/members'), body });
    this.#memberId = joined.memberId;
    this.#generation = joined.generationId;
    this.#assignments = joined.assignments ?? [];
    this.#sessionSeconds = durationSeconds(joined.sessionTimeout, 10);
    this.#client.logger.debug(`joined ${this.topic}/${this.group} as ${joined.memberId} (generation ${joined.generationId})`);
    this.#emitRebalance();
  }

  #member(): { memberId: string | null; generationId: number } {
    return { memberId: this.#memberId, generationId: this.#generation };
  }

  #rejoinOn(error: unknown): boolean {
    if (error instanceof APIError && error.code !== undefined && REJOIN_CODES.has(error.code)) {
      if (error.code === 'MEMBER_NOT_FOUND') this.#memberId = null;
      this.#generation = 0;
      return true;
    }
    return false;
  }

  async #runPull(): Promise<void> {
    let flushing: Promise<void> = Promise.resolve();
    this.#flushNow = () => {
      flushing = flushing.then(() => this.#flushPull());
    };
    const heartbeat = setInterval(() => void this.#heartbeat(), Math.max(500, (this.#sessionSeconds * 1000) / 3));
    heartbeat.unref?.();
    let failures = 0;
    try {
      while (!this.#stop.stopped) {
        try {
          if (this.#memberId === null || this.#generation === 0) {
            await this.#join();
            this.#joined.resolve();
          }
          const messages = await this.#poll();
          failures = 0;
          if (messages.length > 0) {
            for (const wire of messages) this.#deliver(wire);
            // Until they are handled, or stop() (which may come from a handler: not waited for here).
            await Promise.race([Promise.allSettled([...this.#workers.values()]), this.#stop.promise]);
          }
        } catch (error) {
          if (this.#stop.stopped) break;
          if (this.#rejoinOn(error)) continue;
          if (!retryable(error)) throw error;
          failures += 1;
          await this.#emitError(error);
          await this.#stop.sleep(backoff(failures));
        }
      }
    } finally {
      clearInterval(heartbeat);
      await this.#drain();
      this.#flushNow = undefined;
      if (this.#flushTimer !== undefined) clearTimeout(this.#flushTimer);
      this.#flushTimer = undefined;
      await flushing;
      await this.#flushPull();
      await this.#leave();
    }
  }

  async #poll(): Promise<Record<string, any>[]> {
    this.#pollAbort = new AbortController();
    try {
      const answer = await this.#client.requestObject<{ messages?: Record<string, any>[] }>({
        method: 'POST',
        path: this.#path('/poll'),
        body: { ...this.#member(), maxMessages: this.maxInFlight, waitSeconds: POLL_WAIT_SECONDS },
        timeout: Math.max(this.#client.timeout, POLL_WAIT_SECONDS * 1000 + 10_000),
        signal: this.#pollAbort.signal,
      });
      return answer.messages ?? [];
    } finally {
      this.#pollAbort = undefined;
    }
  }

  async #heartbeat(): Promise<void> {
    if (this.#memberId === null || this.#generation === 0 || this.#stop.stopped) return;
    try {
      const beat = await this.#client.requestObject<{ generationId: number; shouldRejoin: boolean; assignments: number[] }>({
        method: 'POST',
        path: this.#path(`/members/${seg(this.#memberId)}/heartbeat`),
        body: { generationId: this.#generation },
        maxRetries: 0,
      });
      if (beat.shouldRejoin) this.#generation = 0;
      else if (Array.isArray(beat.assignments) && beat.assignments.join() !== this.#assignments.join()) {
        this.#assignments = beat.assignments;
        this.#generation = beat.generationId ?? this.#generation;
        this.#emitRebalance();
      }
    } catch (error) {
      if (!this.#rejoinOn(error)) this.#client.logger.debug(`heartbeat failed: ${String(error)}`);
    }
  }

  async #flushPull(): Promise<void> {
    const { acks, nacks, extends: extensions } = this.#pending.take();
    const member = this.#member();
    const retry = (fn: () => void) => (error: unknown) => {
      if (retryable(error) && !this.#stop.stopped) fn();
      else void this.#emitError(error);
    };
    for (const extension of extensions) {
      try {
        const answer = await this.#client.requestObject<{ failed?: unknown }>({
          method: 'POST',
          path: this.#path('/extend'),
          body: { ...member, ids: [extension.id], seconds: extension.seconds },
        });
        this.#reportFailed(answer.failed, 'extend');
      } catch (error) {
        retry(() => this.#pending.extends.push(extension))(error);
      }
    }
    for (let start = 0; start < acks.length; start += 1000) {
      const ids = acks.slice(start, start + 1000);
      try {
        const answer = await this.#client.requestObject<{ failed?: unknown }>({
          method: 'POST',
          path: this.#path('/ack'),
          body: { ...member, ids },
        });
        this.#reportFailed(answer.failed);
      } catch (error) {
        retry(() => this.#pending.acks.push(...ids))(error);
      }
    }
    for (const nack of nacks) {
      const body: Record<string, unknown> = { ...member, id: nack.id };
      if (nack.reason !== undefined) body['reason'] = nack.reason;
      if (nack.delay !== undefined) body['delay'] = nack.delay;
      try {
        const answer = await this.#client.requestObject<{ failed?: unknown }>({ method: 'POST', path: this.#path('/nack'), body });
        this.#reportFailed(answer.failed, 'nack');
      } catch (error) {
        retry(() => this.#pending.nacks.push(nack))(error);
      }
    }
  }

  async #leave(): Promise<void> {
    const member = this.#memberId;
    this.#memberId = null;
    this.#generation = 0;
    if (member === null) return;
    try {
      await this.#client.request({ method: 'DELETE', path: this.#path(`/members/${seg(member)}`), maxRetries: 0 });
    } catch (error) {
      this.#client.logger.debug(`leaving the group failed: ${String(error)}`); // the session timeout removes it
    }
  }

  // -- iteration ---------------------------------------------------------------------------------------------

  /**
   * `for await (const msg of consumer)`: starts the consumer if needed and yields its messages (each
   * partition's in order); leaving the loop (`break`, `return`, a throw) stops the consumer.
   */
  [Symbol.asyncIterator](): AsyncIterator<ConsumedMessage<T>> {
    const waiting: Array<{ message: ConsumedMessage<T>; handled: () => void }> = [];
    const takers: Array<(result: IteratorResult<ConsumedMessage<T>>) => void> = [];
    let current: (() => void) | undefined;
    let finished = false;
    let failure: unknown;

    const releaseAll = () => {
      current?.();
      current = undefined;
      for (const item of waiting.splice(0)) item.handled();
    };
    const finish = () => {
      if (finished) return;
      finished = true;
      releaseAll();
      for (const take of takers.splice(0)) take({ value: undefined, done: true });
    };

    const handOver: MessageHandler<T> = (message) =>
      new Promise<void>((handled) => {
        if (finished) return handled();
        const take = takers.shift();
        if (take) {
          current = handled;
          take({ value: message, done: false });
        } else waiting.push({ message, handled });
      });
    const onError: ErrorHandler = () => {
      if (!this.#running) finish();
    };

    this.on('message', handOver);
    this.on('error', onError);
    this.#releaseIteration = finish;
    const started = this.#running ? Promise.resolve() : this.start();
    const runEnded = started.then(() => this.#run);
    runEnded.then(
      () => {
        if (this.#fatal !== undefined) failure = this.#fatal;
        finish();
      },
      (error: unknown) => {
        failure = error;
        finish();
      },
    );

    const cleanup = async () => {
      finish();
      this.off('message', handOver);
      this.off('error', onError);
      await this.stop();
    };

    return {
      next: async () => {
        current?.(); // the loop body is done with the previous message
        current = undefined;
        if (failure !== undefined) {
          const error = failure;
          failure = undefined;
          await cleanup();
          throw error;
        }
        if (finished) return { value: undefined, done: true };
        const item = waiting.shift();
        if (item) {
          current = item.handled;
          return { value: item.message, done: false };
        }
        const result = await new Promise<IteratorResult<ConsumedMessage<T>>>((resolve) => takers.push(resolve));
        if (result.done && failure !== undefined) {
          const error = failure;
          failure = undefined;
          await cleanup();
          throw error;
        }
        return result;
      },
      return: async () => {
        await cleanup();
        return { value: undefined, done: true };
      },
    };
  }
}

class PushSession {
  socket: Socket | undefined;
  closed = false;
  #onFrame: ((frame: Record<string, any>) => void) | undefined;
  #early: Record<string, any>[] = [];
  readonly welcome: Promise<Record<string, any>>;
  readonly ended: Promise<string>;
  #welcome = deferred<Record<string, any>>();
  #ended = deferred<string>();
  #gotWelcome = false;
  #timer: ReturnType<typeof setTimeout>;

  constructor() {
    this.welcome = this.#welcome.promise;
    this.ended = this.#ended.promise;
    this.welcome.catch(() => {});
    this.#timer = setTimeout(() => {
      if (!this.#gotWelcome) {
        this.#welcome.reject(new APIConnectionError('no welcome frame within 10 s'));
        this.socket?.close();
      }
    }, OPEN_TIMEOUT);
    this.#timer.unref?.();
  }

  onMessage(text: string): void {
    let frame: Record<string, any>;
    try {
      frame = JSON.parse(text) as Record<string, any>;
    } catch {
      return;
    }
    if (!this.#gotWelcome) {
      this.#gotWelcome = true;
      clearTimeout(this.#timer);
      this.#welcome.resolve(frame);
      return;
    }
    if (this.#onFrame) this.#onFrame(frame);
    else this.#early.push(frame); // came in the same chunk as the welcome
  }

  set onFrame(handler: (frame: Record<string, any>) => void) {
    this.#onFrame = handler;
    for (const frame of this.#early.splice(0)) handler(frame);
  }

  onClose(code: number, reason: string): void {
    this.closed = true;
    clearTimeout(this.#timer);
    const why = `code ${code}${reason ? `: ${reason}` : ''}`;
    if (!this.#gotWelcome) this.#welcome.reject(new APIConnectionError(`WebSocket closed before the welcome (${why})`));
    this.#ended.resolve(why);
  }
}
