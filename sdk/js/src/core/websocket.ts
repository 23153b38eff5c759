/**
 * One WebSocket connection, whatever the runtime offers: Node's global `WebSocket` where it exists (Node 22+,
 * browsers' API: no custom headers, so the consumer authenticates with a short-lived `?token=`), else the
 * `ws` package (Node 18 and 20), which sends the `Authorization` header and reads an upgrade's refusal
 * (status and error envelope) so that a bad key or a missing topic becomes the typed error.
 */
import type WsWebSocket from 'ws';
import type { IncomingMessage } from 'node:http';

import { makeStatusError, QueueCoreError } from './error.js';

export interface SocketEvents {
  onMessage(text: string): void;
  onClose(code: number, reason: string): void;
}

export interface Socket {
  send(text: string): void;
  close(code?: number): void;
  /** Resolves once the socket is closed (or at once if it is). */
  closed(): Promise<void>;
}

export interface OpenSocket {
  (url: string, headers: Record<string, string>, events: SocketEvents, timeoutMs: number): Promise<Socket>;
  /** `header`: the key goes in `Authorization`; `token`: in `?token=` (the browser API sets no headers). */
  readonly auth: 'header' | 'token';
}

/** No WebSocket implementation here: a `'websocket'` consumer falls back to REST pull. */
export class WebSocketUnavailableError extends QueueCoreError {}

/** Thrown when the connection could not be opened (no answer, or not an upgrade we can read). */
export class SocketOpenError extends Error {}

const PING_INTERVAL = 10_000;

type WsClass = typeof WsWebSocket;

let wsModule: Promise<unknown> | undefined;

async function loadWs(): Promise<WsClass> {
  wsModule ??= import('ws');
  let mod: { default?: WsClass } & WsClass;
  try {
    mod = (await wsModule) as { default?: WsClass } & WsClass;
  } catch (cause) {
    throw new WebSocketUnavailableError(
      'No WebSocket client: this runtime has no global WebSocket and the `ws` package cannot be loaded',
      { cause },
    );
  }
  return mod.default ?? mod;
}

/** The `ws` package: headers, readable refusals, pings that notice a dead peer. */
async function openWs(url: string, headers: Record<string, string>, events: SocketEvents, timeoutMs: number): Promise<Socket> {
  const WebSocketClass = await loadWs();
  return new Promise<Socket>((resolve, reject) => {
    const sock = new WebSocketClass(url, { headers, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024, handshakeTimeout: timeoutMs });
    let opened = false;
    let settled = false;
    let pinger: ReturnType<typeof setInterval> | undefined;
    let alive = true;
    const closed = new Promise<void>((done) => {
      sock.on('close', (code: number, reason: Buffer) => {
        if (pinger) clearInterval(pinger);
        done();
        if (opened) events.onClose(code, reason.toString());
        else if (!settled) {
          settled = true;
          reject(new SocketOpenError(`WebSocket closed before opening (code ${code})`));
        }
      });
    });
    sock.on('unexpected-response', (_req: unknown, res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch {
          body = undefined;
        }
        const answerHeaders = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          if (typeof value === 'string') answerHeaders.set(name, value);
          else if (Array.isArray(value)) answerHeaders.set(name, value.join(', '));
        }
        settled = true;
        reject(makeStatusError(res.statusCode ?? 0, answerHeaders, body, res.statusMessage ?? ''));
        sock.terminate();
      });
      res.on('error', (err: Error) => {
        settled = true;
        reject(new SocketOpenError(err.message));
      });
    });
    sock.on('error', (err: Error) => {
      if (!opened && !settled) {
        settled = true;
        reject(new SocketOpenError(err.message));
      }
    });
    sock.on('pong', () => {
      alive = true;
    });
    sock.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
      if (isBinary) return;
      const text = Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.from(data as Buffer).toString('utf8');
      events.onMessage(text);
    });
    sock.on('open', () => {
      opened = true;
      settled = true;
      pinger = setInterval(() => {
        if (!alive) {
          sock.terminate(); // no pong for a whole interval: the peer is gone
          return;
        }
        alive = false;
        try {
          sock.ping();
        } catch {
          /* closing */
        }
      }, PING_INTERVAL);
      pinger.unref?.();
      resolve({
        send: (text) => sock.send(text),
        close: (code = 1000) => {
          try {
            sock.close(code);
          } catch {
            sock.terminate();
          }
        },
        closed: () => closed,
      });
    });
  });
}

interface BrowserLikeWebSocket {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number): void;
  addEventListener(type: string, listener: (event: any) => void): void;
}

type BrowserLikeWebSocketClass = new (url: string) => BrowserLikeWebSocket;

/** The runtime's global WebSocket (the WHATWG API): no headers, so the URL carries a token. */
function openGlobal(Ctor: BrowserLikeWebSocketClass) {
  return (url: string, _headers: Record<string, string>, events: SocketEvents, timeoutMs: number): Promise<Socket> =>
    new Promise<Socket>((resolve, reject) => {
      const sock = new Ctor(url);
      let opened = false;
      let done: () => void = () => {};
      const closed = new Promise<void>((resolveClosed) => {
        done = resolveClosed;
      });
      const timer = setTimeout(() => {
        if (!opened) {
          reject(new SocketOpenError('WebSocket opening timed out'));
          sock.close();
        }
      }, timeoutMs);
      sock.addEventListener('open', () => {
        opened = true;
        clearTimeout(timer);
        resolve({
          send: (text) => sock.send(text),
          close: (code = 1000) => sock.close(code),
          closed: () => closed,
        });
      });
      sock.addEventListener('message', (event: { data: unknown }) => {
        if (typeof event.data === 'string') events.onMessage(event.data);
      });
      sock.addEventListener('close', (event: { code: number; reason: string }) => {
        clearTimeout(timer);
        done();
        if (opened) events.onClose(event.code, event.reason);
        else reject(new SocketOpenError(`WebSocket closed before opening (code ${event.code})`));
      });
      sock.addEventListener('error', () => {
        /* a close event follows */
      });
    });
}

/** The opener this runtime should use: the global WebSocket if there is one, else the `ws` package. */
export function defaultOpener(): OpenSocket {
  const Ctor = (globalThis as { WebSocket?: BrowserLikeWebSocketClass }).WebSocket;
  if (typeof Ctor === 'function') return Object.assign(openGlobal(Ctor), { auth: 'token' as const });
  return Object.assign(openWs, { auth: 'header' as const });
}

/** The `ws` package's opener, whatever the runtime has. */
export function wsOpener(): OpenSocket {
  return Object.assign(openWs, { auth: 'header' as const });
}
