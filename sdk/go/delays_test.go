package queuecore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// Delays and TTL against the real server: publish options, the DeliverAt / ExpiresAt fields of answers,
// reads and deliveries, and the group's Expired count.

func TestPublishDelayAndTTL(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	before := time.Now()
	res, err := c.Publish(ctx, topic, map[string]int{"n": 1}, &queuecore.PublishParams{Delay: time.Hour, TTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeliverAt == nil || res.ExpiresAt == nil || res.DeliverAt.Before(before.Add(time.Hour-time.Second)) {
		t.Fatalf("published %+v", res)
	}
	if d := res.ExpiresAt.Sub(*res.DeliverAt); d != time.Hour {
		t.Fatalf("expiry %v after the due time, want 1h", d)
	}
	msg, err := c.Messages.Get(ctx, topic, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if msg.DeliverAt == nil || !msg.DeliverAt.Equal(*res.DeliverAt) || !msg.ExpiresAt.Equal(*res.ExpiresAt) {
		t.Fatalf("read back %+v", msg)
	}
	plain, err := c.Publish(ctx, topic, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.DeliverAt != nil || plain.ExpiresAt != nil {
		t.Fatalf("plain %+v", plain)
	}
	at := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	batch, err := c.PublishBatch(ctx, topic, []any{
		queuecore.BatchMessage{Data: 1, DeliverAt: at, ExpiresAt: at.Add(5 * time.Minute)},
		&queuecore.BatchMessage{Data: 2, Delay: 90 * time.Second},
		3,
	})
	if err != nil {
		t.Fatal(err)
	}
	items := batch.Messages
	if items[0].DeliverAt == nil || !items[0].DeliverAt.Equal(at) || !items[0].ExpiresAt.Equal(at.Add(5*time.Minute)) {
		t.Fatalf("item 0 %+v", items[0])
	}
	if items[1].DeliverAt == nil || items[2].DeliverAt != nil {
		t.Fatalf("items %+v", items)
	}
	_, err = c.Publish(ctx, topic, 1, &queuecore.PublishParams{Delay: time.Minute, DeliverAt: time.Now().Add(time.Minute)})
	var apiErr *queuecore.Error
	if !errors.As(err, &apiErr) || apiErr.Code != "INVALID_REQUEST" || apiErr.Status != 400 {
		t.Fatalf("delay and deliverAt: %v", err)
	}
}

func delayedDelivery(t *testing.T, transport queuecore.Transport) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	res, err := c.Publish(ctx, topic, 1, &queuecore.PublishParams{Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: "g", StartFrom: "earliest", Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	got := &collected{}
	arrived := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
			if got.add(msg) == 1 {
				arrived <- time.Now()
			}
			return msg.Ack()
		})
	}()
	eventually(t, "the delayed message", func() bool { return got.len() >= 1 })
	if err := consumer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v", err)
	}
	m := got.msgs[0]
	if m.ID != res.ID || m.DeliverAt == nil || !m.DeliverAt.Equal(*res.DeliverAt) || m.ExpiresAt != nil || m.Attempt != 1 {
		t.Fatalf("delivered %+v", m)
	}
	if at := <-arrived; at.Before(*res.DeliverAt) {
		t.Fatalf("delivered at %v, before it was due (%v)", at, *res.DeliverAt)
	}
	group, err := c.ConsumerGroups.Describe(ctx, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	if group.Expired != 0 {
		t.Fatalf("expired %d", group.Expired)
	}
}

func TestDelayedDeliveryWebSocket(t *testing.T) { delayedDelivery(t, queuecore.TransportWebSocket) }

func TestDelayedDeliveryPull(t *testing.T) { delayedDelivery(t, queuecore.TransportPull) }
