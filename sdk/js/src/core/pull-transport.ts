/**
 * The REST pull transport of a Consumer (`transport: 'pull'`, or a `'websocket'` consumer in a runtime with
 * no WebSocket client): join the group, long-poll for messages and let the handlers finish each batch, beat
 * the member's heartbeat, send settlements as `/ack`, `/nack` and `/extend` calls, rejoin when the server
 * says the member or its generation is gone, and on stop flush and leave.
 */
import { seg } from './api-client.js';
import { APIError } from './error.js';
import { backoff, durationSeconds, retryable, type ConsumerHost, type ConsumerTransport } from './consumer-kit.js';

const POLL_WAIT_SECONDS = 5;
const ACK_BATCH = 1000;
const REJOIN_CODES = new Set(['MEMBER_NOT_FOUND', 'STALE_GENERATION']);

export class PullTransport implements ConsumerTransport {
  #host: ConsumerHost;
  /** The server's session timeout as of the last join; sets the heartbeat interval of the next run. */
  #sessionSeconds = 10;
  #pollAbort: AbortController | undefined;

  constructor(host: ConsumerHost) {
    this.#host = host;
  }

  interrupt(): void {
    this.#pollAbort?.abort();
  }

  async run(): Promise<void> {
    const host = this.#host;
    let flushing: Promise<void> = Promise.resolve();
    host.pending.connect(() => {
      flushing = flushing.then(() => this.flush());
    });
    const heartbeat = setInterval(() => void this.#heartbeat(), Math.max(500, (this.#sessionSeconds * 1000) / 3));
    heartbeat.unref?.();
    let failures = 0;
    try {
      while (!host.stop.stopped) {
        try {
          if (host.member.memberId === null || host.member.generation === 0) {
            await this.#join();
            host.joined();
          }
          const messages = await this.#poll();
          failures = 0;
          if (messages.length > 0) {
            for (const wire of messages) host.deliver(wire);
            // Until they are handled, or stop() (which may come from a handler: not waited for here).
            await Promise.race([host.handled(), host.stop.promise]);
          }
        } catch (error) {
          if (host.stop.stopped) break;
          if (this.#rejoinOn(error)) continue;
          if (!retryable(error)) throw error;
          failures += 1;
          await host.emitError(error);
          await host.stop.sleep(backoff(failures));
        }
      }
    } finally {
      clearInterval(heartbeat);
      await host.drain();
      host.pending.disconnect();
      await flushing;
      await this.flush();
      await this.#leave();
    }
  }

  async #join(): Promise<void> {
    const host = this.#host;
    const member = host.member;
    const body: Record<string, unknown> = { startFrom: host.startFrom };
    if (member.memberId !== null) body['memberId'] = member.memberId;
    const joined = await host.client.requestObject<{
      memberId: string;
      generationId: number;
      assignments: number[];
      sessionTimeout: string;
    }>({ method: 'POST', path: host.path('/members'), body });
    member.memberId = joined.memberId;
    member.generation = joined.generationId;
    member.assignments = joined.assignments ?? [];
    this.#sessionSeconds = durationSeconds(joined.sessionTimeout, 10);
    host.client.logger.debug(
      `joined ${host.topic}/${host.group} as ${joined.memberId} (generation ${joined.generationId})`,
    );
    host.emitRebalance();
  }

  /** Whether `error` means join again (the member or its generation is gone); forgets what it must. */
  #rejoinOn(error: unknown): boolean {
    if (error instanceof APIError && error.code !== undefined && REJOIN_CODES.has(error.code)) {
      if (error.code === 'MEMBER_NOT_FOUND') this.#host.member.memberId = null;
      this.#host.member.generation = 0;
      return true;
    }
    return false;
  }

  async #poll(): Promise<Record<string, any>[]> {
    const host = this.#host;
    this.#pollAbort = new AbortController();
    try {
      const answer = await host.client.requestObject<{ messages?: Record<string, any>[] }>({
        method: 'POST',
        path: host.path('/poll'),
        body: { ...host.member.ref(), maxMessages: host.maxInFlight, waitSeconds: POLL_WAIT_SECONDS },
        timeout: Math.max(host.client.timeout, POLL_WAIT_SECONDS * 1000 + 10_000),
        signal: this.#pollAbort.signal,
      });
      return answer.messages ?? [];
    } finally {
      this.#pollAbort = undefined;
    }
  }

  async #heartbeat(): Promise<void> {
    const host = this.#host;
    const member = host.member;
    if (member.memberId === null || member.generation === 0 || host.stop.stopped) return;
    try {
      type Beat = { generationId: number; shouldRejoin: boolean; assignments: number[] };
      const beat = await host.client.requestObject<Beat>({
        method: 'POST',
        path: host.path(`/members/${seg(member.memberId)}/heartbeat`),
        body: { generationId: member.generation },
        maxRetries: 0,
      });
      if (beat.shouldRejoin) member.generation = 0;
      else if (Array.isArray(beat.assignments) && beat.assignments.join() !== member.assignments.join()) {
        member.assignments = beat.assignments;
        member.generation = beat.generationId ?? member.generation;
        host.emitRebalance();
      }
    } catch (error) {
      if (!this.#rejoinOn(error)) host.client.logger.debug(`heartbeat failed: ${String(error)}`);
    }
  }

  /** Send what is pending as `/ack`, `/nack` and `/extend` calls (also the SSE transport's way to settle). */
  async flush(): Promise<void> {
    const host = this.#host;
    const pending = host.pending;
    const { acks, nacks, extends: extensions } = pending.take();
    const member = host.member.ref();
    const retry = (fn: () => void) => (error: unknown) => {
      if (retryable(error) && !host.stop.stopped) fn();
      else void host.emitError(error);
    };
    for (const extension of extensions) {
      try {
        const answer = await host.client.requestObject<{ failed?: unknown }>({
          method: 'POST',
          path: host.path('/extend'),
          body: { ...member, ids: [extension.id], seconds: extension.seconds },
        });
        host.reportFailed(answer.failed, 'extend');
      } catch (error) {
        retry(() => pending.extends.push(extension))(error);
      }
    }
    for (let start = 0; start < acks.length; start += ACK_BATCH) {
      const ids = acks.slice(start, start + ACK_BATCH);
      try {
        const answer = await host.client.requestObject<{ failed?: unknown }>({
          method: 'POST',
          path: host.path('/ack'),
          body: { ...member, ids },
        });
        host.reportFailed(answer.failed);
      } catch (error) {
        retry(() => pending.acks.push(...ids))(error);
      }
    }
    for (const nack of nacks) {
      const body: Record<string, unknown> = { ...member, id: nack.id };
      if (nack.reason !== undefined) body['reason'] = nack.reason;
      if (nack.delay !== undefined) body['delay'] = nack.delay;
      if (nack.deadLetter) body['deadLetter'] = true;
      try {
        const answer = await host.client.requestObject<{ failed?: unknown }>({
          method: 'POST',
          path: host.path('/nack'),
          body,
        });
        host.reportFailed(answer.failed, 'nack');
      } catch (error) {
        retry(() => pending.nacks.push(nack))(error);
      }
    }
  }

  async #leave(): Promise<void> {
    const host = this.#host;
    const member = host.member.memberId;
    host.member.forget();
    if (member === null) return;
    try {
      await host.client.request({ method: 'DELETE', path: host.path(`/members/${seg(member)}`), maxRetries: 0 });
    } catch (error) {
      host.client.logger.debug(`leaving the group failed: ${String(error)}`); // the session timeout removes it
    }
  }
}
