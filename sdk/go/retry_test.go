package queuecore_test

// Unit tests of the request loop over httptest servers: retries, backoff, idempotency keys, options.
// (The live behaviour is in integration_test.go, against the real server.)

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

type seen struct {
	mu      sync.Mutex
	headers []http.Header
	bodies  []string
}

func (s *seen) record(r *http.Request) int {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headers = append(s.headers, r.Header.Clone())
	s.bodies = append(s.bodies, string(body))
	return len(s.headers)
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.headers)
}

func envelope(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "req_unit")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":{"code":%q,"message":"nope","status":%d,"requestId":"req_unit"}}`, code, status)
}

const published = `{"id":"msg_1","offset":1,"partition":0,"timestamp":"2026-03-28T10:42:18.003Z","latency":1,"durability":"fsync"}`

func unitClient(t *testing.T, url string, opts ...option.RequestOption) *queuecore.Client {
	t.Helper()
	c, err := queuecore.NewClient(append([]option.RequestOption{option.WithAPIKey("pq_test_sk_unit"), option.WithBaseURL(url)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRetriesKeepTheIdempotencyKey(t *testing.T) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch s.record(r) {
		case 1:
			w.Header().Set("Retry-After", "0")
			envelope(w, 429, "RATE_LIMIT_EXCEEDED")
		case 2:
			envelope(w, 503, "SERVICE_UNAVAILABLE")
		default:
			w.WriteHeader(201)
			_, _ = io.WriteString(w, published)
		}
	}))
	defer srv.Close()
	res, err := unitClient(t, srv.URL).Publish(context.Background(), "t", map[string]int{"a": 1}, nil)
	if err != nil || res.ID != "msg_1" {
		t.Fatalf("%+v %v", res, err)
	}
	if s.count() != 3 {
		t.Fatalf("%d attempts, want 3", s.count())
	}
	key := s.headers[0].Get("Idempotency-Key")
	if key == "" || s.headers[1].Get("Idempotency-Key") != key || s.headers[2].Get("Idempotency-Key") != key {
		t.Fatalf("keys %q %q %q", key, s.headers[1].Get("Idempotency-Key"), s.headers[2].Get("Idempotency-Key"))
	}
	if s.headers[0].Get("Authorization") != "Bearer pq_test_sk_unit" {
		t.Fatalf("auth %q", s.headers[0].Get("Authorization"))
	}
	// A second publish gets a key of its own.
	if _, err := unitClient(t, srv.URL).Publish(context.Background(), "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if s.headers[3].Get("Idempotency-Key") == key {
		t.Fatal("two publishes shared an idempotency key")
	}
}

func TestBatchItemKeysAreKeptAcrossRetries(t *testing.T) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.record(r) == 1 {
			envelope(w, 502, "BAD_GATEWAY")
			return
		}
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"count":2,"latency":1,"durability":"fsync","messages":[]}`)
	}))
	defer srv.Close()
	_, err := unitClient(t, srv.URL).PublishBatch(context.Background(), "t", []any{1, queuecore.BatchMessage{Data: 2, IdempotencyKey: "mine"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.count() != 2 || s.bodies[0] != s.bodies[1] || strings.Count(s.bodies[0], `"idempotencyKey"`) != 2 || !strings.Contains(s.bodies[0], `"idempotencyKey":"mine"`) {
		t.Fatalf("bodies %q", s.bodies)
	}
}

func TestNotRetried(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		is     error
	}{
		{400, "INVALID_REQUEST", queuecore.ErrInvalidRequest},
		{404, "TOPIC_NOT_FOUND", queuecore.ErrTopicNotFound},
		{409, "TOPIC_ALREADY_EXISTS", queuecore.ErrTopicAlreadyExists},
		{500, "INTERNAL_ERROR", queuecore.ErrInternal},
		{401, "INVALID_API_KEY", queuecore.ErrInvalidAPIKey},
	} {
		s := &seen{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.record(r)
			envelope(w, tc.status, tc.code)
		}))
		_, err := unitClient(t, srv.URL).Topics.Get(context.Background(), "t")
		srv.Close()
		var qerr *queuecore.Error
		if !errors.As(err, &qerr) || qerr.Status != tc.status || qerr.Code != tc.code || qerr.RequestID != "req_unit" || !errors.Is(err, tc.is) {
			t.Fatalf("%d: %#v", tc.status, err)
		}
		if s.count() != 1 {
			t.Fatalf("%d was sent %d times", tc.status, s.count())
		}
	}
}

func TestRetriesRunOut(t *testing.T) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		envelope(w, 503, "SERVICE_UNAVAILABLE")
	}))
	defer srv.Close()
	_, err := unitClient(t, srv.URL, option.WithMaxRetries(1)).Topics.Get(context.Background(), "t")
	if !errors.Is(err, queuecore.ErrServiceUnavailable) || !errors.Is(err, queuecore.ErrUnavailable) || s.count() != 2 {
		t.Fatalf("%v after %d attempts", err, s.count())
	}
	_, err = unitClient(t, srv.URL, option.WithMaxRetries(0)).Topics.Get(context.Background(), "t")
	if s.count() != 3 || err == nil {
		t.Fatalf("max retries 0: %d attempts", s.count())
	}
}

func TestConnectionErrorsAreRetried(t *testing.T) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.record(r) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // the answer never comes
			}
			return
		}
		w.WriteHeader(201)
		_, _ = io.WriteString(w, published)
	}))
	defer srv.Close()
	if _, err := unitClient(t, srv.URL).Publish(context.Background(), "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if s.count() != 2 || s.headers[0].Get("Idempotency-Key") != s.headers[1].Get("Idempotency-Key") {
		t.Fatalf("%d attempts", s.count())
	}
	port, _ := freePort()
	_, err := unitClient(t, fmt.Sprintf("http://127.0.0.1:%d", port), option.WithMaxRetries(1)).Topics.Get(context.Background(), "t")
	var qerr *queuecore.Error
	if !errors.As(err, &qerr) || qerr.Code != "CONNECTION_ERROR" || qerr.Status != 0 || !queuecore.IsConnectionError(err) || qerr.Err == nil {
		t.Fatalf("refused: %#v", err)
	}
}

func TestContextEndsTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		envelope(w, 429, "RATE_LIMIT_EXCEEDED")
		cancel()
	}))
	defer srv.Close()
	_, err := unitClient(t, srv.URL).Topics.Get(ctx, "t")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
}

func TestAPIKeyAndBaseURL(t *testing.T) {
	t.Setenv("QUEUECORE_API_KEY", "")
	t.Setenv("QUEUECORE_BASE_URL", "")
	if _, err := queuecore.NewClient(); err == nil || !strings.Contains(err.Error(), "QUEUECORE_API_KEY") {
		t.Fatalf("no key: %v", err)
	}
	if _, err := queuecore.NewClient(option.WithAPIKey(" \n")); err == nil {
		t.Fatal("a blank key was taken")
	}
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		_, _ = io.WriteString(w, `{"data":[]}`)
	}))
	defer srv.Close()
	t.Setenv("QUEUECORE_API_KEY", "pq_test_sk_fromfile\n")
	t.Setenv("QUEUECORE_BASE_URL", srv.URL)
	c, err := queuecore.NewClient(option.WithRegion("us-east-1"))
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != srv.URL {
		t.Fatalf("the variable should win over the region: %s", c.BaseURL())
	}
	if _, err := c.ConsumerGroups.List(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	if got := s.headers[0].Get("Authorization"); got != "Bearer pq_test_sk_fromfile" {
		t.Fatalf("authorization %q", got)
	}
	c, _ = queuecore.NewClient(option.WithRegion("us-east-1"), option.WithBaseURL("https://eu.example.com/"))
	if c.BaseURL() != "https://eu.example.com" {
		t.Fatalf("explicit base URL: %s", c.BaseURL())
	}
	t.Setenv("QUEUECORE_BASE_URL", "")
	c, _ = queuecore.NewClient(option.WithRegion("us-east-1"))
	if c.BaseURL() != "https://us-east-1.api.queuecore.cloud" {
		t.Fatalf("region: %s", c.BaseURL())
	}
	if _, err := queuecore.NewClient(option.WithBaseURL("ftp://x")); err == nil {
		t.Fatal("ftp base URL taken")
	}
}

type countingTransport struct {
	mu sync.Mutex
	n  int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func TestHTTPClientAndHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Error("health sent the key")
		}
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"status":"down","checks":{"database":"down"},"version":"1"}`)
	}))
	defer srv.Close()
	tr := &countingTransport{}
	c := unitClient(t, srv.URL, option.WithHTTPClient(&http.Client{Transport: tr}))
	h := c.Health(context.Background())
	if h.Status != "down" || h.Checks["database"] != "down" || tr.n != 1 {
		t.Fatalf("%+v after %d requests", h, tr.n)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
		_, _ = io.WriteString(w, "oops")
	}))
	defer bad.Close()
	if h := unitClient(t, bad.URL).Health(context.Background()); h.Status != "down" || h.Error == "" {
		t.Fatalf("%+v", h)
	}
}
