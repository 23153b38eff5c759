package queuecore_test

import (
	"errors"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

func TestSchedulesLifecycle(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	created, err := c.Schedules.Create(ctx, queuecore.ScheduleCreateParams{
		Topic: topic, Every: "1s", Data: map[string]any{"tick": 1}, Headers: map[string]string{"team": "ops"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if created.Topic != topic || created.Every == nil || *created.Every != "1s" || created.Cron != nil ||
		created.Timezone != "UTC" || created.Status != "active" || created.NextRunAt == nil || created.CreatedAt.IsZero() {
		t.Fatalf("created %+v", created)
	}
	got, err := c.Schedules.Get(ctx, created.ID)
	if err != nil || got.ID != created.ID || string(got.Data) != `{"tick":1}` {
		t.Fatalf("get %+v %v", got, err)
	}
	all, err := c.Schedules.List(ctx, &queuecore.ListParams{Limit: 1}).All()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range all {
		found = found || s.ID == created.ID
	}
	if !found {
		t.Fatalf("%s not listed in %d schedules", created.ID, len(all))
	}

	var runs []queuecore.ScheduleRun
	for deadline := time.Now().Add(20 * time.Second); len(runs) < 2 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if runs, err = c.Schedules.Runs(ctx, created.ID); err != nil {
			t.Fatal(err)
		}
	}
	if len(runs) < 2 || !runs[0].At.After(runs[1].At) {
		t.Fatalf("runs %+v", runs)
	}
	msg, err := c.Messages.Get(ctx, topic, runs[0].MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Headers["queuecore-schedule"] != created.ID || msg.Headers["team"] != "ops" || msg.Offset != runs[0].Offset {
		t.Fatalf("message %+v", msg)
	}

	paused, err := c.Schedules.Pause(ctx, created.ID)
	if err != nil || paused.Status != "paused" || paused.NextRunAt != nil {
		t.Fatalf("pause %+v %v", paused, err)
	}
	if resumed, err := c.Schedules.Resume(ctx, created.ID); err != nil || resumed.Status != "active" {
		t.Fatalf("resume %+v %v", resumed, err)
	}
	if err := c.Schedules.Delete(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Schedules.Get(ctx, created.ID)
	var qerr *queuecore.Error
	if !errors.As(err, &qerr) || qerr.Code != "NOT_FOUND" || !queuecore.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestSchedulesRefusalsNameTheField(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	_, err := c.Schedules.Create(ctx, queuecore.ScheduleCreateParams{Topic: topic, Cron: "* * *", Data: 1})
	var qerr *queuecore.Error
	if !errors.Is(err, queuecore.ErrInvalidRequest) || !errors.As(err, &qerr) || len(qerr.Details) == 0 || qerr.Details[0].Field != "cron" {
		t.Fatalf("bad cron: %v", err)
	}
	_, err = c.Schedules.Create(ctx, queuecore.ScheduleCreateParams{Topic: unique("none"), Every: "1m", Data: nil})
	if !errors.Is(err, queuecore.ErrTopicNotFound) {
		t.Fatalf("unknown topic: %v", err)
	}
}
