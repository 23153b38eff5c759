/**
 * Consumers: `pq.consume(topic, {group})` joins a consumer group and runs handlers on its messages, batching
 * acks, riding out rebalances, restarts and dropped connections. Three transports: WebSocket push (the default:
 * the connection is the membership), REST pull (`transport: 'pull'`: long polls, heartbeats, explicit join
 * and leave; for environments without WebSocket) and Server-Sent Events (`transport: 'sse'`: one streamed GET
 * is the membership, settlements go through the pull calls; sse-transport.ts).
 *
 * Life cycle: `start()` resolves once the member has joined (the consumer then runs in the background);
 * `stop()` takes no new messages, lets running handlers finish, sends the pending acks, waits for the server
 * to confirm them, and leaves the group. Messages received but not handled are not acked: the server
 * redelivers them once the member has left. Each partition's messages reach the handlers in offset order,
 * one at a time; partitions run concurrently.
 *
 * This module owns the Consumer's life cycle, its events, the handler chains and the settling of messages;
 * the wire work is in push-transport.ts and pull-transport.ts, which it drives through the `ConsumerHost`
 * of consumer-kit.ts; the message class is in consumed-message.ts.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

import type { APIClient } from './api-client.js';
import { seg } from './api-client.js';
import { ConsumedMessage, type Settler } from './consumed-message.js';
import {
  backoff,
  deferred,
  Membership,
  Pending,
  retryable,
  StopSignal,
  type ConsumerHost,
  type ConsumerTransport,
} from './consumer-kit.js';
import { AckError, QueueCoreError } from './error.js';
import { PullTransport } from './pull-transport.js';
import { PushTransport } from './push-transport.js';
import { SseTransport } from './sse-transport.js';
import { processing } from './tracing.js';
import { defaultOpener, WebSocketUnavailableError, type OpenSocket } from './websocket.js';
import type { DeadLetterConfig, RebalanceEvent, StartFrom, Transport } from '../types.js';

export { ConsumedMessage } from './consumed-message.js';

export interface ConsumeOptions {
  /** The consumer group; its members split the topic's partitions. */
  group: string;
  /** Where a group with no committed offset starts: `'latest'` (default) or `'earliest'`. */
  startFrom?: StartFrom;
  /** Set as the group's dead-letter queue before joining. */
  deadLetter?: DeadLetterConfig;
  /** Messages delivered and not yet settled, at most (websocket, sse: 1–10,000; pull: 1–1000 per poll). Default 100. */
  maxInFlight?: number;
  /** `'websocket'` (push, the default), `'pull'` (REST long polls) or `'sse'` (Server-Sent Events). */
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

const ACK_LINGER = 5; // ms acks wait for company before they go out as one frame
const PULL_FLUSH_INTERVAL = 100;

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
  #stop = new StopSignal();
  #running = false;
  #run: Promise<void> | undefined;
  #joined = deferred<void>();
  #member = new Membership();
  #accepting = true;
  // per partition: messages waiting, and the handler chain running them
  #queues = new Map<number, ConsumedMessage<T>[]>();
  #workers = new Map<number, Promise<void>>();
  // the transports, built on first use and kept (the pull one remembers the session timeout between runs)
  #push: PushTransport | undefined;
  #pull: PullTransport | undefined;
  #sse: SseTransport | undefined;
  /** The transport of the current run, for stop() to interrupt. */
  #transport: ConsumerTransport | undefined;
  #releaseIteration: (() => void) | undefined;
  #fatal: unknown;
  /** True once a WebSocket consumer found no WebSocket client and went on over REST pull. */
  #pullFallback = false;
  /** Partitions whose running handler called stop(): stop() cannot wait for them (it would wait for itself). */
  #stopCallers = new Set<number>();
  /** What the transports may see and do of this consumer; the rest stays private (after the fields it uses). */
  #host: ConsumerHost = this.#makeHost();

  constructor(client: APIClient, topic: string, options: ConsumeOptions) {
    if (!options || typeof options.group !== 'string' || options.group === '') {
      throw new QueueCoreError('consume() needs a group: pq.consume(topic, { group: "my-group" })');
    }
    const transport = options.transport ?? 'websocket';
    if (transport !== 'websocket' && transport !== 'pull' && transport !== 'sse') {
      throw new QueueCoreError(`unknown transport ${JSON.stringify(transport)}: 'websocket', 'pull' or 'sse'`);
    }
    const limit = transport === 'pull' ? 1000 : 10_000;
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
    return this.#member.memberId;
  }

  /** The partitions this member holds now. */
  get assignments(): readonly number[] {
    return this.#member.assignments;
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
    this.#transport?.interrupt();
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
      memberId: this.#member.memberId,
      generationId: this.#member.generation,
      assignments: [...this.#member.assignments],
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
      this.#pending.schedule(this.transport === 'websocket' && !this.#pullFallback ? ACK_LINGER : PULL_FLUSH_INTERVAL);
    },
    nack: (id, reason, delay, deadLetter) => {
      this.#pending.nacks.push({ id, reason, delay, deadLetter });
      this.#pending.schedule(0);
    },
    extend: (id, seconds) => {
      this.#pending.extends.push({ id, seconds });
      this.#pending.schedule(0);
    },
  };

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
          // Inside a `process` span of the message's context when OpenTelemetry is installed.
          await processing(message, this.group, async () => {
            await handler(message);
          });
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

  /** A connection ended without stop(): handlers running finish (their acks wait for the next connection). */
  async #recover(): Promise<void> {
    if (this.#stop.stopped) return;
    for (const queue of this.#queues.values()) queue.length = 0;
    await Promise.allSettled([...this.#workers.values()]);
    this.#member.forget();
    this.#accepting = true;
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
      } else if (this.transport === 'sse') await this.#runSse();
      else await this.#runPull();
    } catch (error) {
      if (!this.#stop.stopped) {
        this.#fatal = error;
        await this.#emitError(error);
      }
      this.#joined.reject(error);
    } finally {
      this.#transport = undefined;
      this.#pending.disconnect();
      this.#member.forget();
      this.#member.assignments = [];
    }
  }

  async #runPush(): Promise<void> {
    this.#transport = this.#push ??= new PushTransport(this.#host, this.#open);
    await this.#transport.run();
  }

  async #runPull(): Promise<void> {
    this.#transport = this.#pull ??= new PullTransport(this.#host);
    await this.#transport.run();
  }

  async #runSse(): Promise<void> {
    this.#transport = this.#sse ??= new SseTransport(this.#host);
    await this.#transport.run();
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

  // -- what the transports see -------------------------------------------------------------------------------

  #makeHost(): ConsumerHost {
    const self = this;
    return {
      get client() {
        return self.#client;
      },
      get topic() {
        return self.topic;
      },
      get group() {
        return self.group;
      },
      get startFrom() {
        return self.startFrom;
      },
      get maxInFlight() {
        return self.maxInFlight;
      },
      get stop() {
        return self.#stop;
      },
      member: this.#member,
      pending: this.#pending,
      path: (tail) => this.#path(tail),
      joined: () => this.#joined.resolve(),
      deliver: (wire) => this.#deliver(wire),
      accept: () => {
        this.#accepting = true;
      },
      handled: () => Promise.allSettled([...this.#workers.values()]),
      drain: () => this.#drain(),
      recover: () => this.#recover(),
      emitError: (error) => this.#emitError(error),
      emitRebalance: () => this.#emitRebalance(),
      reportFailed: (failed, action) => this.#reportFailed(failed, action),
    };
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
