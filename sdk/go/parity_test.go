package queuecore_test

// What the three SDKs share (sdk/README.md's parity table), in Go: per-call options, the error classes,
// the rate-limit state, and the consumer's OnRebalance and *AckError.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

func TestParseRateLimitPrefersTheDraftFields(t *testing.T) {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"admin";q=10;w=1, "publish";q=100;w=1`)
	h.Set("RateLimit", `"publish";r=37;t=2`)
	h.Set("RateLimit-Limit", "999")
	got := queuecore.ParseRateLimit(h)
	want := queuecore.RateLimit{Policy: "publish", Limit: 100, Remaining: 37, Reset: 2 * time.Second, Window: time.Second}
	if got == nil || *got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	old := http.Header{}
	old.Set("RateLimit-Limit", "100")
	old.Set("RateLimit-Remaining", "0")
	old.Set("RateLimit-Reset", "1")
	got = queuecore.ParseRateLimit(old)
	if got == nil || *got != (queuecore.RateLimit{Limit: 100, Remaining: 0, Reset: time.Second}) {
		t.Fatalf("older fields: %+v", got)
	}
	if queuecore.ParseRateLimit(http.Header{}) != nil {
		t.Fatal("no fields, no state")
	}
}

func TestErrorClassesMatchAsThePythonAndNodeClasses(t *testing.T) {
	cases := []struct {
		err   *queuecore.Error
		class *queuecore.Error
	}{
		{&queuecore.Error{Status: 400, Code: "OFFSET_OUT_OF_RANGE"}, queuecore.ErrBadRequest},
		{&queuecore.Error{Status: 401, Code: "INVALID_API_KEY"}, queuecore.ErrAuthentication},
		{&queuecore.Error{Status: 403, Code: "QUOTA_EXCEEDED"}, queuecore.ErrPermissionDenied},
		{&queuecore.Error{Status: 404, Code: "GROUP_NOT_FOUND"}, queuecore.ErrNotFound},
		{&queuecore.Error{Status: 409, Code: "GROUP_ACTIVE"}, queuecore.ErrConflict},
		{&queuecore.Error{Status: 413, Code: "PAYLOAD_TOO_LARGE"}, queuecore.ErrPayloadTooLarge},
		{&queuecore.Error{Status: 429, Code: "RATE_LIMIT_EXCEEDED"}, queuecore.ErrRateLimit},
		{&queuecore.Error{Status: 502, Code: "Bad Gateway"}, queuecore.ErrInternalServer},
		{&queuecore.Error{Status: 503, Code: "Service Unavailable"}, queuecore.ErrServiceUnavailable},
		{&queuecore.Error{Code: "TIMEOUT"}, queuecore.ErrConnection},
		{&queuecore.Error{Code: "TIMEOUT"}, queuecore.ErrTimeout},
		{&queuecore.Error{Status: 200, Code: "INVALID_RESPONSE"}, queuecore.ErrInvalidResponse},
	}
	for _, c := range cases {
		if !errors.Is(fmt.Errorf("wrapped: %w", c.err), c.class) {
			t.Errorf("%v is not %v", c.err, c.class)
		}
	}
	if errors.Is(&queuecore.Error{Status: 503}, queuecore.ErrInternalServer) {
		t.Error("a 503 is ServiceUnavailable, not InternalServer")
	}
	if errors.Is(&queuecore.Error{Status: 404}, queuecore.ErrBadRequest) || errors.Is(&queuecore.Error{Code: "CONNECTION_ERROR"}, queuecore.ErrTimeout) {
		t.Error("classes must not overlap")
	}
	// The deprecated names are the same values.
	if queuecore.ErrRateLimited != queuecore.ErrRateLimit || queuecore.ErrUnavailable != queuecore.ErrServiceUnavailable {
		t.Error("deprecated aliases")
	}
	var ack error = &queuecore.AckError{MessageID: "msg_1", Code: "ACK_EXPIRED", Action: "nack"}
	var target *queuecore.AckError
	if !errors.As(ack, &target) || ack.Error() != "queuecore: the nack of msg_1 failed: ACK_EXPIRED" {
		t.Errorf("AckError: %v", ack)
	}
}

func TestPerCallOptions(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)

	res, err := c.Publish(ctx, topic, map[string]any{"n": 1}, nil,
		option.WithHeader("X-Request-Id", "req-per-call-1"), option.WithIdempotencyKey(unique("idem")))
	if err != nil || res.RequestID != "req-per-call-1" {
		t.Fatalf("publish with a per-call header: %+v, %v", res, err)
	}
	key := unique("idem")
	first, err1 := c.Publish(ctx, topic, map[string]any{"n": 2}, nil, option.WithIdempotencyKey(key))
	again, err2 := c.Publish(ctx, topic, map[string]any{"n": 3}, &queuecore.PublishParams{IdempotencyKey: "ignored"},
		option.WithIdempotencyKey(key))
	if err1 != nil || err2 != nil || !again.Replayed || again.ID != first.ID {
		t.Fatalf("idempotency key per call: %+v %+v %v %v", first, again, err1, err2)
	}
	batchKey := unique("batch")
	b1, err1 := c.PublishBatch(ctx, topic, []any{1, 2}, option.WithIdempotencyKey(batchKey))
	b2, err2 := c.PublishBatch(ctx, topic, []any{1, 2}, option.WithIdempotencyKey(batchKey))
	if err1 != nil || err2 != nil || b1.Messages[1].Replayed || !b2.Messages[0].Replayed || !b2.Messages[1].Replayed {
		t.Fatalf("batch keys per call: %+v %+v %v %v", b1, b2, err1, err2)
	}

	// A per-call option applies to that call only.
	if _, err := c.Topics.Get(ctx, topic, option.WithBaseURL("http://127.0.0.1:1"), option.WithMaxRetries(0)); !errors.Is(err, queuecore.ErrConnection) {
		t.Fatalf("per-call base URL: %v", err)
	}
	if _, err := c.Topics.Get(ctx, topic); err != nil {
		t.Fatalf("the client is unchanged: %v", err)
	}
	if _, err := c.Topics.Get(ctx, topic, option.WithAPIKey("pq_test_sk_nosuchkey00000000000000000000")); !errors.Is(err, queuecore.ErrAuthentication) {
		t.Fatalf("per-call key: %v", err)
	}
	if _, err := c.Topics.Get(ctx, topic, option.WithMaxRetries(-1)); err == nil {
		t.Fatal("a bad per-call option is an error")
	}
	if it := c.Topics.List(ctx, nil, option.WithTimeout(-1)); it.Next() || it.Err() == nil {
		t.Fatal("a bad per-call option stops a list")
	}
	var raw *http.Response
	if _, err := c.Topics.Get(ctx, topic, option.WithResponseInto(&raw)); err != nil || raw == nil || raw.StatusCode != 200 {
		t.Fatalf("response into: %v %v", raw, err)
	}
	if rl := queuecore.ParseRateLimit(raw.Header); rl == nil || rl.Policy != "admin" || raw.Header.Get("X-Request-Id") == "" {
		t.Fatalf("the raw answer's headers: %v", raw.Header)
	}
	if _, err := c.Topics.Get(ctx, unique("missing"), option.WithResponseInto(&raw)); !queuecore.IsNotFound(err) || raw.StatusCode != 404 {
		t.Fatalf("response into, on an error: %v %v", raw, err)
	}
	if _, err := c.WithOptions(option.WithResponseInto(&raw)); err == nil {
		t.Fatal("a response destination is per call")
	}
	if _, err := c.WithOptions(option.WithIdempotencyKey("k")); err == nil {
		t.Fatal("an idempotency key is per call")
	}
	fast, err := c.WithOptions(option.WithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if names, err := fast.Topics.List(ctx, &queuecore.ListParams{Limit: 1}).All(); err != nil || len(names) == 0 {
		t.Fatalf("WithOptions copy: %v %v", names, err)
	}
}

func TestRateLimitStateOnTheClientAndOnErrors(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	if _, err := c.Publish(ctx, topic, 1, nil); err != nil {
		t.Fatal(err)
	}
	rl := c.RateLimit()
	if rl == nil || rl.Policy != "publish" || rl.Limit <= 0 || rl.Remaining < 0 || rl.Window != time.Second {
		t.Fatalf("after a publish: %+v", rl)
	}
	_, err := c.Topics.Get(ctx, unique("missing"))
	var qerr *queuecore.Error
	if !errors.As(err, &qerr) || qerr.RateLimit == nil || qerr.RateLimit.Policy != "admin" {
		t.Fatalf("a 404's rate limit: %v %+v", err, qerr)
	}
	if c.RateLimit().Policy != "admin" {
		t.Fatalf("the last state: %+v", c.RateLimit())
	}
}

// A scripted pull server: join, one message, and an ack answer refusing it (the contract's shape).
func TestPullConsumerReportsRebalanceAndRefusedAcks(t *testing.T) {
	var polled sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "DELETE":
			w.WriteHeader(204)
		case strings.HasSuffix(r.URL.Path, "/members"):
			_, _ = w.Write([]byte(`{"memberId":"csr_1","generationId":3,"assignments":[0,2],"sessionTimeout":"10s"}`))
		case strings.HasSuffix(r.URL.Path, "/poll"):
			body := `{"messages":[]}`
			polled.Do(func() {
				body = `{"messages":[{"id":"msg_1","topic":"t","partition":0,"offset":0,"key":null,"headers":{},` +
					`"data":1,"timestamp":"2026-03-28T10:00:00Z","attempt":1,"ackDeadline":"2026-03-28T10:00:30Z"}]}`
			})
			_, _ = w.Write([]byte(body))
		case strings.HasSuffix(r.URL.Path, "/ack"):
			_, _ = w.Write([]byte(`{"ids":[],"failed":[{"id":"msg_1","code":"ACK_EXPIRED"}]}`))
		default:
			_, _ = w.Write([]byte(`{"generationId":3,"shouldRejoin":false,"assignments":[0,2]}`))
		}
	}))
	defer srv.Close()
	c := unitClient(t, srv.URL)
	var mu sync.Mutex
	var events []queuecore.RebalanceEvent
	var ackErrs []*queuecore.AckError
	k, err := c.Consume(context.Background(), "t", queuecore.ConsumeParams{Group: "g", Transport: queuecore.TransportPull,
		OnRebalance: func(e queuecore.RebalanceEvent) { mu.Lock(); events = append(events, e); mu.Unlock() },
		OnError: func(err error) {
			var ae *queuecore.AckError
			if errors.As(err, &ae) {
				mu.Lock()
				ackErrs = append(ackErrs, ae)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- k.Start(context.Background(), func(ctx context.Context, m *queuecore.Message) error { return m.Ack() })
	}()
	eventually(t, "an AckError", func() bool { mu.Lock(); defer mu.Unlock(); return len(ackErrs) > 0 })
	k.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if *ackErrs[0] != (queuecore.AckError{MessageID: "msg_1", Code: "ACK_EXPIRED", Action: "ack"}) {
		t.Errorf("ack error %+v", ackErrs[0])
	}
	if len(events) == 0 || events[0].MemberID != "csr_1" || events[0].GenerationID != 3 || fmt.Sprint(events[0].Assignments) != "[0 2]" {
		t.Errorf("rebalance events %+v", events)
	}
	if fmt.Sprint(k.Assignments()) != "[0 2]" {
		t.Errorf("assignments %v", k.Assignments())
	}
}

func TestPushConsumerReportsRebalanceOnJoin(t *testing.T) {
	c := newClient(t)
	topic := newTopic(t, c, 2)
	events := make(chan queuecore.RebalanceEvent, 4)
	k, err := c.Consume(testCtx(t), topic, queuecore.ConsumeParams{Group: unique("g"),
		OnRebalance: func(e queuecore.RebalanceEvent) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- k.Start(context.Background(), func(ctx context.Context, m *queuecore.Message) error { return m.Ack() })
	}()
	select {
	case e := <-events:
		if !strings.HasPrefix(e.MemberID, "csr_") || e.GenerationID < 1 || fmt.Sprint(e.Assignments) != "[0 1]" {
			t.Errorf("event %+v", e)
		}
	case <-time.After(20 * time.Second):
		t.Error("no rebalance event")
	}
	k.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
