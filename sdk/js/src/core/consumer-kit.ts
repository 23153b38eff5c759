/**
 * What the Consumer and its two transports (push-transport.ts, pull-transport.ts) share: the narrow
 * interface a transport drives its Consumer through (`ConsumerHost`), the state they both touch (the
 * group membership, the settlements waiting to be sent), and the retry and stop helpers of their loops.
 */
import type { APIClient } from './api-client.js';
import {
  APIConnectionError,
  APIError,
  InternalServerError,
  RateLimitError,
  ServiceUnavailableError,
} from './error.js';
import { SocketOpenError } from './websocket.js';
import type { StartFrom } from '../types.js';

const MAX_BACKOFF = 5_000;
const RETRY_STATUSES = new Set([408, 425, 429, 500, 502, 503, 504]);

/** One way of consuming (WebSocket push or REST pull), driven by the Consumer through a `ConsumerHost`. */
export interface ConsumerTransport {
  /** Join, consume until `host.stop` fires, then settle and leave; rejects when retrying cannot help. */
  run(): Promise<void>;
  /** `stop()` was called: cut short a wait the stop signal does not reach (a long poll). */
  interrupt(): void;
}

/**
 * What a transport may see and do of the Consumer that drives it. The Consumer builds one over its private
 * state; its message queues, handlers and `start()` promise stay its own.
 */
export interface ConsumerHost {
  readonly client: APIClient;
  readonly topic: string;
  readonly group: string;
  readonly startFrom: StartFrom;
  readonly maxInFlight: number;
  /** The current run's stop signal. */
  readonly stop: StopSignal;
  readonly member: Membership;
  readonly pending: Pending;
  /** A path under the group: `/v1/topics/{topic}/groups/{group}` + `tail`. */
  path(tail: string): string;
  /** The member is in: a `start()` still waiting resolves. */
  joined(): void;
  /** Queue a message for its partition's handler chain (dropped once stopping). */
  deliver(wire: Record<string, any>): void;
  /** Take messages again (a new connection). */
  accept(): void;
  /** Resolves once the handler chains now running have all finished. */
  handled(): Promise<unknown>;
  /** Graceful stop: take no more messages, drop those not started, wait for running handlers. */
  drain(): Promise<void>;
  /** A connection ended without stop(): running handlers finish, the member is forgotten, messages flow again. */
  recover(): Promise<void>;
  /** Report on `'error'` (or log, with no error handler). */
  emitError(error: unknown): Promise<void>;
  /** Report the member's partitions on `'rebalance'`. */
  emitRebalance(): void;
  /** Report the settlements the server refused (its `failed` list) on `'error'` as `AckError`s. */
  reportFailed(failed: unknown, action?: 'ack' | 'nack' | 'extend'): void;
}

/** Who the consumer is in its group now: set by the transport, read by the Consumer's getters and events. */
export class Membership {
  memberId: string | null = null;
  generation = 0;
  assignments: number[] = [];

  /** Not a member (any more): the next connection or join starts afresh. */
  forget(): void {
    this.memberId = null;
    this.generation = 0;
  }

  /** The member id and generation as the REST calls send them. */
  ref(): { memberId: string | null; generationId: number } {
    return { memberId: this.memberId, generationId: this.generation };
  }
}

type Nack = { id: string; reason: string | undefined; delay: string | number | undefined; deadLetter?: boolean };

/**
 * Acks, nacks and extends waiting to be sent, and the timer that sends them through the connected
 * transport's flush. With no transport connected they wait for the next connection.
 */
export class Pending {
  acks: string[] = [];
  nacks: Nack[] = [];
  extends: Array<{ id: string; seconds: number }> = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #flush: (() => void) | undefined;

  /**
   * What is pending, emptied. An extend of a message acked or nacked in the same batch is dropped: settling
   * ends the lease anyway, and as acks go first the extend would reach the server after it and be refused
   * (`ACK_EXPIRED`, an `AckError` the application never caused).
   */
  take() {
    const settled = new Set([...this.acks, ...this.nacks.map((nack) => nack.id)]);
    const extensions = settled.size ? this.extends.filter((extension) => !settled.has(extension.id)) : this.extends;
    const taken = { acks: this.acks, nacks: this.nacks, extends: extensions };
    this.acks = [];
    this.nacks = [];
    this.extends = [];
    return taken;
  }

  get size(): number {
    return this.acks.length + this.nacks.length + this.extends.length;
  }

  /** A transport is connected: scheduled flushes call `flush`. */
  connect(flush: () => void): void {
    this.#flush = flush;
  }

  /** Flush in `ms`; a flush already scheduled stands, unless this one is immediate (`0`). */
  schedule(ms: number): void {
    if (!this.#flush) return; // not connected: sent on the next connection
    if (this.#timer !== undefined) {
      if (ms > 0) return;
      clearTimeout(this.#timer);
    }
    const flush = this.#flush;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      flush();
    }, ms);
  }

  /** Drop the scheduled flush (the transport flushes itself now). */
  cancel(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The transport is gone: nothing is flushed until the next one connects. */
  disconnect(): void {
    this.cancel();
    this.#flush = undefined;
  }
}

/** Whether trying again may succeed: connection trouble, 5xx, 429 and the like. */
export function retryable(error: unknown): boolean {
  return (
    error instanceof APIConnectionError ||
    error instanceof SocketOpenError ||
    error instanceof InternalServerError ||
    error instanceof ServiceUnavailableError ||
    error instanceof RateLimitError ||
    (error instanceof APIError && error.status !== undefined && RETRY_STATUSES.has(error.status))
  );
}

/** The wait (ms) after `failures` failures in a row: exponential with jitter, capped, at least `floorMs`. */
export function backoff(failures: number, floorMs = 0): number {
  return Math.max(floorMs, Math.min(MAX_BACKOFF, 100 * 2 ** failures) * (0.5 + Math.random() / 2));
}

/** `'10s'`, `'500ms'`, `'1m'`, `'1h'` in seconds, else `fallback`. */
export function durationSeconds(value: unknown, fallback: number): number {
  const match = typeof value === 'string' ? /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(value.trim()) : null;
  if (!match) return fallback;
  const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
  return Number(match[1]) * (units[match[2] as string] ?? 1);
}

/** A settled promise plus its resolvers. */
export function deferred<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** One run's stop: a flag, a promise to race against, and sleeps it cuts short. */
export class StopSignal {
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
