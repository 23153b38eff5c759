/**
 * The request loop shared by every call: auth, idempotency key, retries, status → error.
 *
 * 1. A publish gets its `Idempotency-Key` ONCE, before the loop (the resource makes it), so every retry of it
 *    carries the same key and the server appends it at most once.
 * 2. Each attempt is sent through the client's `fetch` (Node's global fetch by default: undici, which keeps
 *    connections alive and pools them per origin) with a timeout of its own.
 * 3. Retried, with exponential backoff and jitter: 429 (waiting what `Retry-After` says, capped), 502, 503,
 *    504, and answers that never came (connection refused or broken, timeouts). Never another 4xx, never 500.
 * 4. A 2xx is returned; anything else throws the error of its status (`makeStatusError`).
 */
import { randomUUID } from 'node:crypto';

import {
  APIConnectionError,
  APIError,
  APIResponseValidationError,
  APITimeoutError,
  QueueCoreError,
  isObject,
  makeStatusError,
  parseRateLimit,
  parseRetryAfter,
  type RateLimit,
} from './error.js';
import { VERSION } from '../version.js';
import type { RawResponse } from '../types.js';

/** Milliseconds per attempt, by default. Publishes answer once durable (fsync'd): allow more than a read. */
export const DEFAULT_TIMEOUT = 30_000;
export const DEFAULT_MAX_RETRIES = 2;
/** Backoff: 0.5 s, 1 s, 2 s, ... capped at 8 s, less up to 25 % jitter. */
export const INITIAL_RETRY_DELAY = 500;
export const MAX_RETRY_DELAY = 8_000;
/** A server's `Retry-After` is honoured up to this many milliseconds. */
export const MAX_RETRY_AFTER = 60_000;
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);

/** Where the client logs; `console` fits. Retries are logged at `info`, requests at `debug`. */
export interface Logger {
  debug(message: string, ...rest: unknown[]): void;
  info(message: string, ...rest: unknown[]): void;
  warn(message: string, ...rest: unknown[]): void;
  error(message: string, ...rest: unknown[]): void;
}

export type Fetch = (input: string | URL, init?: RequestInit) => Promise<Response>;

/** The default logger: warnings and errors to the console, nothing else. */
export const defaultLogger: Logger = {
  debug() {},
  info() {},
  warn: (message, ...rest) => console.warn(`[queuecore] ${message}`, ...rest),
  error: (message, ...rest) => console.error(`[queuecore] ${message}`, ...rest),
};

/** One API call, before it becomes HTTP requests (one per attempt). */
export interface FinalRequestOptions {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Starting with `/v1/`; path segments already encoded. */
  path: string;
  /** Query parameters; `undefined` and `null` values are left out. */
  query?: Record<string, string | number | undefined | null>;
  body?: unknown;
  headers?: Record<string, string>;
  idempotencyKey?: string;
  /** Send the API key (everything but `/v1/health`). */
  authenticated?: boolean;
  /** Non-2xx statuses whose non-envelope body is an answer, not an error (`/v1/health`'s 503). */
  acceptStatuses?: number[];
  timeout?: number;
  maxRetries?: number;
  signal?: AbortSignal;
  /** Gets the final HTTP answer (see `RequestOptions.onResponse`). */
  onResponse?: (response: RawResponse) => void;
}

export interface APIResponse<T> {
  status: number;
  headers: Headers;
  body: T;
}

/** A fresh idempotency key: unique per publish, the same across its retries. */
export function newIdempotencyKey(): string {
  return `qc-js-${randomUUID()}`;
}

/** A path segment, percent-encoded (topic names are safe already; ids and group names may not be). */
export function seg(value: string | number): string {
  return encodeURIComponent(String(value));
}

export interface APIClientOptions {
  apiKey: string;
  baseURL: string;
  timeout: number;
  maxRetries: number;
  logger: Logger;
  fetch: Fetch;
  defaultHeaders: Record<string, string>;
}

export class APIClient {
  readonly apiKey: string;
  readonly baseURL: string;
  readonly timeout: number;
  readonly maxRetries: number;
  readonly logger: Logger;
  protected readonly fetch: Fetch;
  protected readonly defaultHeaders: Record<string, string>;
  /** The last rate-limit state seen; shared with the copies `withOptions` makes. */
  protected rateLimitState: { value: RateLimit | undefined } = { value: undefined };

  constructor(options: APIClientOptions) {
    if (!Number.isInteger(options.maxRetries) || options.maxRetries < 0) {
      throw new QueueCoreError('maxRetries must be an integer, 0 or more');
    }
    if (!(options.timeout > 0)) throw new QueueCoreError('timeout must be a positive number of milliseconds');
    this.apiKey = options.apiKey;
    this.baseURL = options.baseURL.replace(/\/+$/, '');
    this.timeout = options.timeout;
    this.maxRetries = options.maxRetries;
    this.logger = options.logger;
    this.fetch = options.fetch;
    this.defaultHeaders = options.defaultHeaders;
  }

  /**
   * The key's rate-limit state as the last answer that carried one reported it (`undefined` before any):
   * `{policy, limit, remaining, reset, window}`, seconds for `reset` and `window`.
   */
  get rateLimit(): RateLimit | undefined {
    return this.rateLimitState.value;
  }

  /** Wait before a retry. Tests override it to record the waits instead. */
  protected sleep(ms: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  /**
   * Milliseconds to wait before retry number `retriesTaken + 1`. The server's `Retry-After` wins (capped):
   * a rate-limit window frees up exactly then. Otherwise exponential backoff less up to 25 % jitter, so
   * that clients failing together do not retry together.
   */
  protected retryDelay(retriesTaken: number, headers: Headers | undefined): number {
    if (headers) {
      const retryAfter = parseRetryAfter(headers);
      if (retryAfter !== undefined) return Math.min(retryAfter * 1000, MAX_RETRY_AFTER);
    }
    const backoff = Math.min(INITIAL_RETRY_DELAY * 2 ** retriesTaken, MAX_RETRY_DELAY);
    return backoff * (1 - 0.25 * Math.random());
  }

  protected buildURL(options: FinalRequestOptions): string {
    let url = this.baseURL + options.path;
    if (options.query) {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(options.query)) {
        if (value !== undefined && value !== null) params.set(name, String(value));
      }
      const text = params.toString();
      if (text) url += `?${text}`;
    }
    return url;
  }

  protected buildHeaders(options: FinalRequestOptions): Record<string, string> {
    const headers: Record<string, string> = {
      Accept: 'application/json',
      'User-Agent': `queuecore-node/${VERSION}`,
      ...this.defaultHeaders,
    };
    if (options.authenticated !== false) headers['Authorization'] = `Bearer ${this.apiKey}`;
    if (options.idempotencyKey !== undefined) headers['Idempotency-Key'] = options.idempotencyKey;
    if (options.body !== undefined) headers['Content-Type'] = 'application/json';
    return { ...headers, ...options.headers };
  }

  /** Send one call, retrying what is safe to retry; the final 2xx answer, else an error. */
  async request<T = unknown>(options: FinalRequestOptions): Promise<APIResponse<T>> {
    const url = this.buildURL(options);
    const headers = this.buildHeaders(options);
    const body = options.body === undefined ? undefined : serialize(options.body);
    const maxRetries = options.maxRetries ?? this.maxRetries;
    const timeout = options.timeout ?? this.timeout;
    for (let retriesTaken = 0; ; retriesTaken++) {
      if (options.signal?.aborted) {
        throw new APIConnectionError('The request was aborted.', { cause: options.signal.reason });
      }
      this.logger.debug(`Request: ${options.method} ${options.path}`);
      const attempt = withTimeout(timeout, options.signal);
      let response: Response;
      try {
        response = await this.fetch(url, {
          method: options.method,
          headers,
          body,
          signal: attempt.signal,
        } as RequestInit);
      } catch (cause) {
        attempt.clear();
        if (options.signal?.aborted) {
          throw new APIConnectionError('The request was aborted.', { cause: options.signal.reason ?? cause });
        }
        const timedOut = attempt.timedOut();
        if (retriesTaken >= maxRetries) {
          throw timedOut
            ? new APITimeoutError(`Request timed out after ${timeout} ms.`, { cause })
            : new APIConnectionError(`Connection error: ${describe(cause)}`, { cause });
        }
        const delay = this.retryDelay(retriesTaken, undefined);
        this.logRetry(options, delay, timedOut ? 'timed out' : `connection error: ${describe(cause)}`);
        await this.sleep(delay);
        continue;
      }
      let text: string;
      try {
        text = await response.text();
      } catch (cause) {
        attempt.clear();
        if (retriesTaken >= maxRetries || options.signal?.aborted) {
          throw attempt.timedOut()
            ? new APITimeoutError(`Request timed out after ${timeout} ms.`, { cause })
            : new APIConnectionError(`Connection error while reading the answer: ${describe(cause)}`, { cause });
        }
        const delay = this.retryDelay(retriesTaken, undefined);
        this.logRetry(options, delay, `connection error: ${describe(cause)}`);
        await this.sleep(delay);
        continue;
      }
      attempt.clear();
      const rateLimit = parseRateLimit(response.headers);
      if (rateLimit) this.rateLimitState.value = rateLimit;
      const parsed = parseJSON(text);
      this.logger.debug(
        `Answer: ${options.method} ${options.path} ${response.status} (${response.headers.get('x-request-id') ?? '-'})`,
      );
      const final =
        response.ok ||
        options.acceptStatuses?.includes(response.status) ||
        !RETRYABLE_STATUSES.has(response.status) ||
        retriesTaken >= maxRetries;
      if (final && options.onResponse) {
        options.onResponse({
          status: response.status,
          headers: response.headers,
          requestId: response.headers.get('x-request-id') ?? undefined,
          rateLimit,
        });
      }
      if (response.ok) {
        return { status: response.status, headers: response.headers, body: parsed.value as T };
      }
      if (
        options.acceptStatuses?.includes(response.status) &&
        isObject(parsed.value) &&
        !('error' in parsed.value)
      ) {
        return { status: response.status, headers: response.headers, body: parsed.value as T };
      }
      if (!RETRYABLE_STATUSES.has(response.status) || retriesTaken >= maxRetries) {
        throw makeStatusError(response.status, response.headers, parsed.value, response.statusText);
      }
      const delay = this.retryDelay(retriesTaken, response.headers);
      this.logRetry(options, delay, `status ${response.status}`);
      await this.sleep(delay);
    }
  }

  /**
   * Open a streamed answer (Server-Sent Events): one attempt, no retries (the caller reconnects), the body
   * left unread for the caller. A refusal (non-2xx) is read and thrown as the typed error; `signal` ends
   * the stream.
   */
  async stream(options: FinalRequestOptions & { signal: AbortSignal }): Promise<Response> {
    const url = this.buildURL(options);
    const headers = { ...this.buildHeaders(options), Accept: 'text/event-stream' };
    this.logger.debug(`Request: ${options.method} ${options.path} (stream)`);
    let response: Response;
    try {
      response = await this.fetch(url, { method: options.method, headers, signal: options.signal } as RequestInit);
    } catch (cause) {
      throw new APIConnectionError(`Connection error: ${describe(cause)}`, { cause });
    }
    const rateLimit = parseRateLimit(response.headers);
    if (rateLimit) this.rateLimitState.value = rateLimit;
    if (!response.ok) {
      const parsed = parseJSON(await response.text().catch(() => ''));
      throw makeStatusError(response.status, response.headers, parsed.value, response.statusText);
    }
    return response;
  }

  /** `request`, then the answer's body as a JSON object (`APIResponseValidationError` if it is not one). */
  async requestObject<T>(options: FinalRequestOptions): Promise<T> {
    const response = await this.request<unknown>(options);
    return expectObject<T>(response);
  }

  private logRetry(options: FinalRequestOptions, delay: number, why: string): void {
    this.logger.info(`Retrying ${options.method} ${options.path} in ${(delay / 1000).toFixed(2)} seconds (${why})`);
  }
}

export function expectObject<T>(response: APIResponse<unknown>): T {
  if (!isObject(response.body)) {
    throw new APIResponseValidationError('The answer is not a JSON object.', {
      status: response.status,
      headers: response.headers,
      requestId: response.headers.get('x-request-id') ?? undefined,
      body: response.body,
    });
  }
  return response.body as T;
}

function serialize(body: unknown): string {
  const text = JSON.stringify(body, (_key, value: unknown) => {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new QueueCoreError(`The request body is not valid JSON: ${value} is not a JSON number`);
    }
    if (typeof value === 'bigint') throw new QueueCoreError('The request body is not valid JSON: a BigInt');
    return value;
  });
  if (text === undefined) throw new QueueCoreError('The request body is not valid JSON');
  return text;
}

function parseJSON(text: string): { value: unknown } {
  if (!text) return { value: undefined };
  try {
    return { value: JSON.parse(text) };
  } catch {
    return { value: undefined };
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    if (cause instanceof Error && cause.message) return `${error.message} (${cause.message})`;
    return error.message || error.name;
  }
  return String(error);
}

/** An abort signal for one attempt: fires after `ms`, or when the caller's own signal does. */
function withTimeout(ms: number, outer: AbortSignal | undefined) {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new APITimeoutError());
  }, ms);
  const onAbort = () => controller.abort(outer?.reason);
  if (outer) {
    if (outer.aborted) controller.abort(outer.reason);
    else outer.addEventListener('abort', onAbort, { once: true });
  }
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    clear: () => {
      clearTimeout(timer);
      outer?.removeEventListener('abort', onAbort);
    },
  };
}

export { APIError };
