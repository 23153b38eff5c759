package queuecore

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// PushParams makes a group a push group (ConsumerGroupUpdateParams.Push): every message is POSTed to
// URL. Zero fields keep the server's value; URL is required the first time.
type PushParams struct {
	URL            string   `json:"url,omitempty"`            // https:// in production
	MaxConcurrency int      `json:"maxConcurrency,omitempty"` // POSTs in flight per API process; default 16
	Rate           *float64 `json:"rate,omitempty"`           // messages per second; nil keeps it (default: no limit)
	Timeout        string   `json:"timeout,omitempty"`        // per POST, "100ms" to "5m"; default "10s"
	Ordered        *bool    `json:"ordered,omitempty"`        // one in flight per partition, in offset order
	Mode           string   `json:"mode,omitempty"`           // "binary" (default) or "structured" CloudEvents
}

// PushConfig is a push group's config.push.
type PushConfig struct {
	URL            string   `json:"url"`
	MaxConcurrency int      `json:"maxConcurrency"`
	Rate           *float64 `json:"rate"` // nil: no limit
	Timeout        string   `json:"timeout"`
	Ordered        bool     `json:"ordered"`
	Mode           string   `json:"mode"`
	// Secret is masked (whsec_…abcd) except in the answer of the Update that first set Push: keep it.
	Secret  string `json:"secret"`
	Breaker string `json:"breaker"` // "closed" or "open", as the delivery workers last wrote it
}

// PushSecret answers ConsumerGroups.RotatePushSecret.
type PushSecret struct {
	Secret string `json:"secret"`
}

// PushAttempt is one POST of a message to a push group's URL.
type PushAttempt struct {
	MessageID string    `json:"messageId"`
	Attempt   int       `json:"attempt"`
	At        time.Time `json:"at"`
	Status    *int      `json:"status"` // nil when no answer came (timeout, connection error)
	LatencyMs int       `json:"latencyMs"`
	Error     *string   `json:"error"`
}

// PushAttemptsParams: Limit 1 to 1000 (0: the server's default, 50).
type PushAttemptsParams struct {
	Limit int
}

// RotatePushSecret makes a new signing secret for a push group, answered once; the previous one keeps
// signing beside it for 24 h (VerifyWebhook with both while switching).
func (s *ConsumerGroupService) RotatePushSecret(ctx context.Context, topic, group string, opts ...option.RequestOption) (*PushSecret, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out PushSecret
	if _, err := c.do(ctx, request{method: "POST", path: groupPath(topic, group) + "/push/rotate-secret"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PushAttempts returns a push group's most recent POSTs, newest first.
func (s *ConsumerGroupService) PushAttempts(ctx context.Context, topic, group string, params PushAttemptsParams, opts ...option.RequestOption) ([]PushAttempt, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	query := url.Values{}
	if params.Limit > 0 {
		query.Set("limit", strconv.Itoa(params.Limit))
	}
	var out struct {
		Data []PushAttempt `json:"data"`
	}
	if _, err := c.do(ctx, request{method: "GET", path: groupPath(topic, group) + "/push/attempts", query: query}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}
