package config

import "context"

// Tracer carries trace context through messages (see queuecore.Tracer, which is this type).
type Tracer interface {
	// Inject adds ctx's trace context to headers as W3C traceparent / tracestate (nothing without one).
	Inject(ctx context.Context, headers map[string]string)
	// Process runs handle for a delivered message inside a span of the message's creation context
	// (extracted from its headers) and returns what handle returns.
	Process(ctx context.Context, delivery Delivery, handle func(ctx context.Context) error) error
}

// Delivery is what a Tracer is told of a message handed to a consumer's handler.
type Delivery struct {
	Topic     string
	Group     string
	MessageID string
	Partition int
	Headers   map[string]string
}
