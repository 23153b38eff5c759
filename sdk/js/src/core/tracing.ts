/**
 * Trace context through messages, with OpenTelemetry when `@opentelemetry/api` is installed (an optional peer
 * dependency: nothing happens without it, and with it but no SDK registered spans are non-recording).
 *
 * Publishing injects the active span's W3C context: a single publish as the `traceparent` / `tracestate`
 * request headers (the server keeps them as the message's headers), a batch into each item's `headers`
 * (unless the caller set a `traceparent` there). A consumer runs each `'message'` handler inside a
 * `process <topic>` span (kind CONSUMER) whose parent is the message's creation context, also linked to it
 * as the messaging semantic conventions ask. The W3C format is written and read here, not through the
 * globally registered propagator: it is the server's contract whatever else the application propagates.
 *
 * The API is loaded once, lazily (`import()`, so the ESM and CommonJS builds both find it), and never
 * appears in this package's type declarations.
 */
import type * as otel from '@opentelemetry/api';

import { VERSION } from '../version.js';

type Api = typeof otel;

let loading: Promise<Api | null> | undefined;

function loadApi(): Promise<Api | null> {
  loading ??= import('@opentelemetry/api').then(
    (module) => {
      // Its named exports, or (loaded as CommonJS by an older resolver) the whole module as `default`.
      const loaded = module as unknown as Api & { default?: Api };
      return loaded.SpanKind !== undefined ? loaded : (loaded.default ?? null);
    },
    () => null,
  );
  return loading;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The active span's `traceparent` (and `tracestate`), or undefined without OpenTelemetry or a valid span. */
export async function currentTraceContext(): Promise<Record<string, string> | undefined> {
  const api = await loadApi();
  const span = api?.trace.getActiveSpan();
  if (!api || !span) return undefined;
  const context = span.spanContext();
  if (!api.trace.isSpanContextValid(context)) return undefined;
  const carrier: Record<string, string> = {
    traceparent: `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, '0')}`,
  };
  const state = context.traceState?.serialize();
  if (state) carrier['tracestate'] = state;
  return carrier;
}

/** A message's headers with `context` added, unless it carries a `traceparent` of its own. */
export function withTraceContext(
  headers: Record<string, string> | undefined,
  context: Record<string, string> | undefined,
): Record<string, string> | undefined {
  if (context === undefined || (headers !== undefined && 'traceparent' in headers)) return headers;
  return { ...headers, ...context };
}

function extract(api: Api, headers: Record<string, string> | undefined): otel.SpanContext | undefined {
  const match = TRACEPARENT.exec((headers?.['traceparent'] ?? '').trim());
  if (!match || match[1] === 'ff') return undefined;
  const context: otel.SpanContext = {
    traceId: match[2]!,
    spanId: match[3]!,
    traceFlags: parseInt(match[4]!, 16),
    isRemote: true,
  };
  const state = headers?.['tracestate'];
  if (state) context.traceState = api.createTraceState(state);
  return api.trace.isSpanContextValid(context) ? context : undefined;
}

/** What `processing` needs of a delivered message. */
export interface TracedMessage {
  readonly id: string;
  readonly topic: string;
  readonly partition: number;
  readonly headers: Record<string, string>;
}

/**
 * Run `handler` inside a `process <topic>` span of the message's creation context (its parent and link); a
 * thrown error marks the span and is thrown on.
 */
export async function processing<R>(message: TracedMessage, group: string, handler: () => Promise<R>): Promise<R> {
  const api = await loadApi();
  if (!api) return handler();
  const created = extract(api, message.headers);
  const active = api.context.active();
  const parent = created ? api.trace.setSpanContext(active, created) : active;
  const tracer = api.trace.getTracer('queuecore', VERSION);
  const options: otel.SpanOptions = {
    kind: api.SpanKind.CONSUMER,
    attributes: {
      'messaging.system': 'queuecore',
      'messaging.destination.name': message.topic,
      'messaging.operation.name': 'process',
      'messaging.operation.type': 'process',
      'messaging.consumer.group.name': group,
      'messaging.message.id': message.id,
      'messaging.destination.partition.id': String(message.partition),
    },
    links: created ? [{ context: created }] : [],
  };
  return tracer.startActiveSpan(`process ${message.topic}`, options, parent, async (span) => {
    try {
      return await handler();
    } catch (error) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      throw error;
    } finally {
      span.end();
    }
  });
}
