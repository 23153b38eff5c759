package queuecore_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// A deploy's handover (#36). The scripted peer follows the server's drain (app/api/ws.py _end_for_drain):
// it stops delivering, sends "draining", settles the ack frames the client still sends until the client
// closes (or 3 s), then closes 1012; a message whose ack never reached it comes back on the next connection
// with attempt 2, as the server redelivers it.

func handoverMessage(attempt int) map[string]any {
	return map[string]any{"type": "message", "id": "msg_cccccccccccccccccccccccccc", "topic": "t", "partition": 0,
		"offset": 0, "key": nil, "headers": map[string]string{}, "data": 1, "timestamp": "2026-11-26T00:00:00.000Z",
		"attempt": attempt}
}

func TestAHandlerRunningWhenTheServerDrainsGetsItsAckSettled(t *testing.T) {
	const id = "msg_cccccccccccccccccccccccccc"
	var connections atomic.Int32
	var ackedOnFirst atomic.Bool
	firstClose := make(chan string, 1) // who closed the first connection
	drain := make(chan struct{})
	reconnected := make(chan struct{})
	upgrader := websocket.Upgrader{}
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		n := connections.Add(1)
		_ = conn.WriteJSON(map[string]any{"type": "welcome", "memberId": "csr_1", "generationId": n, "assignments": []int{0}})
		if n > 1 {
			if !ackedOnFirst.Load() {
				_ = conn.WriteJSON(handoverMessage(2)) // the server redelivers what was not settled
			}
			close(reconnected)
			for {
				_, data, err := conn.ReadMessage()
				if err != nil {
					return
				}
				var f struct {
					Type string   `json:"type"`
					IDs  []string `json:"ids"`
				}
				if json.Unmarshal(data, &f) == nil && f.Type == "ack" {
					_ = conn.WriteJSON(map[string]any{"type": "acked", "ids": f.IDs, "failed": []any{}})
				}
			}
		}
		_ = conn.WriteJSON(handoverMessage(1))
		<-drain
		_ = conn.WriteJSON(map[string]any{"type": "draining"})
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					firstClose <- "client 1000"
				} else {
					firstClose <- "peer after 3 s: " + err.Error()
					_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1012, ""))
				}
				return
			}
			var f struct {
				Type string   `json:"type"`
				IDs  []string `json:"ids"`
			}
			if json.Unmarshal(data, &f) == nil && f.Type == "ack" {
				ackedOnFirst.Store(slices.Contains(f.IDs, id))
				_ = conn.WriteJSON(map[string]any{"type": "acked", "ids": f.IDs, "failed": []any{}})
			}
		}
	}))
	defer peer.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := queuecore.NewClient(option.WithAPIKey("pq_test_sk_unit"), option.WithBaseURL(peer.URL))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var attempts []int
	started := make(chan struct{}, 1)
	run := startConsumer(t, ctx, c, "t", queuecore.ConsumeParams{Group: "g", Transport: queuecore.TransportWebSocket},
		func(ctx context.Context, msg *queuecore.Message) error {
			mu.Lock()
			attempts = append(attempts, msg.Attempt)
			mu.Unlock()
			if msg.Attempt == 1 {
				started <- struct{}{}
				time.Sleep(300 * time.Millisecond) // still running when the node drains
			}
			return msg.Ack()
		})
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the message was never delivered")
	}
	close(drain)
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the consumer did not reconnect after the drain")
	}
	time.Sleep(200 * time.Millisecond) // a redelivery, if any, is handled by now
	_ = run.stop(ctx)
	closedBy := <-firstClose
	mu.Lock()
	defer mu.Unlock()
	if !ackedOnFirst.Load() || !slices.Equal(attempts, []int{1}) {
		t.Fatalf("ack sent to the draining node: %v; attempts handled %v (want [1])", ackedOnFirst.Load(), attempts)
	}
	if closedBy != "client 1000" {
		t.Fatalf("the first connection was closed by %s, want the consumer once its acks were answered", closedBy)
	}
	if reported := run.errors(); connections.Load() != 2 || len(reported) != 0 {
		t.Fatalf("connections %d, errors reported %v", connections.Load(), reported)
	}
}

// A close with 1012 whose "draining" frame was not seen is a deploy all the same: not an error, and the
// consumer reconnects. And a connection opened on a node already draining gets "draining" instead of its
// welcome, then 1012: a deploy too.
func TestACloseWith1012AndNoDrainingFrameIsADeploy(t *testing.T) {
	for _, first := range []string{"welcome", "draining"} {
		t.Run(first, func(t *testing.T) { closedWith1012(t, first) })
	}
}

func closedWith1012(t *testing.T, first string) {
	var connections atomic.Int32
	reconnected := make(chan struct{})
	upgrader := websocket.Upgrader{}
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		n := connections.Add(1)
		if n == 1 && first == "draining" {
			_ = conn.WriteJSON(map[string]any{"type": "draining"})
		} else {
			_ = conn.WriteJSON(map[string]any{"type": "welcome", "memberId": "csr_1", "generationId": 1, "assignments": []int{0}})
		}
		if n == 1 {
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1012, ""))
			time.Sleep(100 * time.Millisecond)
			return
		}
		if n == 2 {
			close(reconnected)
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}))
	defer peer.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := queuecore.NewClient(option.WithAPIKey("pq_test_sk_unit"), option.WithBaseURL(peer.URL))
	if err != nil {
		t.Fatal(err)
	}
	run := startConsumer(t, ctx, c, "t", queuecore.ConsumeParams{Group: "g", Transport: queuecore.TransportWebSocket}, acking)
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the consumer did not reconnect after a 1012 close")
	}
	if err := run.stop(ctx); err != nil {
		t.Fatalf("Close or Start returned %v", err)
	}
	if reported := run.errors(); connections.Load() != 2 || len(reported) != 0 {
		t.Fatalf("connections %d, errors reported %v", connections.Load(), reported)
	}
}
