package queuecore_test

// A consumer group's controls from the SDK against a real server: offsets, seeks, nacks and extends, pauses,
// dead letters with their replay and history.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

func TestGroupsOffsetsAndDLQ(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	const group = "dlq-group"
	for i := 0; i < 3; i++ {
		if _, err := c.Publish(ctx, topic, map[string]int{"i": i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Every attempt fails; with no retries the messages go straight to the DLQ.
	consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: group, StartFrom: "earliest", OnError: func(error) {},
		DeadLetter: &queuecore.DeadLetter{MaxRetries: queuecore.Int(0), RetryDelay: "0s", AlertThreshold: queuecore.Int(100)}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
			return fmt.Errorf("cannot process %d", msg.Offset)
		})
	}()
	var page *queuecore.DeadLetterPage
	eventually(t, "three dead letters", func() bool {
		page, err = c.DLQ.Inspect(ctx, topic, queuecore.DLQInspectParams{Group: group, Limit: 10})
		return err == nil && page.Total == 3
	})
	if page.Data[0].Reason == "" || page.Data[0].MessageID == "" {
		t.Fatalf("dead letter %+v", page.Data[0])
	}
	groups, err := c.ConsumerGroups.List(ctx, topic)
	if err != nil || len(groups) != 1 || groups[0].Name != group || groups[0].Consumers != 1 {
		t.Fatalf("groups %+v %v", groups, err)
	}
	desc, err := c.ConsumerGroups.Describe(ctx, topic, group)
	if err != nil || desc.Config.DeadLetter == nil || *desc.Config.DeadLetter.MaxRetries != 0 || len(desc.Partitions) != 1 {
		t.Fatalf("describe %+v %v", desc, err)
	}
	if _, err := c.ConsumerGroups.ResetOffsets(ctx, topic, group, queuecore.ResetOffsetsParams{To: "earliest"}); !errors.Is(err, queuecore.ErrGroupActive) {
		t.Fatalf("reset of an active group: %v", err)
	}
	if err := consumer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	off, err := c.Offsets.Get(ctx, topic, queuecore.OffsetGetParams{Group: group, Partition: 0})
	if err != nil || off.Current != 3 || off.Latest != 3 || off.Lag != 0 {
		t.Fatalf("offset %+v %v", off, err)
	}
	// Replay one, delete one, replay the rest; then a consumer that acks gets the two replayed back.
	sort.Slice(page.Data, func(i, j int) bool { return page.Data[i].Offset < page.Data[j].Offset })
	if r, err := c.DLQ.Replay(ctx, topic, group, page.Data[0].MessageID); err != nil || !r.Replayed {
		t.Fatalf("replay %+v %v", r, err)
	}
	if err := c.DLQ.Delete(ctx, topic, group, page.Data[1].MessageID); err != nil {
		t.Fatal(err)
	}
	if r, err := c.DLQ.ReplayAll(ctx, topic, group, nil); err != nil || r.Replayed != 1 {
		t.Fatalf("replay all %+v %v", r, err)
	}
	audit, err := c.DLQ.Audit(ctx, topic, group, &queuecore.ListParams{Limit: 1}).All()
	if err != nil || len(audit) != 3 {
		t.Fatalf("audit %+v %v", audit, err)
	}
	if _, err := c.ConsumerGroups.Update(ctx, topic, group, queuecore.ConsumerGroupUpdateParams{RemoveDeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	consumer, err = c.Consume(ctx, topic, queuecore.ConsumeParams{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	got := &collected{}
	go func() {
		done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
			got.add(msg)
			return msg.Ack()
		})
	}()
	eventually(t, "two replayed messages", func() bool { return got.len() >= 2 })
	if err := consumer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	replayed := map[string]bool{page.Data[0].MessageID: true, page.Data[2].MessageID: true}
	for _, m := range got.msgs {
		if !replayed[m.ID] || m.Attempt != 1 {
			t.Fatalf("redelivered %+v, want one of %v", m, replayed)
		}
	}
	// Offsets: seek, reset (while stopped too), and the stopped-group reset.
	if s, err := c.Offsets.Seek(ctx, topic, queuecore.OffsetSeekParams{Group: group, Partition: 0, Offset: queuecore.Int64(1)}); err != nil || s.Offset != 1 {
		t.Fatalf("seek %+v %v", s, err)
	}
	if pos, err := c.Offsets.Reset(ctx, topic, queuecore.OffsetResetParams{Group: group, To: "latest"}); err != nil || pos[0].Current != 3 {
		t.Fatalf("reset %+v %v", pos, err)
	}
	if pos, err := c.ConsumerGroups.ResetOffsets(ctx, topic, group, queuecore.ResetOffsetsParams{To: queuecore.ResetTo(2)}); err != nil || pos[0].Current != 2 {
		t.Fatalf("reset-offsets %+v %v", pos, err)
	}
	if err := c.ConsumerGroups.Delete(ctx, topic, group); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ConsumerGroups.Describe(ctx, topic, group); !errors.Is(err, queuecore.ErrGroupNotFound) {
		t.Fatalf("describe deleted group: %v", err)
	}
}

func TestNackRedeliversAndExtendHolds(t *testing.T) {
	for _, transport := range []queuecore.Transport{queuecore.TransportWebSocket, queuecore.TransportPull, queuecore.TransportSSE} {
		t.Run(string(transport), func(t *testing.T) {
			c := newClient(t)
			ctx := testCtx(t)
			topic := newTopic(t, c, 1)
			if _, err := c.Publish(ctx, topic, "payload", nil); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var attempts []int
			var reported []error
			consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: "g", StartFrom: "earliest", Transport: transport,
				OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
					mu.Lock()
					attempts = append(attempts, msg.Attempt)
					mu.Unlock()
					if err := msg.Extend(time.Minute); err != nil {
						return err
					}
					if msg.Attempt == 1 {
						return msg.Nack("try again", 0)
					}
					return msg.Ack()
				})
			}()
			eventually(t, "the redelivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) >= 2 })
			if err := consumer.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 || len(reported) != 0 {
				t.Fatalf("attempts %v, errors %v", attempts, reported)
			}
			off, err := c.Offsets.Get(ctx, topic, queuecore.OffsetGetParams{Group: "g", Partition: 0})
			if err != nil || off.Lag != 0 {
				t.Fatalf("%+v %v", off, err)
			}
		})
	}
}

func TestPauseNackDeadLetterAndHistory(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	const group = "paused-group"
	made, err := c.ConsumerGroups.Update(ctx, topic, group, queuecore.ConsumerGroupUpdateParams{
		DeadLetter: &queuecore.DeadLetter{MaxRetries: queuecore.Int(5), RetryDelay: "0s", Breaker: &queuecore.Breaker{MinAttempts: queuecore.Int(20)}},
	})
	if err != nil || made.Config.DeadLetter == nil || made.Config.DeadLetter.Breaker == nil || *made.Config.DeadLetter.Breaker.MinAttempts != 20 {
		t.Fatalf("breaker config %+v %v", made, err)
	}
	off, err := c.ConsumerGroups.Update(ctx, topic, group, queuecore.ConsumerGroupUpdateParams{
		DeadLetter: &queuecore.DeadLetter{MaxRetries: queuecore.Int(5), RetryDelay: "0s", RemoveBreaker: true},
	})
	if err != nil || off.Config.DeadLetter == nil || off.Config.DeadLetter.Breaker != nil {
		t.Fatalf("breaker off %+v %v", off, err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	paused, err := c.ConsumerGroups.Pause(ctx, topic, group, queuecore.PauseParams{Until: until})
	if err != nil || !paused.Paused || paused.Until == nil || !paused.Until.Equal(until) {
		t.Fatalf("pause %+v %v", paused, err)
	}
	desc, err := c.ConsumerGroups.Describe(ctx, topic, group)
	if err != nil || !desc.Paused || desc.PausedReason != "user" || desc.PausedUntil == nil {
		t.Fatalf("describe paused %+v %v", desc, err)
	}
	sent, err := c.Publish(ctx, topic, map[string]int{"i": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: group, StartFrom: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	got := &collected{}
	done := make(chan error, 1)
	go func() {
		done <- consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
			got.add(msg)
			if msg.Attempt == 1 {
				return msg.Nack("flaky", 0)
			}
			return msg.NackDeadLetter("poison")
		})
	}()
	time.Sleep(1500 * time.Millisecond)
	if got.len() != 0 {
		t.Fatalf("delivered while paused: %d", got.len())
	}
	if r, err := c.ConsumerGroups.Resume(ctx, topic, group); err != nil || r.Paused {
		t.Fatalf("resume %+v %v", r, err)
	}
	var page *queuecore.DeadLetterPage
	eventually(t, "the dead letter", func() bool {
		page, err = c.DLQ.Inspect(ctx, topic, queuecore.DLQInspectParams{Group: group, Limit: 10})
		return err == nil && page.Total == 1
	})
	if err := consumer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	entry := page.Data[0]
	if entry.MessageID != sent.ID || entry.RetryCount != 1 || len(entry.Attempts) != 2 ||
		entry.Attempts[0].Reason != "flaky" || entry.Attempts[1].Reason != "poison" || !entry.FirstFailedAt.Equal(entry.Attempts[0].At) {
		t.Fatalf("dead letter %+v", entry)
	}
}
