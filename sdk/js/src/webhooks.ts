/**
 * Verify the deliveries of a push group (Standard Webhooks signatures).
 *
 * A push group POSTs each message to your URL signed with the group's secret (`whsec_…`, answered once by
 * the `consumerGroups.update` that set `push`, or by `rotatePushSecret`):
 *
 * ```ts
 * import { verifyWebhook } from '@queuecore/sdk';
 *
 * app.post('/hooks/queuecore', express.raw({ type: '*\/*' }), async (req, res) => {
 *   const data = await verifyWebhook(req.body, req.headers, process.env.QUEUECORE_PUSH_SECRET!);
 *   res.sendStatus(204);
 * });
 * ```
 *
 * The signature is `v1,<base64 HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>` keyed by the
 * base64-decoded secret after `whsec_`; during a rotation `webhook-signature` carries one signature per
 * secret, space-separated, and one match is enough. A timestamp more than `tolerance` seconds away from now
 * is refused (replays). Web Crypto does the HMAC, so this runs in Node.js, Deno, workers and browsers.
 */
import { QueueCoreError } from './core/error.js';

/** Seconds a delivery's `webhook-timestamp` may be away from now (five minutes). */
export const DEFAULT_WEBHOOK_TOLERANCE = 300;

const PREFIX = 'whsec_';
const encoder = new TextEncoder();

/** A delivery that is not signed by the secret (or too old, or missing a header). */
export class WebhookVerificationError extends QueueCoreError {}

export type WebhookHeaders =
  | Headers
  | Record<string, string | string[] | undefined>
  | { get(name: string): string | null };

export interface VerifyWebhookOptions {
  /** Seconds the timestamp may differ from now; `null` skips that check. Default 300. */
  tolerance?: number | null;
  /** Now, in unix seconds (tests). */
  now?: number;
}

// The part of Web Crypto used here (the SDK compiles without the DOM library).
interface HmacSubtle {
  importKey(format: 'raw', key: Uint8Array, algorithm: { name: 'HMAC'; hash: 'SHA-256' }, extractable: false, usages: ['sign']): Promise<unknown>;
  sign(algorithm: 'HMAC', key: unknown, data: Uint8Array): Promise<ArrayBuffer>;
}

async function subtle(): Promise<HmacSubtle> {
  const web = (globalThis as { crypto?: { subtle?: HmacSubtle } }).crypto;
  if (web?.subtle) return web.subtle;
  const nodeCrypto = (await import('node:crypto')) as unknown as { webcrypto: { subtle: HmacSubtle } };
  return nodeCrypto.webcrypto.subtle;
}

function keyBytes(secret: string | Uint8Array): Uint8Array {
  if (typeof secret !== 'string') return secret;
  const b64 = secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret;
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) {
    throw new WebhookVerificationError('the secret is not a whsec_… signing secret');
  }
  const raw = atob(b64);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function toBase64(bytes: ArrayBuffer): string {
  let text = '';
  for (const b of new Uint8Array(bytes)) text += String.fromCharCode(b);
  return btoa(text);
}

function bodyBytes(payload: string | Uint8Array | ArrayBuffer): Uint8Array {
  if (typeof payload === 'string') return encoder.encode(payload);
  return payload instanceof Uint8Array ? payload : new Uint8Array(payload);
}

async function hmac(key: Uint8Array, data: Uint8Array): Promise<string> {
  const crypto = await subtle();
  const imported = await crypto.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return toBase64(await crypto.sign('HMAC', imported, data));
}

function signed(messageId: string, timestamp: number, body: Uint8Array): Uint8Array {
  const head = encoder.encode(`${messageId}.${timestamp}.`);
  const out = new Uint8Array(head.length + body.length);
  out.set(head);
  out.set(body, head.length);
  return out;
}

/** The `v1,<base64>` signature of `payload` sent as `messageId` at `timestamp` (unix seconds). */
export async function signWebhook(
  secret: string | Uint8Array,
  messageId: string,
  timestamp: number,
  payload: string | Uint8Array | ArrayBuffer,
): Promise<string> {
  return `v1,${await hmac(keyBytes(secret), signed(messageId, timestamp, bodyBytes(payload)))}`;
}

function header(headers: WebhookHeaders, name: string): string {
  let value: string | string[] | null | undefined;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    value = (headers as { get(name: string): string | null }).get(name);
  } else {
    const record = headers as Record<string, string | string[] | undefined>;
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  const text = Array.isArray(value) ? value.join(' ') : value;
  if (!text) throw new WebhookVerificationError(`missing the ${name} header`);
  return text;
}

function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * Check a delivery's signature and timestamp; resolve to its body parsed as JSON. `secret`: the group's
 * `whsec_…` secret, or several while you switch to a rotated one. Rejects with `WebhookVerificationError`.
 */
export async function verifyWebhook<T = unknown>(
  payload: string | Uint8Array | ArrayBuffer,
  headers: WebhookHeaders,
  secret: string | Uint8Array | Array<string | Uint8Array>,
  options: VerifyWebhookOptions = {},
): Promise<T> {
  const body = bodyBytes(payload);
  const messageId = header(headers, 'webhook-id');
  const stamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!/^\d+$/.test(stamp)) throw new WebhookVerificationError('webhook-timestamp is not a number of seconds');
  const timestamp = Number(stamp);
  const tolerance = options.tolerance === undefined ? DEFAULT_WEBHOOK_TOLERANCE : options.tolerance;
  if (tolerance !== null) {
    const now = options.now ?? Math.floor(Date.now() / 1000);
    if (timestamp < now - tolerance) throw new WebhookVerificationError('the delivery is too old (webhook-timestamp)');
    if (timestamp > now + tolerance) {
      throw new WebhookVerificationError('the delivery is dated in the future (webhook-timestamp)');
    }
  }
  const secrets = Array.isArray(secret) ? secret : [secret];
  const data = signed(messageId, timestamp, body);
  const expected = await Promise.all(secrets.map((s) => hmac(keyBytes(s), data)));
  for (const entry of signatures.split(' ')) {
    const comma = entry.indexOf(',');
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    const value = entry.slice(comma + 1);
    if (expected.some((want) => constantTimeEqual(value, want))) {
      const text = new TextDecoder().decode(body);
      try {
        return (text ? JSON.parse(text) : null) as T;
      } catch {
        return text as T;
      }
    }
  }
  throw new WebhookVerificationError('no signature matches the secret');
}
