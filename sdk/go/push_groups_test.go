package queuecore_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// Push groups against the real server: typed config, the one-time secret, a delivery to a real local
// receiver verified with VerifyWebhook, rotation, attempts, and push turned off.
func TestPushGroups(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	var mu sync.Mutex
	type delivery struct {
		header http.Header
		body   []byte
	}
	var got []delivery
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{r.Header.Clone(), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	topic := unique("go.push")
	if _, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ordered := true
	created, err := c.ConsumerGroups.Update(ctx, topic, "hooks", queuecore.ConsumerGroupUpdateParams{
		Push: &queuecore.PushParams{URL: receiver.URL + "/hook", MaxConcurrency: 4, Ordered: &ordered},
	})
	if err != nil {
		t.Fatal(err)
	}
	push := created.Config.Push
	if push == nil || len(push.Secret) < 20 || push.MaxConcurrency != 4 || !push.Ordered || push.Mode != "binary" {
		t.Fatalf("push %+v", push)
	}
	sent, err := c.Publish(ctx, topic, map[string]string{"hello": "go"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var first delivery
	for time.Now().Before(deadline) {
		mu.Lock()
		if len(got) > 0 {
			first = got[0]
		}
		mu.Unlock()
		if first.body != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var body map[string]string
	if err := queuecore.DecodeWebhook(first.body, first.header, &body, nil, push.Secret); err != nil || body["hello"] != "go" {
		t.Fatalf("delivery: %v %v", err, body)
	}
	if first.header.Get("webhook-id") != sent.ID {
		t.Fatalf("webhook-id %q, sent %q", first.header.Get("webhook-id"), sent.ID)
	}
	rotated, err := c.ConsumerGroups.RotatePushSecret(ctx, topic, "hooks")
	if err != nil || rotated.Secret == push.Secret || len(rotated.Secret) < 20 {
		t.Fatalf("rotate: %v %+v", err, rotated)
	}
	var attempts []queuecore.PushAttempt
	for time.Now().Before(deadline) && len(attempts) == 0 {
		if attempts, err = c.ConsumerGroups.PushAttempts(ctx, topic, "hooks", queuecore.PushAttemptsParams{Limit: 5}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(attempts) != 1 || attempts[0].MessageID != sent.ID || attempts[0].Status == nil || *attempts[0].Status != 204 {
		t.Fatalf("attempts %+v", attempts)
	}
	off, err := c.ConsumerGroups.Update(ctx, topic, "hooks", queuecore.ConsumerGroupUpdateParams{RemovePush: true})
	if err != nil || off.Config.Push != nil {
		t.Fatalf("off: %v %+v", err, off)
	}
	if _, err := c.ConsumerGroups.RotatePushSecret(ctx, topic, "hooks"); !errors.Is(err, queuecore.ErrInvalidRequest) {
		t.Fatalf("rotate without push: %v", err)
	}
}
