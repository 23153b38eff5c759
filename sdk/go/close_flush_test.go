package queuecore_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// heldAcks is a reverse proxy to the test server that holds the first ack request it sees until that
// request is canceled, and passes everything else straight through.
type heldAcks struct {
	once    sync.Once
	arrived chan struct{}
	proxy   *httputil.ReverseProxy
}

func (h *heldAcks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/ack") {
		first := false
		h.once.Do(func() { first = true })
		if first {
			// Read the body first: only then does the server notice the client closing the connection.
			_, _ = io.Copy(io.Discard, r.Body)
			close(h.arrived)
			select {
			case <-r.Context().Done(): // the client gave up on it: it never reaches the server
			case <-time.After(30 * time.Second):
				http.Error(w, "held too long", http.StatusServiceUnavailable)
			}
			return
		}
	}
	h.proxy.ServeHTTP(w, r)
}

// Close confirms the acks of handled messages even when a periodic flush carrying them is in flight at
// that moment: the stop cuts that request short, and the acks are sent again by the final flush.
func TestCloseConfirmsAcksWhoseFlushWasInFlight(t *testing.T) {
	for _, transport := range []queuecore.Transport{queuecore.TransportPull, queuecore.TransportSSE} {
		t.Run(string(transport), func(t *testing.T) {
			target, err := url.Parse(serverURL)
			if err != nil {
				t.Fatal(err)
			}
			held := &heldAcks{arrived: make(chan struct{}), proxy: httputil.NewSingleHostReverseProxy(target)}
			proxy := httptest.NewServer(held)
			defer proxy.Close()

			direct := newClient(t)
			ctx := testCtx(t)
			topic := newTopic(t, direct, 1)
			if _, err := direct.Publish(ctx, topic, map[string]int{"i": 1}, nil); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, option.WithBaseURL(proxy.URL))
			run := startConsumer(t, ctx, c, topic, queuecore.ConsumeParams{Group: "g", StartFrom: "earliest",
				Transport: transport}, acking)
			select {
			case <-held.arrived:
			case <-time.After(60 * time.Second):
				t.Fatal("no ack was flushed")
			}
			if err := run.stop(ctx); err != nil {
				t.Fatalf("Close or Start returned %v", err)
			}
			offsets, err := direct.Offsets.List(ctx, topic, "g")
			if err != nil {
				t.Fatal(err)
			}
			if len(offsets) != 1 || offsets[0].Lag != 0 {
				t.Fatalf("after Close: %+v (the ack in flight at the stop was dropped)", offsets)
			}
		})
	}
}
