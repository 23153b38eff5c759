// Package otelqueuecore carries OpenTelemetry trace context through QueueCore messages. It is its own module,
// so that the SDK (github.com/queuecore/queuecore-go) depends on nothing more:
//
//	otel.SetTracerProvider(tp)
//	otel.SetTextMapPropagator(propagation.TraceContext{})
//	client, err := queuecore.NewClient(option.WithTracer(otelqueuecore.New()))
//
// Publishes then send the context of their ctx (W3C traceparent / tracestate: the request headers of a
// single publish, each batch item's headers), and consumers run every handler call inside a
// "process <topic>" span (kind consumer) whose parent is the message's creation context, also linked to it,
// with the OpenTelemetry messaging attributes. The handler's ctx carries that span.
package otelqueuecore

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	queuecore "github.com/queuecore/queuecore-go"
)

const instrumentation = "github.com/queuecore/queuecore-go/otelqueuecore"

// Tracer is the OpenTelemetry queuecore.Tracer; make it with New.
type Tracer struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
}

// Option configures New.
type Option func(*Tracer)

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider() at each call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(t *Tracer) { t.provider = tp }
}

// WithPropagator sets how context is written to and read from message headers. Default: W3C Trace Context
// (the server's contract) together with otel.GetTextMapPropagator() at each call.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(t *Tracer) { t.propagator = p }
}

// New makes the tracer to pass to option.WithTracer.
func New(opts ...Option) *Tracer {
	t := &Tracer{}
	for _, opt := range opts {
		opt(t)
	}
	return t
}

var _ queuecore.Tracer = (*Tracer)(nil)

func (t *Tracer) propagation() propagation.TextMapPropagator {
	if t.propagator != nil {
		return t.propagator
	}
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, otel.GetTextMapPropagator())
}

func (t *Tracer) tracer() trace.Tracer {
	provider := t.provider
	if provider == nil {
		provider = otel.GetTracerProvider()
	}
	return provider.Tracer(instrumentation, trace.WithInstrumentationVersion(queuecore.Version))
}

// Inject writes ctx's span context into headers (traceparent, tracestate, and what else the propagator writes).
func (t *Tracer) Inject(ctx context.Context, headers map[string]string) {
	t.propagation().Inject(ctx, carrier(headers))
}

// Process runs handle inside a "process <topic>" span of the message's creation context.
func (t *Tracer) Process(ctx context.Context, d queuecore.Delivery, handle func(context.Context) error) error {
	ctx = t.propagation().Extract(ctx, carrier(d.Headers))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "queuecore"),
			attribute.String("messaging.destination.name", d.Topic),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.consumer.group.name", d.Group),
			attribute.String("messaging.message.id", d.MessageID),
			attribute.String("messaging.destination.partition.id", itoa(d.Partition)),
		),
	}
	if created := trace.SpanContextFromContext(ctx); created.IsValid() && created.IsRemote() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: created}))
	}
	ctx, span := t.tracer().Start(ctx, "process "+d.Topic, opts...)
	defer span.End()
	err := handle(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// carrier is a message's (or a request's) headers as a TextMapCarrier.
type carrier map[string]string

func (c carrier) Get(key string) string { return c[key] }

func (c carrier) Set(key, value string) { c[key] = value }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

func itoa(n int) string {
	return attribute.IntValue(n).Emit()
}
