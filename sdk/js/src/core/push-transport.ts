/**
 * The WebSocket push transport of a Consumer (the default): one connection is the membership. It opens the
 * socket (a short-lived `?token=` or the `Authorization` header, as the runtime's client allows), takes the
 * welcome, delivers `message(s)` frames to the Consumer, sends settlements as `ack`/`nack`/`extend` frames
 * and counts their `acked` answers, follows `rebalance` frames, and reconnects with backoff when the
 * connection drops. On stop it drains, waits for its settle frames to be answered, closes and leaves.
 *
 * A deploy is no failure: on a `draining` frame it hands over as a stop does (messages not started are left
 * to the next owner, running handlers finish, their settlements are sent and answered while the draining
 * node still settles them), closes, and reconnects at once; a close with 1012 (service restart) counts as a
 * deploy even without the frame (a connection opened on a node that had begun draining). Neither is reported.
 * An `error` frame is reported as it comes; a normal close (1000) after it is the end it announced, not a
 * second failure: the consumer reconnects with backoff without reporting it again.
 */
import { seg } from './api-client.js';
import { APIConnectionError, APIError, RateLimitError, makeStatusError } from './error.js';
import { backoff, deferred, retryable, type ConsumerHost, type ConsumerTransport } from './consumer-kit.js';
import { SocketOpenError, type OpenSocket, type Socket } from './websocket.js';

const ACK_BATCH = 500;
const STOP_FLUSH_TIMEOUT = 5_000;
const OPEN_TIMEOUT = 10_000;
/** Close code 1012 (service restart): the node is draining for a deploy. */
const SERVICE_RESTART = 1012;
/** Close code 1000: how the server closes after an `error` frame that said why. */
const NORMAL_CLOSURE = 1000;

/** A session the server closed normally after an `error` frame, which was reported already. */
class ClosedAfterError extends APIConnectionError {}

/** The typed error an `error` frame (or a refusing welcome) carries: by its status, as an HTTP answer's is. */
function frameError(frame: Record<string, any>, fallback: string): APIError {
  const error = (frame['error'] ?? {}) as Record<string, unknown>;
  if (typeof error['status'] === 'number') return makeStatusError(error['status'], new Headers(), frame);
  return new APIError(String(error['message'] ?? fallback), {
    status: typeof error['status'] === 'number' ? error['status'] : undefined,
    code: typeof error['code'] === 'string' ? error['code'] : undefined,
    requestId: typeof error['requestId'] === 'string' ? error['requestId'] : undefined,
    body: frame,
  });
}

export class PushTransport implements ConsumerTransport {
  #host: ConsumerHost;
  #open: OpenSocket;
  /** Settle frames sent on this connection and not yet answered by an `acked` frame. */
  #unanswered = 0;
  #answered: Array<() => void> = [];

  constructor(host: ConsumerHost, open: OpenSocket) {
    this.#host = host;
    this.#open = open;
  }

  interrupt(): void {
    // The session races the stop signal itself.
  }

  async run(): Promise<void> {
    const host = this.#host;
    let failures = 0;
    while (!host.stop.stopped) {
      let socket: Socket | undefined;
      let deployed = false;
      try {
        const url = await this.#url();
        const headers: Record<string, string> = { 'User-Agent': 'queuecore-node' };
        if (this.#open.auth === 'header') headers['Authorization'] = `Bearer ${host.client.apiKey}`;
        const session = new PushSession();
        socket = await this.#open(url, headers, session, OPEN_TIMEOUT);
        session.socket = socket;
        failures = 0;
        deployed = await this.#session(session);
      } catch (error) {
        if (host.stop.stopped) return;
        if (!retryable(error)) throw error;
        failures += 1;
        const wrapped =
          error instanceof SocketOpenError
            ? new APIConnectionError(`WebSocket connection failed: ${error.message}`, { cause: error })
            : error;
        if (!(error instanceof ClosedAfterError)) await host.emitError(wrapped);
        const floor = error instanceof RateLimitError ? (error.retryAfter ?? 0) * 1000 : 0;
        await host.stop.sleep(backoff(failures, floor));
      } finally {
        socket?.close();
        host.pending.disconnect();
        await host.recover();
      }
      // A deploy: up to 100 ms, so that the members of a draining node do not all knock on the next one at
      // once (nor spin on the draining node itself while the balancer still routes to it).
      if (deployed) await host.stop.sleep(Math.random() * 100);
    }
  }

  async #url(): Promise<string> {
    const host = this.#host;
    const base = new URL(host.client.baseURL);
    const scheme = base.protocol === 'https:' ? 'wss:' : 'ws:';
    const path = `${base.pathname.replace(/\/+$/, '')}/v1/topics/${seg(host.topic)}/consume`;
    const query = new URLSearchParams({
      group: host.group,
      startFrom: host.startFrom,
      maxInFlight: String(host.maxInFlight),
    });
    if (this.#open.auth === 'token') {
      const answer = await host.client.requestObject<{ token: string }>({
        method: 'POST',
        path: '/v1/tokens/websocket',
        body: { topic: host.topic, group: host.group },
      });
      query.set('token', answer.token);
    }
    return `${scheme}//${base.host}${path}?${query.toString()}`;
  }

  /** One connection, until stopped (`false`) or the node drains for a deploy (`true`); else throws why it ended. */
  async #session(session: PushSession): Promise<boolean> {
    const host = this.#host;
    const welcome = await session.welcome;
    if (welcome['type'] === 'error') throw frameError(welcome, 'refused');
    // Opened on a node already draining: told to go elsewhere before joining (a deploy, not a failure).
    if (welcome['type'] === 'draining') {
      host.client.logger.info('the server is draining; reconnecting');
      return true;
    }
    const member = host.member;
    member.memberId = typeof welcome['memberId'] === 'string' ? welcome['memberId'] : null;
    member.generation = Number(welcome['generationId'] ?? 0);
    member.assignments = Array.isArray(welcome['assignments']) ? (welcome['assignments'] as number[]) : [];
    this.#unanswered = 0;
    host.accept();
    host.client.logger.debug(`joined ${host.topic}/${host.group} as ${member.memberId} over WebSocket`);
    host.pending.connect(() => this.#flush(session));
    host.emitRebalance();
    host.joined();
    session.onFrame = (frame) => this.#onFrame(frame, session);
    if (host.pending.size > 0) host.pending.schedule(0);
    const ended = await Promise.race([session.ended, session.drainSaid, host.stop.promise]);
    if (ended === 'stopped') {
      await this.#finish(session);
      return false;
    }
    if (ended === 'draining') {
      // A deploy: hand over as a stop does (running handlers finish, their acks are sent and answered,
      // messages not started are left to the next owner), close, and connect again (to another node behind
      // the same address) at once, reporting nothing.
      await this.#finish(session, { leave: false });
      host.client.logger.info('the server is draining; reconnecting');
      return true;
    }
    // Closed by a node that had begun draining (1012), its frame unseen: a deploy too.
    if (session.draining || session.closeCode === SERVICE_RESTART) {
      host.client.logger.info('the server is draining; reconnecting');
      return true;
    }
    if (session.errorSaid && session.closeCode === NORMAL_CLOSURE) {
      throw new ClosedAfterError(`WebSocket closed after an error frame (${ended})`);
    }
    throw new APIConnectionError(`WebSocket connection lost (${ended})`);
  }

  #onFrame(frame: Record<string, any>, session: PushSession): void {
    const host = this.#host;
    switch (frame['type']) {
      case 'draining':
        session.drain();
        break;
      case 'message':
        host.deliver(frame);
        break;
      case 'messages':
        for (const item of (frame['messages'] as Record<string, any>[] | undefined) ?? []) host.deliver(item);
        break;
      case 'acked':
        this.#unanswered = Math.max(0, this.#unanswered - 1);
        for (const wake of this.#answered.splice(0)) wake();
        host.reportFailed(frame['failed']);
        break;
      case 'rebalance':
        host.member.generation = Number(frame['generationId'] ?? host.member.generation);
        if (Array.isArray(frame['assignments'])) host.member.assignments = frame['assignments'] as number[];
        host.emitRebalance();
        break;
      case 'error':
        session.errorSaid = true;
        void host.emitError(frameError(frame, 'error'));
        break;
      default:
        break;
    }
  }

  #flush(session: PushSession): void {
    const socket = session.socket;
    if (!socket || session.closed) return;
    const pending = this.#host.pending;
    const { acks, nacks, extends: extensions } = pending.take();
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
        if (nack.deadLetter) frame['deadLetter'] = true;
        socket.send(JSON.stringify(frame));
        this.#unanswered += 1;
      }
    } catch {
      // Not sent: keep the acks for the next connection (where they may fail as ACK_EXPIRED: the server
      // redelivers what this member held once it left).
      const sentSet = new Set(sent);
      pending.acks.push(...acks.filter((id) => !sentSet.has(id)));
    }
  }

  /**
   * Graceful stop: no new messages, running handlers finish, acks flushed and answered, close, and (`leave`)
   * leave the group; a draining node's member leaves as its connection ends, and its unanswered settle
   * frames are not the caller's failure (what they settled comes back to the next owner).
   */
  async #finish(session: PushSession, { leave = true } = {}): Promise<void> {
    const host = this.#host;
    await host.drain();
    host.pending.cancel();
    this.#flush(session);
    const deadline = Date.now() + STOP_FLUSH_TIMEOUT;
    while (this.#unanswered > 0 && !session.closed && Date.now() < deadline) {
      await Promise.race([
        new Promise<void>((resolve) => this.#answered.push(resolve)),
        session.ended,
        new Promise<void>((resolve) => setTimeout(resolve, Math.max(1, deadline - Date.now())).unref?.()),
      ]);
    }
    if (this.#unanswered > 0 && leave) {
      await host.emitError(new APIConnectionError(`stop(): ${this.#unanswered} settle frame(s) not confirmed`));
    } else if (this.#unanswered > 0) {
      host.client.logger.warn(`the draining server confirmed ${this.#unanswered} settle frame(s) fewer than sent`);
    }
    session.socket?.close(1000);
    await Promise.race([session.socket?.closed(), new Promise((resolve) => setTimeout(resolve, 2000).unref?.())]);
    // The server removes the member when it sees the close; leaving explicitly too makes stop() resolve only
    // once the group knows (a second leave is a harmless 404).
    const memberId = host.member.memberId;
    if (leave && memberId !== null) {
      try {
        await host.client.request({ method: 'DELETE', path: host.path(`/members/${seg(memberId)}`), maxRetries: 0 });
      } catch {
        /* already gone */
      }
    }
  }
}

/**
 * One connection's incoming side: the welcome (the first frame, within OPEN_TIMEOUT), then frames to the
 * handler set by `onFrame` (those arriving before it is set are kept), and how the connection ended.
 */
class PushSession {
  socket: Socket | undefined;
  closed = false;
  /** The server sent `draining`: hand over, then reconnect; its close is a deploy, not a failure. */
  draining = false;
  /** The server sent an `error` frame: a normal close after it is the end that frame announced. */
  errorSaid = false;
  /** The close code, once closed (1012: the node is draining). */
  closeCode: number | undefined;
  /** Resolves with `'draining'` when the server says it is draining. */
  readonly drainSaid: Promise<'draining'>;
  #drainSaid = deferred<'draining'>();
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
    this.drainSaid = this.#drainSaid.promise;
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

  /** The `draining` frame. */
  drain(): void {
    this.draining = true;
    this.#drainSaid.resolve('draining');
  }

  onClose(code: number, reason: string): void {
    this.closed = true;
    this.closeCode = code;
    clearTimeout(this.#timer);
    const why = `code ${code}${reason ? `: ${reason}` : ''}`;
    if (!this.#gotWelcome) this.#welcome.reject(new APIConnectionError(`WebSocket closed before the welcome (${why})`));
    this.#ended.resolve(why);
  }
}
