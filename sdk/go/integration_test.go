package queuecore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

func TestTopicsLifecycle(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	name := unique("go.topics")
	created, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: name, Retention: "30d", Delivery: "exactly-once", Partitions: 6})
	if err != nil {
		t.Fatal(err)
	}
	if created.Name != name || created.Partitions != 6 || created.Retention != "30d" || created.Replicas != 1 || created.Status != "active" || created.CreatedAt.IsZero() {
		t.Fatalf("created %+v", created)
	}
	_, err = c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: name})
	if !errors.Is(err, queuecore.ErrTopicAlreadyExists) || !queuecore.IsConflict(err) {
		t.Fatalf("second create: %v", err)
	}
	detail, err := c.Topics.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(detail.PartitionDetails) != 6 || detail.ID != created.ID {
		t.Fatalf("detail %+v", detail)
	}
	// The test server's local engine keeps one copy, on its own machine, which leads.
	if r := detail.PartitionDetails[0].Replicas; len(r) != 1 || !r[0].Leader || !r[0].Current || r[0].Server == "" {
		t.Fatalf("replicas %+v", r)
	}
	// No zone is configured for it (null), and the one copy lags nothing.
	if r := detail.PartitionDetails[0].Replicas[0]; r.Zone != nil || r.Lag == nil || *r.Lag != 0 {
		t.Fatalf("replica %+v", r)
	}
	updated, err := c.Topics.Update(ctx, name, queuecore.TopicUpdateParams{Partitions: 8, Retention: "1d"})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Partitions != 8 || updated.Retention != "1d" {
		t.Fatalf("updated %+v", updated)
	}
	if _, err := c.Topics.Update(ctx, name, queuecore.TopicUpdateParams{Partitions: 2}); !errors.Is(err, queuecore.ErrInvalidRequest) {
		t.Fatalf("partition decrease: %v", err)
	}
	if err := c.Topics.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	_, err = c.Topics.Get(ctx, name)
	var qerr *queuecore.Error
	if !errors.As(err, &qerr) || qerr.Code != "TOPIC_NOT_FOUND" || qerr.Status != 404 || qerr.RequestID == "" || qerr.Message == "" {
		t.Fatalf("get after delete: %#v", err)
	}
	if !errors.Is(err, queuecore.ErrTopicNotFound) || !errors.Is(err, queuecore.ErrNotFound) || !queuecore.IsNotFound(err) || errors.Is(err, queuecore.ErrGroupNotFound) {
		t.Fatalf("sentinels do not match %v", err)
	}
}

// The test server runs the local engine: one copy of each message, the default and the only choice.
func TestTopicsReplicas(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	name := unique("go.replicas")
	created, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: name, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	detail, err := c.Topics.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if created.Replicas != 1 || detail.Replicas != 1 {
		t.Fatalf("created %+v, detail %+v", created, detail)
	}
	for _, replicas := range []int{2, 3, 5} {
		_, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: unique("go.replicas"), Replicas: replicas})
		var qerr *queuecore.Error
		if !errors.Is(err, queuecore.ErrInvalidRequest) || !errors.As(err, &qerr) || qerr.Status != 400 {
			t.Fatalf("replicas %d: %v", replicas, err)
		}
		if replicas != 2 && !strings.Contains(qerr.Message, "keeps one copy") {
			t.Fatalf("replicas %d: %q does not say the engine keeps one copy", replicas, qerr.Message)
		}
	}
}

func TestTopicsListIteratesEveryPage(t *testing.T) {
	c := newClient(t, option.WithAPIKey(keys["development"]))
	ctx := testCtx(t)
	want := map[string]bool{}
	for i := 0; i < 7; i++ {
		want[newTopic(t, c, 1)] = true
	}
	it := c.Topics.List(ctx, &queuecore.ListParams{Limit: 2})
	seen := map[string]int{}
	for it.Next() {
		seen[it.Current().Name]++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if seen[name] != 1 {
			t.Fatalf("topic %s seen %d times over the pages", name, seen[name])
		}
	}
	all, err := c.Topics.List(ctx, nil).All()
	if err != nil || len(all) != len(seen) {
		t.Fatalf("All: %d topics, %v; pages gave %d", len(all), err, len(seen))
	}
}

func TestPublishAndIdempotency(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 3)
	res, err := c.Publish(ctx, topic, map[string]any{"type": "order.created", "orderId": "ord_92jf8x", "amount": 9900}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ID == "" || res.Timestamp.IsZero() || res.Durability == "" || res.Replayed || res.RequestID == "" {
		t.Fatalf("publish %+v", res)
	}
	key := unique("idem")
	first, err := c.Publish(ctx, topic, "a", &queuecore.PublishParams{Key: "user-1", Headers: map[string]string{"h": "v"}, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Publish(ctx, topic, "different body", &queuecore.PublishParams{IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.ID != first.ID || again.Offset != first.Offset {
		t.Fatalf("replay %+v of %+v", again, first)
	}
	msg, err := c.Messages.Get(ctx, topic, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	var data string
	if err := msg.Decode(&data); err != nil || data != "a" || msg.Key == nil || *msg.Key != "user-1" || msg.Headers["h"] != "v" {
		t.Fatalf("message %+v (%v)", msg, err)
	}
	if err := msg.Ack(); !errors.Is(err, queuecore.ErrNotDelivered) {
		t.Fatalf("ack of a read message: %v", err)
	}
	explicit, err := c.Publish(ctx, topic, nil, &queuecore.PublishParams{Partition: queuecore.Int(0)})
	if err != nil || explicit.Partition != 0 {
		t.Fatalf("explicit partition: %+v %v", explicit, err)
	}
	if _, err := c.Publish(ctx, unique("missing"), 1, nil); !errors.Is(err, queuecore.ErrTopicNotFound) {
		t.Fatalf("missing topic: %v", err)
	}
}

func TestPublishBatch(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 2)
	res, err := c.PublishBatch(ctx, topic, []any{
		map[string]any{"type": "order.created", "orderId": "ord_a1b2c3", "amount": 4500},
		map[string]any{"type": "order.created", "orderId": "ord_d4e5f6", "amount": 12000},
		queuecore.BatchMessage{Data: map[string]any{"type": "order.updated"}, Key: "k", IdempotencyKey: "batch-item-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 3 || len(res.Messages) != 3 || res.Durability == "" {
		t.Fatalf("batch %+v", res)
	}
	again, err := c.PublishBatch(ctx, topic, []any{&queuecore.BatchMessage{Data: 1, IdempotencyKey: "batch-item-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Messages[0].Replayed || again.Messages[0].ID != res.Messages[2].ID {
		t.Fatalf("replayed item %+v vs %+v", again.Messages[0], res.Messages[2])
	}
	page, err := c.Messages.Read(ctx, topic, res.Messages[0].Partition, &queuecore.ReadParams{FromOffset: queuecore.Int64(0)})
	if err != nil || len(page.Data) == 0 {
		t.Fatalf("read %+v %v", page, err)
	}
	if _, err := c.PublishBatch(ctx, topic, nil); !errors.Is(err, queuecore.ErrInvalidRequest) {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestInvalidKeyIsUnauthorized(t *testing.T) {
	c := newClient(t, option.WithAPIKey("pq_test_sk_00000000000000000000000000000000"))
	_, err := c.Topics.List(testCtx(t), nil).All()
	if !errors.Is(err, queuecore.ErrInvalidAPIKey) || !queuecore.IsUnauthorized(err) {
		t.Fatalf("%v", err)
	}
}

func TestHealth(t *testing.T) {
	c := newClient(t)
	h := c.Health(testCtx(t))
	if h.Status != "ok" || !h.OK() || h.Version == "" || len(h.Checks) == 0 {
		t.Fatalf("health %+v", h)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	down := newClient(t, option.WithBaseURL(fmt.Sprintf("http://127.0.0.1:%d", port)))
	if h := down.Health(testCtx(t)); h.Status != "down" || h.OK() || h.Error == "" {
		t.Fatalf("unreachable health %+v", h)
	}
}

type collected struct {
	mu   sync.Mutex
	msgs []*queuecore.Message
}

func (c *collected) add(m *queuecore.Message) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
	return len(c.msgs)
}

func (c *collected) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func consumeAll(t *testing.T, transport queuecore.Transport) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 3)
	const n = 60
	batch := make([]any, n)
	for i := range batch {
		batch[i] = queuecore.BatchMessage{Data: map[string]int{"i": i}, Key: fmt.Sprint("k", i%5)}
	}
	if _, err := c.PublishBatch(ctx, topic, batch); err != nil {
		t.Fatal(err)
	}
	var errs []error
	var errMu sync.Mutex
	consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: "g", StartFrom: "earliest", Transport: transport,
		OnError: func(err error) { errMu.Lock(); errs = append(errs, err); errMu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	got := &collected{}
	done := make(chan error, 1)
	go func() {
		done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
			got.add(msg)
			return msg.Ack()
		})
	}()
	eventually(t, "every message handled", func() bool { return got.len() >= n })
	if err := consumer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v", err)
	}
	// Offset order per partition, each message once, with the documented fields.
	last := map[int]int64{}
	ids := map[string]bool{}
	for _, m := range got.msgs {
		if prev, ok := last[m.Partition]; ok && m.Offset <= prev {
			t.Fatalf("partition %d: offset %d after %d", m.Partition, m.Offset, prev)
		}
		last[m.Partition] = m.Offset
		if ids[m.ID] || m.Topic != topic || m.Attempt != 1 || m.AckDeadline.IsZero() {
			t.Fatalf("message %+v", m)
		}
		ids[m.ID] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct messages, want %d", len(ids), n)
	}
	// Close confirmed the acks: the group's lag is 0 on every partition.
	offsets, err := c.Offsets.List(ctx, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offsets {
		if o.Lag != 0 {
			t.Fatalf("after Close: %+v", offsets)
		}
	}
	if err := got.msgs[0].Ack(); !errors.Is(err, queuecore.ErrConsumerClosed) {
		t.Fatalf("ack after close: %v", err)
	}
	errMu.Lock()
	defer errMu.Unlock()
	if len(errs) != 0 {
		t.Fatalf("errors reported: %v", errs)
	}
}

func TestConsumeWebSocket(t *testing.T) { consumeAll(t, queuecore.TransportWebSocket) }

func TestConsumePull(t *testing.T) { consumeAll(t, queuecore.TransportPull) }

func TestConsumeSSE(t *testing.T) { consumeAll(t, queuecore.TransportSSE) }

func TestConsumeMissingTopicEndsStart(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	for _, transport := range []queuecore.Transport{queuecore.TransportWebSocket, queuecore.TransportPull, queuecore.TransportSSE} {
		consumer, err := c.Consume(ctx, unique("missing"), queuecore.ConsumeParams{Group: "g", Transport: transport, OnError: func(error) {}})
		if err != nil {
			t.Fatal(err)
		}
		err = consumer.Start(ctx, func(context.Context, *queuecore.Message) error { return nil })
		if !errors.Is(err, queuecore.ErrTopicNotFound) {
			t.Fatalf("%s: Start returned %v", transport, err)
		}
	}
}

func TestAlertsAndTokens(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	ep, err := c.Alerts.Set(ctx, queuecore.AlertEndpointParams{URL: "https://hooks.example.com/queuecore"})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Secret == "" || ep.State == "" {
		t.Fatalf("endpoint %+v", ep)
	}
	got, err := c.Alerts.Get(ctx)
	if err != nil || got.URL != ep.URL || got.Secret != "" {
		t.Fatalf("get %+v %v", got, err)
	}
	if _, err := c.Alerts.Deliveries(ctx, nil).All(); err != nil {
		t.Fatal(err)
	}
	if err := c.Alerts.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Alerts.Get(ctx); !queuecore.IsNotFound(err) {
		t.Fatalf("get deleted endpoint: %v", err)
	}
	topic := newTopic(t, c, 1)
	tok, err := c.CreateWebSocketToken(ctx, topic, "g")
	if err != nil || tok.Token == "" {
		t.Fatalf("token %+v %v", tok, err)
	}
}

func TestDataRoundTrip(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	raw := json.RawMessage(`{"nested":[1,2,{"x":null}],"s":"é"}`)
	res, err := c.Publish(ctx, topic, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Messages.Get(ctx, topic, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(raw, &a)
	_ = json.Unmarshal(msg.Data, &b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("%s != %s", msg.Data, raw)
	}
	_ = time.Second
}
