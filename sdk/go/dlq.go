package queuecore

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// DeadLetterMessage is a message in a group's dead-letter queue and why it failed.
type DeadLetterMessage struct {
	MessageID  string            `json:"messageId"` // the original id; a replay delivers it under it
	Data       json.RawMessage   `json:"data"`
	Key        *string           `json:"key"`
	Headers    map[string]string `json:"headers"`
	Partition  int               `json:"partition"`
	Offset     int64             `json:"offset"`
	Reason     string            `json:"reason"`     // the last nack's reason, or "ack timeout"
	RetryCount int               `json:"retryCount"` // retries made before it was dead-lettered
	FailedAt   time.Time         `json:"failedAt"`
	// FirstFailedAt is when its first failed attempt failed.
	FirstFailedAt time.Time `json:"firstFailedAt"`
	// Attempts are every failed attempt, oldest first (the last is Reason at FailedAt).
	Attempts []FailedAttempt `json:"attempts"`
}

// FailedAttempt is one failed delivery attempt of a dead letter: a nack (its reason), an ack timeout,
// expiry.
type FailedAttempt struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// DeadLetterPage is one page of DLQ.Inspect, oldest first.
type DeadLetterPage struct {
	Data       []DeadLetterMessage `json:"data"`
	Total      int                 `json:"total"` // messages in the DLQ
	NextCursor string              `json:"nextCursor"`
}

// ReplayResult answers DLQ.Replay.
type ReplayResult struct {
	MessageID string `json:"messageId"`
	Replayed  bool   `json:"replayed"`
}

// ReplayAllResult answers DLQ.ReplayAll.
type ReplayAllResult struct {
	Replayed int `json:"replayed"` // messages sent back to the group
}

// AuditActor is who replayed or deleted.
type AuditActor struct {
	Type string `json:"type"` // key or user
	ID   string `json:"id"`
}

// AuditEntry is one replay or delete in a DLQ.
type AuditEntry struct {
	ID        string     `json:"id"`
	Action    string     `json:"action"` // replay, replay_all or delete
	MessageID string     `json:"messageId"`
	Count     int        `json:"count"`
	Actor     AuditActor `json:"actor"`
	At        time.Time  `json:"at"`
}

// DLQInspectParams names the group and pages its DLQ.
type DLQInspectParams struct {
	Group  string
	Limit  int
	Cursor string
}

// ReplayAllParams throttles DLQ.ReplayAll to Rate messages a second when positive (nil: no limit).
type ReplayAllParams struct {
	Rate float64
}

// DLQService is client.DLQ.
type DLQService struct{ c *Client }

func dlqPath(topic, group string) string { return groupPath(topic, group) + "/dlq" }

// Inspect returns one page of the group's dead letters (a group without a DLQ has an empty one).
func (s *DLQService) Inspect(ctx context.Context, topic string, params DLQInspectParams, opts ...option.RequestOption) (*DeadLetterPage, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if params.Limit > 0 {
		q.Set("limit", strconv.Itoa(params.Limit))
	}
	if params.Cursor != "" {
		q.Set("cursor", params.Cursor)
	}
	var page DeadLetterPage
	if _, err := c.do(ctx, request{method: "GET", path: dlqPath(topic, params.Group), query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Replay sends one dead letter back to the group, under its original id, with a fresh retry budget.
func (s *DLQService) Replay(ctx context.Context, topic, group, messageID string, opts ...option.RequestOption) (*ReplayResult, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out ReplayResult
	body := map[string]string{"messageId": messageID}
	if _, err := c.do(ctx, request{method: "POST", path: dlqPath(topic, group) + "/replay", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplayAll sends every dead letter back to the group (params may be nil).
func (s *DLQService) ReplayAll(ctx context.Context, topic, group string, params *ReplayAllParams, opts ...option.RequestOption) (*ReplayAllResult, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	body := map[string]any{}
	if params != nil && params.Rate > 0 {
		body["rate"] = params.Rate
	}
	var out ReplayAllResult
	if _, err := c.do(ctx, request{method: "POST", path: dlqPath(topic, group) + "/replay-all", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete drops one dead letter for good.
func (s *DLQService) Delete(ctx context.Context, topic, group, messageID string, opts ...option.RequestOption) error {
	c, err := s.c.with(opts)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, request{method: "DELETE", path: dlqPath(topic, group) + "/" + seg(messageID)}, nil)
	return err
}

// Audit iterates over every replay and delete of the group's DLQ (params may be nil).
func (s *DLQService) Audit(ctx context.Context, topic, group string, params *ListParams, opts ...option.RequestOption) *Iter[AuditEntry] {
	c, err := s.c.with(opts)
	if err != nil {
		return failedIter[AuditEntry](ctx, err)
	}
	first := true
	return newIter(ctx, func(ctx context.Context, cursor string) ([]AuditEntry, string, error) {
		q := url.Values(params.query())
		if first && params != nil {
			cursor = params.Cursor
		}
		first = false
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Data       []AuditEntry `json:"data"`
			NextCursor string       `json:"nextCursor"`
		}
		_, err := c.do(ctx, request{method: "GET", path: dlqPath(topic, group) + "/audit", query: q}, &page)
		return page.Data, page.NextCursor, err
	})
}
