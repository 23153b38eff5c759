package queuecore_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// leaveTheFirstServer runs a consumer against a scripted server whose first connection endFirst ends; the
// second delivers one message and answers its ack. It answers how many connections the consumer made and
// the errors it reported.
func leaveTheFirstServer(t *testing.T, endFirst func(conn *websocket.Conn)) (int32, []error) {
	t.Helper()
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
			endFirst(conn)
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
	run := startConsumer(t, ctx, c, "t", queuecore.ConsumeParams{Group: "g", Transport: queuecore.TransportWebSocket}, acking)
	select {
	case <-acked:
	case <-ctx.Done():
		t.Fatal("the message on the second connection was never acked")
	}
	_ = run.stop(ctx)
	return connections.Load(), run.errors()
}

// A deploy: the node sends "draining" and closes with 1012; the consumer reconnects at once (here to the
// same scripted address, as to another node behind one balancer) and reports no error.
func TestADrainingServerIsLeftForAnotherWithoutAnError(t *testing.T) {
	connections, reported := leaveTheFirstServer(t, func(conn *websocket.Conn) {
		_ = conn.WriteJSON(map[string]any{"type": "draining"})
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(1012, ""))
	})
	if connections != 2 || len(reported) != 0 {
		t.Fatalf("connections %d, errors reported %v", connections, reported)
	}
}

// The server ends a member for a reason of its own with an error frame, then a normal close (1000): one end,
// reported once (the frame, which says why), as the Python SDK does; the consumer reconnects as after any
// failure. Seen in the rolling restart (bench/rolling_restart.py): a JetStream read refused while a NATS
// node restarted was reported twice, the 503 and then "WebSocket connection lost: close 1000".
func TestAnErrorFrameAndTheNormalCloseAfterItAreOneReport(t *testing.T) {
	connections, reported := leaveTheFirstServer(t, func(conn *websocket.Conn) {
		_ = conn.WriteJSON(map[string]any{"type": "error", "error": map[string]any{"code": "SERVICE_UNAVAILABLE",
			"status": 503, "message": "JetStream did not answer a read", "requestId": "req_1"}})
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	})
	if connections != 2 || len(reported) != 1 || !errors.Is(reported[0], queuecore.ErrServiceUnavailable) {
		t.Fatalf("connections %d, errors reported %v (want the one 503)", connections, reported)
	}
}
