package queuecore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// cutProxy relays TCP to the real server and can cut every open connection (a network failure: the
// server sees the connections close, the client sees them drop).
type cutProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l}
	t.Cleanup(func() { l.Close(); p.cut() })
	go func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, down, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, down); up.Close() }()
			go func() { _, _ = io.Copy(down, up); down.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "http://" + p.l.Addr().String() }

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestConsumerReconnectsAfterTheConnectionDrops(t *testing.T) {
	for _, transport := range []queuecore.Transport{queuecore.TransportWebSocket, queuecore.TransportPull, queuecore.TransportSSE} {
		t.Run(string(transport), func(t *testing.T) {
			c := newClient(t)
			ctx := testCtx(t)
			topic := newTopic(t, c, 2)
			proxy := newCutProxy(t, strings.TrimPrefix(serverURL, "http://"))
			var errMu sync.Mutex
			var reported []error
			via := newClient(t, option.WithBaseURL(proxy.url()))
			consumer, err := via.Consume(ctx, topic, queuecore.ConsumeParams{Group: "g", StartFrom: "earliest", Transport: transport,
				OnError: func(err error) { errMu.Lock(); reported = append(reported, err); errMu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			var mu sync.Mutex
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
			done := make(chan error, 1)
			go func() {
				done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
					mu.Lock()
					got[msg.ID] = true
					mu.Unlock()
					return msg.Ack()
				})
			}()
			publish := func(n int) {
				items := make([]any, n)
				for i := range items {
					items[i] = i
				}
				if _, err := c.PublishBatch(ctx, topic, items); err != nil {
					t.Fatal(err)
				}
			}
			publish(10)
			eventually(t, "the first ten", func() bool { return count() >= 10 })
			proxy.cut()
			publish(10)
			eventually(t, "all twenty, after reconnecting", func() bool { return count() >= 20 })
			if err := consumer.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Start: %v", err)
			}
			errMu.Lock()
			defer errMu.Unlock()
			if transport == queuecore.TransportWebSocket && len(reported) == 0 {
				t.Fatal("the dropped connection was not reported to OnError")
			}
			for _, err := range reported {
				// An ack of a message delivered over the dropped connection may reach the server after it
				// let that connection's member go: refused as ACK_EXPIRED, and the message redelivered
				// (counted above), as AckError documents.
				var ackErr *queuecore.AckError
				if errors.As(err, &ackErr) && ackErr.Code == "ACK_EXPIRED" {
					continue
				}
				if !queuecore.IsConnectionError(err) {
					t.Fatalf("unexpected error: %v", err)
				}
			}
		})
	}
}
