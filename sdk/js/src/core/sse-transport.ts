/**
 * The Server-Sent Events transport of a Consumer (`transport: 'sse'`): one streamed GET of
 * `…/groups/{group}/events` is the membership (the server polls for the member; closing the stream leaves
 * the group). It opens the stream (the global `EventSource` with a short-lived `?token=` where the runtime
 * has one, else a `fetch` reader with the `Authorization` header: event-stream.ts), takes the welcome,
 * delivers `message` events to the Consumer, follows `rebalance` events, and sends settlements through the
 * pull calls (`/ack`, `/nack`, `/extend`, as the pull transport does). It reconnects with backoff when the
 * stream drops, at once after `draining`; an `error` event (a revoked key, a deleted topic) ends the run
 * with the typed error. On stop it drains, flushes the settlements while the member still exists, closes
 * the stream and leaves.
 */
import { seg } from './api-client.js';
import { backoff, deferred, retryable, type ConsumerHost, type ConsumerTransport } from './consumer-kit.js';
import { APIConnectionError, APIError, RateLimitError, makeStatusError } from './error.js';
import { globalEventSource, openEventSource, openFetchStream, type EventStream } from './event-stream.js';
import { PullTransport } from './pull-transport.js';

const WELCOME_TIMEOUT = 10_000;

/** The typed error an `error` event carries (its data is the error envelope). */
function eventError(data: string): APIError {
  let envelope: Record<string, any> = {};
  try {
    envelope = JSON.parse(data) as Record<string, any>;
  } catch {
    // not JSON: the message says so below
  }
  const error = (envelope['error'] ?? {}) as Record<string, unknown>;
  if (typeof error['status'] === 'number') return makeStatusError(error['status'], new Headers(), envelope);
  return new APIError(String(error['message'] ?? 'the event stream reported an error'), {
    status: typeof error['status'] === 'number' ? error['status'] : undefined,
    code: typeof error['code'] === 'string' ? error['code'] : undefined,
    requestId: typeof error['requestId'] === 'string' ? error['requestId'] : undefined,
    body: envelope,
  });
}

/** One stream's state, as its events arrive. */
class SseSession {
  stream: EventStream | undefined;
  draining = false;
  welcome = deferred<Record<string, any>>();
  /** Resolves with why the stream ended: the server closed it, it dropped, or an `error` event. */
  ended = deferred<unknown>();
  #listener: ((event: string, data: string) => void) | undefined;
  /** Events that came before the session listened: the welcome and the first messages often share a chunk. */
  #early: Array<[string, string]> = [];

  constructor() {
    this.welcome.promise.catch(() => {});
  }

  /** An event after the welcome: to the listener, or kept for it until it listens. */
  receive(event: string, data: string): void {
    if (this.#listener) this.#listener(event, data);
    else this.#early.push([event, data]);
  }

  /** Listen from now on, taking first what came while the welcome was being handled. */
  listen(listener: (event: string, data: string) => void): void {
    this.#listener = listener;
    for (const [event, data] of this.#early.splice(0)) listener(event, data);
  }
}

export class SseTransport implements ConsumerTransport {
  #host: ConsumerHost;
  /** Settlements go through the pull calls. */
  #settle: PullTransport;

  constructor(host: ConsumerHost) {
    this.#host = host;
    this.#settle = new PullTransport(host);
  }

  interrupt(): void {
    // The session races the stop signal itself.
  }

  async run(): Promise<void> {
    const host = this.#host;
    let failures = 0;
    while (!host.stop.stopped) {
      const session = new SseSession();
      try {
        session.stream = await this.#open(session);
        await this.#session(session);
        failures = 0;
      } catch (error) {
        if (host.stop.stopped) return;
        if (!retryable(error)) throw error;
        failures += 1;
        await host.emitError(error);
        const floor = error instanceof RateLimitError ? (error.retryAfter ?? 0) * 1000 : 0;
        await host.stop.sleep(backoff(failures, floor));
      } finally {
        session.stream?.close();
        host.pending.disconnect();
        await host.recover();
      }
    }
  }

  async #open(session: SseSession): Promise<EventStream> {
    const host = this.#host;
    const query = new URLSearchParams({ startFrom: host.startFrom, maxInFlight: String(host.maxInFlight) });
    const events = {
      onEvent: (event: string, data: string) => {
        if (event === 'welcome') session.welcome.resolve(JSON.parse(data) as Record<string, any>);
        else if (event === 'error') session.ended.resolve(eventError(data));
        else session.receive(event, data);
      },
      onEnd: (error?: unknown) => {
        const why = error ?? new Error('the server ended the stream');
        session.welcome.reject(why);
        session.ended.resolve(why);
      },
    };
    const EventSourceImpl = globalEventSource();
    if (EventSourceImpl) {
      const answer = await host.client.requestObject<{ token: string }>({
        method: 'POST',
        path: '/v1/tokens/websocket',
        body: { topic: host.topic, group: host.group },
      });
      query.set('token', answer.token);
      return openEventSource(EventSourceImpl, `${host.client.baseURL}${host.path('/events')}?${query}`, events);
    }
    return openFetchStream(host.client, `${host.path('/events')}?${query}`, events);
  }

  async #session(session: SseSession): Promise<void> {
    const host = this.#host;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new APIConnectionError('no welcome on the event stream')), WELCOME_TIMEOUT);
    });
    let welcome: Record<string, any>;
    try {
      welcome = await Promise.race([session.welcome.promise, late]);
    } catch (error) {
      // An `error` event instead of a welcome is the refusal; anything else is a connection failure.
      const why = await Promise.race([session.ended.promise, Promise.resolve(error)]);
      throw why instanceof APIError ? why : new APIConnectionError(`Event stream failed: ${String(why)}`, { cause: why });
    } finally {
      clearTimeout(timer);
    }
    const member = host.member;
    member.memberId = typeof welcome['memberId'] === 'string' ? welcome['memberId'] : null;
    member.generation = Number(welcome['generationId'] ?? 0);
    member.assignments = Array.isArray(welcome['assignments']) ? (welcome['assignments'] as number[]) : [];
    host.accept();
    host.client.logger.debug(`joined ${host.topic}/${host.group} as ${member.memberId} over SSE`);
    let flushing: Promise<void> = Promise.resolve();
    host.pending.connect(() => {
      flushing = flushing.then(() => this.#settle.flush());
    });
    host.emitRebalance();
    host.joined();
    session.listen((event, data) => this.#onEvent(event, data, session));
    if (host.pending.size > 0) host.pending.schedule(0);
    const ended = await Promise.race([session.ended.promise, host.stop.promise.then(() => 'stopped' as const)]);
    if (ended === 'stopped') {
      await this.#finish(session, () => flushing);
      return;
    }
    await flushing;
    if (ended instanceof APIError) throw ended; // a revoked key, a deleted topic
    // A deploy: the node said `draining` and ended the stream. Reconnect at once, reporting nothing.
    if (session.draining) {
      host.client.logger.info('the server is draining; reconnecting');
      return;
    }
    throw new APIConnectionError(`Event stream lost: ${String(ended)}`, { cause: ended });
  }

  #onEvent(event: string, data: string, session: SseSession): void {
    const host = this.#host;
    switch (event) {
      case 'message':
        host.deliver(JSON.parse(data) as Record<string, any>);
        break;
      case 'rebalance': {
        const fields = JSON.parse(data) as Record<string, any>;
        host.member.generation = Number(fields['generationId'] ?? host.member.generation);
        if (Array.isArray(fields['assignments'])) host.member.assignments = fields['assignments'] as number[];
        host.emitRebalance();
        break;
      }
      case 'draining':
        session.draining = true;
        break;
      default:
        break;
    }
  }

  /** Graceful stop: no new messages, running handlers finish, settlements sent, the stream closed, leave. */
  async #finish(session: SseSession, flushing: () => Promise<void>): Promise<void> {
    const host = this.#host;
    await host.drain();
    host.pending.cancel();
    host.pending.disconnect();
    await flushing();
    await this.#settle.flush();
    session.stream?.close(); // the server sees the stream close: the member leaves
    const member = host.member.memberId;
    host.member.forget();
    if (member === null) return;
    try {
      // Leaving explicitly too makes stop() resolve only once the group knows (a second leave is a 404).
      await host.client.request({ method: 'DELETE', path: host.path(`/members/${seg(member)}`), maxRetries: 0 });
    } catch {
      // it left with the stream
    }
  }
}
