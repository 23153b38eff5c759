package queuecore

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// Close's promises, against the real server TestMain started (its URL and a key are in the environment):
// the handler that runs finishes and its ack is confirmed; messages received but not handled are not
// acked (a new member gets them); no handler runs once Close has returned.
func TestCloseReleasesUnhandledMessages(t *testing.T) {
	for _, transport := range []Transport{TransportWebSocket, TransportPull, TransportSSE} {
		t.Run(string(transport), func(t *testing.T) { closeReleases(t, transport) })
	}
}

func closeReleases(t *testing.T, transport Transport) {
	if os.Getenv(EnvBaseURL) == "" {
		t.Skip("no server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The development key (the Example functions have the staging environment to themselves).
	c, err := NewClient(option.WithAPIKey(os.Getenv("QUEUECORE_GO_TEST_KEY")))
	if err != nil {
		t.Fatal(err)
	}
	topic := "go.close." + newIdempotencyKey()[6:18]
	if _, err := c.Topics.Create(ctx, TopicCreateParams{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	defer c.Topics.Delete(context.Background(), topic)
	batch := make([]any, 20)
	for i := range batch {
		batch[i] = i
	}
	if _, err := c.PublishBatch(ctx, topic, batch); err != nil {
		t.Fatal(err)
	}
	k, err := c.Consume(ctx, topic, ConsumeParams{Group: "g", StartFrom: "earliest", MaxInFlight: 10, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Int32
	var closed atomic.Bool
	var lateRuns atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- k.Start(ctx, func(ctx context.Context, msg *Message) error {
			if closed.Load() {
				lateRuns.Add(1)
			}
			if handled.Add(1) == 1 {
				close(started)
				<-release
			}
			return msg.Ack()
		})
	}()
	<-started
	closeErr := make(chan error, 1)
	go func() {
		err := k.Close(ctx)
		closed.Store(true)
		closeErr <- err
	}()
	for !k.isStopping() {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-closeErr; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 1 || lateRuns.Load() != 0 {
		t.Fatalf("handled %d messages, %d after Close returned; want 1 and 0", handled.Load(), lateRuns.Load())
	}
	off, err := c.Offsets.Get(ctx, topic, OffsetGetParams{Group: "g", Partition: 0})
	if err != nil || off.Current != 1 {
		t.Fatalf("after Close: %+v %v (want current 1: the one handled message acked, no other)", off, err)
	}
	// The unhandled messages were released: a new member gets them all, from offset 1.
	k2, err := c.Consume(ctx, topic, ConsumeParams{Group: "g", Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	// Released messages count as redeliveries: they need not come before the never-delivered ones.
	var mu sync.Mutex
	offsets := map[int64]bool{}
	go func() {
		done <- k2.Start(ctx, func(ctx context.Context, msg *Message) error {
			mu.Lock()
			offsets[msg.Offset] = true
			mu.Unlock()
			return msg.Ack()
		})
	}()
	for {
		mu.Lock()
		n := len(offsets)
		mu.Unlock()
		if n >= 19 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d of the 19 released and undelivered messages came", n)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := k2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	for o := int64(1); o < 20; o++ {
		if !offsets[o] {
			t.Fatalf("offset %d never came back (got %v)", o, offsets)
		}
	}
	if offsets[0] {
		t.Fatal("the acked message 0 was delivered again")
	}
}

func TestAnExtendSettledInTheSameBatchIsNotSent(t *testing.T) {
	items := []settlement{
		{kind: "extend", id: "a"}, {kind: "ack", id: "a"},
		{kind: "extend", id: "b"}, {kind: "nack", id: "b"},
		{kind: "extend", id: "c"},
		{kind: "ack", id: "d"}, {kind: "extend", id: "d"}, // after the ack: the application's own doing, kept
	}
	got := withoutSupersededExtends(items)
	want := []settlement{{kind: "ack", id: "a"}, {kind: "nack", id: "b"}, {kind: "extend", id: "c"},
		{kind: "ack", id: "d"}, {kind: "extend", id: "d"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %+v", got)
		}
	}
}
