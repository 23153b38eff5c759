/**
 * One Server-Sent Events stream, whatever the runtime offers: the global `EventSource` where it exists
 * (browsers, Node 22+ with --experimental-eventsource; no custom headers, so the consumer authenticates with
 * a short-lived `?token=`), else a reader over `fetch` (Node 18 and 20), which sends the `Authorization`
 * header and reads a refusal (status and error envelope) so that a bad key or a missing topic becomes the
 * typed error. Either way the caller gets each named event with its data and id, and one `onEnd` when the
 * stream is over; it never reconnects by itself (the consumer does, as a new member).
 */
import type { APIClient } from './api-client.js';

export interface StreamEvents {
  onEvent(event: string, data: string, id: string | undefined): void;
  /** The stream is over: closed by the server, dropped (`error`), or refused before it opened. */
  onEnd(error?: unknown): void;
}

export interface EventStream {
  close(): void;
}

/** The named events a QueueCore stream sends (an `EventSource` dispatches by name). */
const EVENTS = ['welcome', 'message', 'rebalance', 'draining', 'error'] as const;

type EventSourceLike = {
  addEventListener(type: string, listener: (event: { data?: unknown; lastEventId?: string }) => void): void;
  close(): void;
  readonly readyState: number;
};
type EventSourceClass = new (url: string) => EventSourceLike;

/** The runtime's `EventSource`, if it has one. */
export function globalEventSource(): EventSourceClass | undefined {
  const candidate = (globalThis as { EventSource?: unknown }).EventSource;
  return typeof candidate === 'function' ? (candidate as EventSourceClass) : undefined;
}

/** An `EventSource` over `url` (it holds its credential in `?token=`). */
export function openEventSource(EventSourceImpl: EventSourceClass, url: string, events: StreamEvents): EventStream {
  const source = new EventSourceImpl(url);
  let ended = false;
  const end = (error?: unknown) => {
    if (ended) return;
    ended = true;
    source.close(); // no reconnection of its own: the consumer decides
    events.onEnd(error);
  };
  for (const name of EVENTS) {
    source.addEventListener(name, (event) => {
      // `error` also fires, without data, when the connection fails or ends: that is the stream's end.
      if (name === 'error' && typeof event.data !== 'string') {
        end(new Error('the event stream closed'));
        return;
      }
      if (!ended) events.onEvent(name, String(event.data ?? ''), event.lastEventId || undefined);
    });
  }
  return { close: () => end() };
}

/** A `fetch` reader of `path` with the client's `Authorization` header; rejects with the typed refusal. */
export async function openFetchStream(client: APIClient, path: string, events: StreamEvents): Promise<EventStream> {
  const controller = new AbortController();
  const response = await client.stream({ method: 'GET', path, signal: controller.signal });
  let ended = false;
  const end = (error?: unknown) => {
    if (ended) return;
    ended = true;
    controller.abort();
    events.onEnd(error);
  };
  void read(response, events, () => ended).then(
    () => end(),
    (error: unknown) => end(error),
  );
  return { close: () => end() };
}

/** The WHATWG parsing rules, for what QueueCore sends: `event`, `data`, `id` fields; comments skipped. */
async function read(response: Response, events: StreamEvents, ended: () => boolean): Promise<void> {
  if (!response.body) return;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let name = 'message';
  let data: string[] = [];
  let id: string | undefined;
  for (;;) {
    const { value, done } = await reader.read();
    if (done || ended()) return;
    buffer += decoder.decode(value, { stream: true });
    let newline: number;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') {
        if (data.length > 0 || name !== 'message') events.onEvent(name, data.join('\n'), id);
        name = 'message';
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? '' : line.slice(colon + 1);
      if (text.startsWith(' ')) text = text.slice(1);
      if (field === 'event') name = text;
      else if (field === 'data') data.push(text);
      else if (field === 'id') id = text;
    }
  }
}
