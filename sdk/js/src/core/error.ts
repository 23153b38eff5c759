/**
 * Every error the SDK throws.
 *
 *     QueueCoreError
 *      ├── APIError                       anything that went wrong talking to the API
 *      │    ├── APIStatusError            the API answered a non-2xx status (any other status)
 *      │    │    ├── BadRequestError           400 INVALID_REQUEST, OFFSET_OUT_OF_RANGE (see `details`)
 *      │    │    ├── AuthenticationError       401 INVALID_API_KEY
 *      │    │    ├── PermissionDeniedError     403 FORBIDDEN
 *      │    │    ├── NotFoundError             404 TOPIC_NOT_FOUND, GROUP_NOT_FOUND, MESSAGE_NOT_FOUND, ...
 *      │    │    ├── ConflictError             409 TOPIC_ALREADY_EXISTS, GROUP_ACTIVE, STALE_GENERATION, ...
 *      │    │    ├── PayloadTooLargeError      413 PAYLOAD_TOO_LARGE
 *      │    │    ├── RateLimitError            429 RATE_LIMIT_EXCEEDED (`retryAfter`)
 *      │    │    ├── InternalServerError       500 INTERNAL_ERROR (and any other 5xx but 503)
 *      │    │    └── ServiceUnavailableError   503 SERVICE_UNAVAILABLE
 *      │    ├── APIConnectionError        no answer: refused, reset, DNS, TLS, ...
 *      │    │    └── APITimeoutError      no answer in time
 *      │    └── APIResponseValidationError  a 2xx answer that is not what the API promises
 *      └── AckError                       a consumer's ack/nack/extend the server refused (ACK_EXPIRED)
 *
 * Client misuse (no API key, a bad option) throws `QueueCoreError` itself.
 *
 * Every `APIError` carries `code`, `status`, `requestId` and `message`; `toString()` leads with the request
 * id, which is what support needs.
 */

/** One field of a validation error's `details`. */
export interface ErrorDetail {
  field?: string;
  issue?: string;
  [key: string]: unknown;
}

export class QueueCoreError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class APIError extends QueueCoreError {
  /** The API's machine-readable code, e.g. `TOPIC_NOT_FOUND`; `undefined` when there was no answer. */
  readonly code: string | undefined;
  /** The HTTP status; `undefined` when there was no answer. */
  readonly status: number | undefined;
  /** The `X-Request-Id` of the answer: quote it to support. */
  readonly requestId: string | undefined;
  /** The answer's headers, when there was an answer. */
  readonly headers: Headers | undefined;
  /** The decoded JSON body of the answer, if any. */
  readonly body: unknown;
  /** For validation errors: `[{field, issue}]`. */
  readonly details: ErrorDetail[] | undefined;

  constructor(
    message: string,
    init: {
      status?: number | undefined;
      code?: string | undefined;
      requestId?: string | undefined;
      headers?: Headers | undefined;
      body?: unknown;
      details?: ErrorDetail[] | undefined;
      cause?: unknown;
    } = {},
  ) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.requestId = init.requestId;
    this.headers = init.headers;
    this.body = init.body;
    this.details = init.details;
  }

  /** The key's rate-limit state the answer reported (`RateLimit`/`RateLimit-Policy`, else the older
   * `RateLimit-*` fields); `undefined` without an answer or on routes without a limit. */
  get rateLimit(): RateLimit | undefined {
    return this.headers ? parseRateLimit(this.headers) : undefined;
  }

  override toString(): string {
    const head = [this.status, this.code].filter((part) => part !== undefined && part !== '').join(' ');
    const text = head ? `${head}: ${this.message}` : this.message;
    return this.requestId ? `${this.name}: Request ${this.requestId}: ${text}` : `${this.name}: ${text}`;
  }
}

/** The API answered a non-2xx status (a status without a class of its own is this class itself). */
export class APIStatusError extends APIError {}
/** 400: the request was malformed or a value is out of range (`details` says which field). */
export class BadRequestError extends APIStatusError {}
/** 401: the API key is missing, malformed, unknown or revoked. */
export class AuthenticationError extends APIStatusError {}
/** 403: the key may not do this. */
export class PermissionDeniedError extends APIStatusError {}
/** 404: no such topic, group, message, member or route. */
export class NotFoundError extends APIStatusError {}
/** 409: the call conflicts with the current state (the topic exists, the group is active, ...). */
export class ConflictError extends APIStatusError {}
/** 413: a message over 256 KiB, or a request body over 10 MiB. */
export class PayloadTooLargeError extends APIStatusError {}
/** 429: over the key's rate limit; thrown once the client's retries are used up. */
export class RateLimitError extends APIStatusError {
  /** Seconds the API asked to wait (its `Retry-After`), if it said. */
  get retryAfter(): number | undefined {
    return this.headers ? parseRetryAfter(this.headers) : undefined;
  }
}
/** 500 (and any other 5xx but 503): a fault on the server's side; quote the request id. */
export class InternalServerError extends APIStatusError {}
/** 503: a dependency of the service is down, or a publish could not be made durable. Transient. */
export class ServiceUnavailableError extends APIStatusError {}

/** No answer: the connection could not be made, or broke before the answer arrived. */
export class APIConnectionError extends APIError {
  constructor(message = 'Connection error.', options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
  }
}

/** No answer within the client's timeout. */
export class APITimeoutError extends APIConnectionError {
  constructor(message = 'Request timed out.', options: { cause?: unknown } = {}) {
    super(message, options);
  }
}

/** A 2xx answer whose body is not what the API promises (a proxy in the way, or a version skew). */
export class APIResponseValidationError extends APIError {}

/** The server refused to settle a consumed message (e.g. `ACK_EXPIRED`: it was or will be redelivered). */
export class AckError extends QueueCoreError {
  readonly code: string;
  readonly messageId: string;
  /** What was refused: `'ack'`, `'nack'` or `'extend'`. */
  readonly action: 'ack' | 'nack' | 'extend';
  constructor(messageId: string, code: string, action: 'ack' | 'nack' | 'extend' = 'ack') {
    super(`The ${action} of ${messageId} failed: ${code}`);
    this.code = code;
    this.messageId = messageId;
    this.action = action;
  }
}

const BY_STATUS: Record<number, typeof APIError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  429: RateLimitError,
  500: InternalServerError,
  503: ServiceUnavailableError,
};

/** The error for a non-2xx answer, read from the `{"error": {...}}` envelope when there is one. */
export function makeStatusError(status: number, headers: Headers, body: unknown, statusText = ''): APIError {
  let code: string | undefined;
  let message = '';
  let details: ErrorDetail[] | undefined;
  let requestId = headers.get('x-request-id') ?? undefined;
  const error = isObject(body) ? body['error'] : undefined;
  if (isObject(error)) {
    if (typeof error['code'] === 'string') code = error['code'];
    if (typeof error['message'] === 'string') message = error['message'];
    if (Array.isArray(error['details'])) details = error['details'] as ErrorDetail[];
    if (!requestId && typeof error['requestId'] === 'string') requestId = error['requestId'];
  }
  if (!message) message = `HTTP ${status}${statusText ? ` ${statusText}` : ''}`;
  const cls = BY_STATUS[status] ?? (status >= 500 ? InternalServerError : APIStatusError);
  return new cls(message, { status, code, requestId, headers, body, details });
}

/** `Retry-After` as seconds: a number, or an HTTP date. `undefined` if absent or unreadable. */
export function parseRetryAfter(headers: Headers): number | undefined {
  const raw = headers.get('retry-after');
  if (raw === null) return undefined;
  const value = raw.trim();
  if (value === '') return undefined;
  let seconds = Number(value);
  if (Number.isNaN(seconds)) {
    const when = Date.parse(value);
    if (Number.isNaN(when)) return undefined;
    seconds = (when - Date.now()) / 1000;
  }
  if (!Number.isFinite(seconds)) return undefined;
  return Math.max(0, seconds);
}

/**
 * The key's rate-limit state for one category, as an answer reported it: from the IETF draft's structured
 * fields (`RateLimit-Policy: "publish";q=100;w=1`, `RateLimit: "publish";r=37;t=1`) when present, else from
 * `RateLimit-Limit`/`-Remaining`/`-Reset`. Every QueueCore SDK reads it the same way.
 */
export interface RateLimit {
  /** The limit's category (`'publish'`, `'consume'`, `'admin'`); `undefined` when only the older fields came. */
  policy: string | undefined;
  /** Requests allowed per window. */
  limit: number | undefined;
  /** Requests left in the current window. */
  remaining: number | undefined;
  /** Seconds until the window resets. */
  reset: number | undefined;
  /** The window's length in seconds (`w`). */
  window: number | undefined;
}

function splitOutsideQuotes(text: string, sep: string): string[] {
  const parts: string[] = [];
  let current = '';
  let quoted = false;
  let escaped = false;
  for (const char of text) {
    if (escaped) escaped = false;
    else if (char === '\\' && quoted) escaped = true;
    else if (char === '"') quoted = !quoted;
    else if (char === sep && !quoted) {
      parts.push(current.trim());
      current = '';
      continue;
    }
    current += char;
  }
  parts.push(current.trim());
  return parts;
}

function sfMembers(value: string | null): { name: string; params: Record<string, string> }[] {
  if (!value) return [];
  const members: { name: string; params: Record<string, string> }[] = [];
  for (const member of splitOutsideQuotes(value, ',')) {
    if (!member) continue;
    const [first = '', ...rest] = splitOutsideQuotes(member, ';');
    let name = first;
    if (name.length >= 2 && name.startsWith('"') && name.endsWith('"')) {
      name = name.slice(1, -1).replace(/\\(["\\])/g, '$1');
    }
    const params: Record<string, string> = {};
    for (const param of rest) {
      const at = param.indexOf('=');
      const key = (at < 0 ? param : param.slice(0, at)).trim().toLowerCase();
      params[key] = at < 0 ? '' : param.slice(at + 1).trim();
    }
    members.push({ name, params });
  }
  return members;
}

function sfNumber(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined || value.trim() === '') return undefined;
  const number = Number(value);
  return Number.isFinite(number) && number >= 0 ? number : undefined;
}

function sfInteger(value: string | null | undefined): number | undefined {
  const number = sfNumber(value);
  return number === undefined ? undefined : Math.trunc(number);
}

/** The rate-limit state of an answer's headers; `undefined` when it carries none. */
export function parseRateLimit(headers: Headers): RateLimit | undefined {
  const [current] = sfMembers(headers.get('ratelimit'));
  if (current) {
    const policy = sfMembers(headers.get('ratelimit-policy')).find((p) => p.name === current.name);
    return {
      policy: current.name || undefined,
      limit: policy ? sfInteger(policy.params['q']) : sfInteger(headers.get('ratelimit-limit')),
      remaining: sfInteger(current.params['r']),
      reset: sfNumber(current.params['t']),
      window: policy ? sfNumber(policy.params['w']) : undefined,
    };
  }
  const limit = headers.get('ratelimit-limit');
  const remaining = headers.get('ratelimit-remaining');
  const reset = headers.get('ratelimit-reset');
  if (limit === null && remaining === null && reset === null) return undefined;
  return {
    policy: undefined,
    limit: sfInteger(limit),
    remaining: sfInteger(remaining),
    reset: sfNumber(reset),
    window: undefined,
  };
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
