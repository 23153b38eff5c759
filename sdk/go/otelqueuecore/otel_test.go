package otelqueuecore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
	"github.com/queuecore/queuecore-go/otelqueuecore"
)

const messageTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func provider() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	recorder := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)), recorder
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// seen is what a loopback server answering publishes received.
type seen struct {
	mu      sync.Mutex
	headers []http.Header
	bodies  []map[string]any
}

func publishServer(t *testing.T) (*httptest.Server, *seen) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		s.mu.Lock()
		s.headers, s.bodies = append(s.headers, r.Header.Clone()), append(s.bodies, body)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		item := `{"id":"msg_1","offset":0,"partition":0,"timestamp":"2026-01-01T00:00:00.000Z"}`
		if messages, ok := body["messages"].([]any); ok {
			fmt.Fprintf(w, `{"count":%d,"latency":1,"durability":"fsync","messages":[`, len(messages))
			for i := range messages {
				if i > 0 {
					io.WriteString(w, ",")
				}
				io.WriteString(w, item)
			}
			io.WriteString(w, "]}")
			return
		}
		io.WriteString(w, `{"id":"msg_1","offset":0,"partition":0,"timestamp":"2026-01-01T00:00:00.000Z","latency":1,"durability":"fsync"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, s
}

func TestPublishInjectsTheContextOfCtx(t *testing.T) {
	tp, _ := provider()
	srv, got := publishServer(t)
	client, err := queuecore.NewClient(option.WithAPIKey("pq_test_sk_unit"), option.WithBaseURL(srv.URL),
		option.WithTracer(otelqueuecore.New(otelqueuecore.WithTracerProvider(tp))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "checkout")
	if _, err := client.Publish(ctx, "orders", 1, nil); err != nil {
		t.Fatal(err)
	}
	own := map[string]string{"traceparent": messageTraceparent}
	batch := []any{1, queuecore.BatchMessage{Data: 2, Headers: map[string]string{"tenant": "a"}}, queuecore.BatchMessage{Data: 3, Headers: own}}
	if _, err := client.PublishBatch(ctx, "orders", batch); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Publish(context.Background(), "orders", 1, nil); err != nil {
		t.Fatal(err)
	}
	span.End()
	want := traceparent(span.SpanContext())
	if h := got.headers[0].Get("traceparent"); h != want {
		t.Fatalf("single publish: traceparent %q, want %q", h, want)
	}
	if _, ok := got.bodies[0]["headers"]; ok {
		t.Fatalf("single publish: the context went into the message's headers, not the request's")
	}
	items := got.bodies[1]["messages"].([]any)
	for i, want := range []map[string]any{
		{"traceparent": want},
		{"tenant": "a", "traceparent": want},
		{"traceparent": messageTraceparent},
	} {
		headers := items[i].(map[string]any)["headers"].(map[string]any)
		if fmt.Sprint(headers) != fmt.Sprint(want) {
			t.Fatalf("batch item %d: headers %v, want %v", i, headers, want)
		}
	}
	if own["traceparent"] != messageTraceparent || len(own) != 1 {
		t.Fatalf("the caller's headers were changed: %v", own)
	}
	if h := got.headers[2].Get("traceparent"); h != "" {
		t.Fatalf("a publish outside any span sent traceparent %q", h)
	}
}

func TestProcessRunsTheHandlerInASpanOfTheMessageContext(t *testing.T) {
	tp, recorder := provider()
	tracer := otelqueuecore.New(otelqueuecore.WithTracerProvider(tp))
	delivery := queuecore.Delivery{Topic: "orders", Group: "billing", MessageID: "msg_abc", Partition: 2,
		Headers: map[string]string{"traceparent": messageTraceparent, "tracestate": "vendor=1"}}
	var inside trace.SpanContext
	err := tracer.Process(context.Background(), delivery, func(ctx context.Context) error {
		inside = trace.SpanContextFromContext(ctx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := recorder.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	span := spans[0]
	if span.Name() != "process orders" || span.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("span %q of kind %v", span.Name(), span.SpanKind())
	}
	if span.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		span.Parent().SpanID().String() != "b7ad6b7169203331" || !span.Parent().IsRemote() {
		t.Fatalf("not a child of the message's context: %v, parent %v", span.SpanContext(), span.Parent())
	}
	if links := span.Links(); len(links) != 1 || links[0].SpanContext.SpanID().String() != "b7ad6b7169203331" ||
		links[0].SpanContext.TraceState().Get("vendor") != "1" {
		t.Fatalf("links %v", links)
	}
	attributes := map[string]string{}
	for _, kv := range span.Attributes() {
		attributes[string(kv.Key)] = kv.Value.Emit()
	}
	want := map[string]string{
		"messaging.system":                   "queuecore",
		"messaging.destination.name":         "orders",
		"messaging.operation.name":           "process",
		"messaging.operation.type":           "process",
		"messaging.consumer.group.name":      "billing",
		"messaging.message.id":               "msg_abc",
		"messaging.destination.partition.id": "2",
	}
	if fmt.Sprint(attributes) != fmt.Sprint(want) {
		t.Fatalf("attributes %v, want %v", attributes, want)
	}
	if inside.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("the handler's ctx does not carry the process span")
	}
}

func TestAFailingHandlerMarksItsSpan(t *testing.T) {
	tp, recorder := provider()
	boom := errors.New("boom")
	err := otelqueuecore.New(otelqueuecore.WithTracerProvider(tp)).Process(context.Background(),
		queuecore.Delivery{Topic: "orders", MessageID: "msg_1"}, func(context.Context) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the handler's", err)
	}
	span := recorder.Ended()[0]
	if span.Status().Code.String() != "Error" || span.Parent().IsValid() || len(span.Links()) != 0 {
		t.Fatalf("status %v, parent %v, links %v", span.Status(), span.Parent(), span.Links())
	}
}
