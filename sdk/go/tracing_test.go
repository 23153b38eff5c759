package queuecore_test

import (
	"context"
	"sync"
	"testing"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// traceKey holds a test's trace context in a ctx; w3cTracer is the smallest queuecore.Tracer over it (the
// OpenTelemetry one is otelqueuecore's, tested in its own module).
type traceKey struct{}

type w3cTracer struct {
	mu        sync.Mutex
	delivered []queuecore.Delivery
	inside    map[string]string // per message id, the context its handler call's ctx carried
}

func (w *w3cTracer) Inject(ctx context.Context, headers map[string]string) {
	if tp, ok := ctx.Value(traceKey{}).(string); ok {
		headers["traceparent"] = tp
	}
}

func (w *w3cTracer) Process(ctx context.Context, d queuecore.Delivery, handle func(context.Context) error) error {
	w.mu.Lock()
	w.delivered = append(w.delivered, d)
	w.mu.Unlock()
	return handle(context.WithValue(ctx, traceKey{}, "process:"+d.Headers["traceparent"]))
}

func TestTraceContextThroughMessages(t *testing.T) {
	for _, transport := range []queuecore.Transport{queuecore.TransportWebSocket, queuecore.TransportPull} {
		t.Run(string(transport), func(t *testing.T) {
			tracer := &w3cTracer{}
			c := newClient(t, option.WithTracer(tracer))
			ctx := testCtx(t)
			topic := newTopic(t, c, 2)
			const single = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			const batch = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			const own = "00-11111111111111111111111111111111-2222222222222222-01"
			one := 1
			published, err := c.Publish(context.WithValue(ctx, traceKey{}, single), topic, "a", &queuecore.PublishParams{Partition: &one})
			if err != nil {
				t.Fatal(err)
			}
			items := []any{"b", queuecore.BatchMessage{Data: "c", Headers: map[string]string{"traceparent": own}}}
			if _, err := c.PublishBatch(context.WithValue(ctx, traceKey{}, batch), topic, items); err != nil {
				t.Fatal(err)
			}
			consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: unique("g"), StartFrom: "earliest", Transport: transport})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
					tracer.mu.Lock()
					if tracer.inside == nil {
						tracer.inside = map[string]string{}
					}
					tracer.inside[msg.ID] = ctx.Value(traceKey{}).(string)
					tracer.mu.Unlock()
					return msg.Ack()
				})
			}()
			eventually(t, "three messages handled", func() bool {
				tracer.mu.Lock()
				defer tracer.mu.Unlock()
				return len(tracer.inside) >= 3
			})
			if err := consumer.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			byData := map[string]string{}
			// By message id: the handlers of two partitions run side by side, so the two lists' orders differ.
			for _, d := range tracer.delivered {
				if d.Topic != topic || d.Group == "" || d.MessageID == "" {
					t.Fatalf("delivery %+v", d)
				}
				if d.MessageID == published.ID && (d.Partition != 1 || d.Headers["traceparent"] != single) {
					t.Fatalf("the single publish's message: %+v", d)
				}
				if tracer.inside[d.MessageID] != "process:"+d.Headers["traceparent"] {
					t.Fatalf("handler ctx %q for %+v", tracer.inside[d.MessageID], d)
				}
				byData[d.Headers["traceparent"]] = d.MessageID
			}
			for _, tp := range []string{single, batch, own} {
				if byData[tp] == "" {
					t.Fatalf("no message carried %s: %+v", tp, tracer.delivered)
				}
			}
		})
	}
}
