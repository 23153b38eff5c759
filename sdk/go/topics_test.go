package queuecore_test

// Unit tests of the topic calls' wire bodies over an httptest server (live behaviour: integration_test.go).

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	queuecore "github.com/queuecore/queuecore-go"
)

func TestTopicCreateSendsReplicasOnlyWhenGiven(t *testing.T) {
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("body %q: %v", raw, err)
		}
		bodies = append(bodies, body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"id":"top_1","name":"order.events","partitions":3,"retention":"7d",`+
			`"delivery":"exactly-once","replicas":5,"status":"active","createdAt":"2026-03-28T10:42:18.003Z"}`)
	}))
	defer srv.Close()
	c := unitClient(t, srv.URL)
	topic, err := c.Topics.Create(context.Background(), queuecore.TopicCreateParams{Name: "order.events", Replicas: 5})
	if err != nil {
		t.Fatal(err)
	}
	if topic.Replicas != 5 {
		t.Fatalf("topic %+v", topic)
	}
	if _, err := c.Topics.Create(context.Background(), queuecore.TopicCreateParams{Name: "order.events"}); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || bodies[0]["replicas"] != float64(5) {
		t.Fatalf("bodies %v", bodies)
	}
	if _, sent := bodies[1]["replicas"]; sent {
		t.Fatalf("replicas sent though not given (the server's default applies): %v", bodies[1])
	}
}
