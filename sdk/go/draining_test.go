package queuecore_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// A deploy: the node sends "draining" and closes with 1012; the consumer reconnects at once (here to the
// same scripted address, as to another node behind one balancer) and reports no error.
func TestADrainingServerIsLeftForAnotherWithoutAnError(t *testing.T) {
	const id = "msg_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	var connections atomic.Int32
	acked := make(chan struct{}, 1)
	upgrader := websocket.Upgrader{}
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		n := connections.Add(1)
		_ = conn.WriteJSON(map[string]any{"type": "welcome", "memberId": "csr_1", "generationId": 1, "assignments": []int{0}})
		if n == 1 {
			_ = conn.WriteJSON(map[string]any{"type": "draining"})
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1012, ""))
			time.Sleep(100 * time.Millisecond)
			return
		}
		_ = conn.WriteJSON(map[string]any{"type": "message", "id": id, "topic": "t", "partition": 0, "offset": 0,
			"key": nil, "headers": map[string]string{}, "data": 1, "timestamp": "2026-11-26T00:00:00.000Z", "attempt": 1})
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			var f map[string]any
			if json.Unmarshal(data, &f) == nil && f["type"] == "ack" {
				_ = conn.WriteJSON(map[string]any{"type": "acked", "ids": []string{id}, "failed": []any{}})
				select {
				case acked <- struct{}{}:
				default:
				}
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
	var reported []error
	consumer, err := c.Consume(ctx, "t", queuecore.ConsumeParams{Group: "g", Transport: queuecore.TransportWebSocket,
		OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error { return msg.Ack() })
	}()
	select {
	case <-acked:
	case <-ctx.Done():
		t.Fatal("the message on the second connection was never acked")
	}
	_ = consumer.Close(ctx)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if connections.Load() != 2 || len(reported) != 0 {
		t.Fatalf("connections %d, errors reported %v", connections.Load(), reported)
	}
}
