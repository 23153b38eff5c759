package option

import "github.com/queuecore/queuecore-go/internal/config"

// WithTracer carries trace context through messages: publishes send the context of their ctx (W3C
// traceparent / tracestate), consumers run each handler call through the tracer (a "process" span of the
// message's context). The OpenTelemetry implementation is otelqueuecore.New(), in its own module
// (github.com/queuecore/queuecore-go/otelqueuecore) so that the SDK itself depends on nothing more.
func WithTracer(t config.Tracer) RequestOption {
	return func(c *config.Config) error {
		c.Tracer = t
		return nil
	}
}
