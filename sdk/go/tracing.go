package queuecore

import (
	"context"

	"github.com/queuecore/queuecore-go/internal/config"
)

// Tracer carries trace context through messages; set one with option.WithTracer. A publish asks it for
// the context of its ctx (sent as the W3C traceparent / tracestate request headers of a single publish,
// and in the headers of each batch item that has no traceparent of its own: the server keeps them as the
// message's headers), and a consumer runs each handler call through Process. The OpenTelemetry
// implementation is otelqueuecore.New() (module github.com/queuecore/queuecore-go/otelqueuecore).
type Tracer = config.Tracer

// Delivery is what a Tracer is told of a message handed to a consumer's handler.
type Delivery = config.Delivery

// traceContext is ctx's trace context as headers, or nil (no tracer, or no context to send).
func (c *Client) traceContext(ctx context.Context) map[string]string {
	if c.tracer == nil {
		return nil
	}
	headers := map[string]string{}
	c.tracer.Inject(ctx, headers)
	if headers["traceparent"] == "" {
		return nil
	}
	return headers
}

// withTraceContext is a message's headers with trace added, unless it carries a traceparent of its own
// (the caller's map is not changed).
func withTraceContext(headers, trace map[string]string) map[string]string {
	if trace == nil {
		return headers
	}
	if _, own := headers["traceparent"]; own {
		return headers
	}
	merged := make(map[string]string, len(headers)+len(trace))
	for k, v := range headers {
		merged[k] = v
	}
	for k, v := range trace {
		merged[k] = v
	}
	return merged
}

// run calls handler on m, through the client's Tracer when it has one.
func (k *Consumer) run(handler MessageHandler, m *Message) error {
	tracer := k.c.tracer
	if tracer == nil {
		return handler(k.hctx, m)
	}
	delivery := Delivery{Topic: m.Topic, Group: k.params.Group, MessageID: m.ID, Partition: m.Partition, Headers: m.Headers}
	return tracer.Process(k.hctx, delivery, func(ctx context.Context) error { return handler(ctx, m) })
}
