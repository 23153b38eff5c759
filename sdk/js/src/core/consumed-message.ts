/**
 * A message as a consumer's handlers get it: the API's fields plus `ack()`, `nack()` and `extend()`, which
 * hand the settlement to the consumer that delivered it (its `Settler`) to be batched and sent by the
 * transport in use. A message settles once: a second `ack()` or `nack()` does nothing.
 */
import type { Message } from '../types.js';

/** Where a message's `ack()`, `nack()` and `extend()` go: the consumer that delivered it. */
export interface Settler {
  ack(id: string): void;
  nack(id: string, reason: string | undefined, delay: string | number | undefined, deadLetter?: boolean): void;
  extend(id: string, seconds: number): void;
}

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
  /** When it was due to consumer groups (`null`: not delayed). */
  readonly deliverAt: string | null;
  /** When it expires undelivered (`null`: never). */
  readonly expiresAt: string | null;
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
    this.deliverAt = wire['deliverAt'] ?? null;
    this.expiresAt = wire['expiresAt'] ?? null;
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
   * once its retries are spent; `deadLetter: true` moves it there at once (the group must have a DLQ).
   */
  async nack(reason?: string, options: { delay?: string | number; deadLetter?: boolean } = {}): Promise<void> {
    if (this.#settled) return;
    this.#settled = true;
    this.#settler.nack(this.id, reason, options.delay, options.deadLetter === true);
  }

  /** Move the ack deadline to `seconds` from now (1 to 43200). */
  async extend(seconds: number): Promise<void> {
    if (this.#settled) return;
    this.#settler.extend(this.id, seconds);
  }

  /** The message's fields as the API sent them. */
  toJSON(): Message<T> & { attempt: number; ackDeadline: string } {
    const { id, topic, partition, offset, key, headers, data, timestamp, deliverAt, expiresAt } = this;
    const { attempt, ackDeadline } = this;
    return { id, topic, partition, offset, key, headers, data, timestamp, deliverAt, expiresAt, attempt, ackDeadline };
  }
}
