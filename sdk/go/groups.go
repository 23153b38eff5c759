package queuecore

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// DeadLetter configures a group's dead-letter queue: after MaxRetries failed attempts (nacks or ack
// timeouts, retried RetryDelay × 2^(n−1) apart) a message moves to the DLQ. Unset fields take the
// server's defaults (5 retries, "30s", alert at 100).
type DeadLetter struct {
	MaxRetries     *int   `json:"maxRetries,omitempty"`     // 0 to 100
	RetryDelay     string `json:"retryDelay,omitempty"`     // "0s" to "1h"
	AlertThreshold *int   `json:"alertThreshold,omitempty"` // DLQ depth that triggers the alert webhook
	// Breaker is the DLQ breaker; nil keeps the server's (on by default), RemoveBreaker turns it off.
	Breaker *Breaker `json:"breaker,omitempty"`
	// RemoveBreaker turns the DLQ breaker off (sent as "breaker": null).
	RemoveBreaker bool `json:"-"`
}

// MarshalJSON writes RemoveBreaker as "breaker": null.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	type plain DeadLetter
	raw, err := json.Marshal(plain(d))
	if err != nil || !d.RemoveBreaker {
		return raw, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	fields["breaker"] = json.RawMessage("null")
	return json.Marshal(fields)
}

// Breaker is the DLQ breaker: when, within Window, at least MinAttempts deliveries ended and more than
// FailureRate of them failed, the group pauses itself (PausedReason "dlq-breaker") and the alert endpoint
// gets a "dlq.breaker_tripped" event. Unset fields take the server's defaults (0.5, 100, "60s").
type Breaker struct {
	FailureRate *float64 `json:"failureRate,omitempty"` // 0 to below 1
	MinAttempts *int     `json:"minAttempts,omitempty"` // 1 to 1,000,000
	Window      string   `json:"window,omitempty"`      // "1s" to "1d"
}

// ConsumerGroupConfig is a group's settings.
type ConsumerGroupConfig struct {
	AckTimeout     string      `json:"ackTimeout"`     // "1s" to "12h"
	SessionTimeout string      `json:"sessionTimeout"` // "2s" to "5m"
	DeadLetter     *DeadLetter `json:"deadLetter"`     // nil without a DLQ
	MaxInFlight    int         `json:"maxInFlight"`    // unacked messages across all members; 0: no limit
	Rate           float64     `json:"rate"`           // messages per second to the group; 0: no limit
	Filter         string      `json:"filter"`         // only matching messages are delivered; "": all
	Push           *PushConfig `json:"push"`           // nil unless the group POSTs its messages to a URL
}

// FilterStart is where a changed filter starts to decide, in one partition.
type FilterStart struct {
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
}

// ConsumerGroupSummary is one group of ConsumerGroups.List.
type ConsumerGroupSummary struct {
	Name      string `json:"name"`
	Consumers int    `json:"consumers"` // live members
	Lag       int64  `json:"lag"`       // over all partitions
}

// ConsumerGroupPartition is one partition of a group.
type ConsumerGroupPartition struct {
	ID       int    `json:"id"`
	Consumer string `json:"consumer"` // the member holding it (csr_…), "" when unassigned
	Offset   int64  `json:"offset"`   // committed: everything below is acked
	Lag      int64  `json:"lag"`
}

// ConsumerGroup is a group with its partitions and config (ConsumerGroups.Describe).
type ConsumerGroup struct {
	Name       string                   `json:"name"`
	Topic      string                   `json:"topic"`
	Consumers  int                      `json:"consumers"`
	Partitions []ConsumerGroupPartition `json:"partitions"`
	Config     ConsumerGroupConfig      `json:"config"`
	// Only in the answer of an Update that changed the filter: per partition, the offset from which the
	// new filter decides (messages before it were delivered, or passed over, under the old one).
	FilterAppliesFrom []FilterStart `json:"filterAppliesFrom"`
	// Paused: no member receives messages (ConsumerGroups.Pause).
	Paused bool `json:"paused"`
	// PausedUntil is when the pause ends by itself; nil until resumed.
	PausedUntil *time.Time `json:"pausedUntil"`
	// PausedReason is "user" or "dlq-breaker"; "" when not paused.
	PausedReason string `json:"pausedReason"`
	// Expired counts the messages whose TTL passed before the group delivered them, since its creation.
	Expired int64 `json:"expired"`
}

// GroupPause answers ConsumerGroups.Pause and Resume.
type GroupPause struct {
	Paused bool       `json:"paused"`
	Until  *time.Time `json:"until"` // nil: until resumed
}

// PauseParams: Until, when not zero, ends the pause by itself.
type PauseParams struct {
	Until time.Time
}

// PartitionPosition is where a partition of a group stands after a reset.
type PartitionPosition struct {
	Partition int   `json:"partition"`
	Current   int64 `json:"current"`
}

// ConsumerGroupUpdateParams changes a group's config (it creates the group if needed); fields left
// zero keep their value. RemoveDeadLetter removes the DLQ; RemoveMaxInFlight, RemoveRate and
// RemoveFilter remove the group's flow control and filter; RemovePush turns push off.
type ConsumerGroupUpdateParams struct {
	AckTimeout       string
	SessionTimeout   string
	DeadLetter       *DeadLetter
	RemoveDeadLetter bool
	// MaxInFlight bounds the unacked messages across all members of the group (1 to 100,000).
	MaxInFlight       int
	RemoveMaxInFlight bool
	// Rate is the messages per second delivered to the group (> 0).
	Rate       float64
	RemoveRate bool
	// Filter delivers only matching messages, e.g. `headers.type = "order" AND hasPrefix(key, "eu-")`
	// (docs/consuming.md, "Filters"). A bad one is an *Error with Details on "filter".
	Filter       string
	RemoveFilter bool
	Push         *PushParams // the answer of the first Update that sets it holds the signing secret
	RemovePush   bool
}

// ResetOffsetsParams: To is "earliest", "latest", or an offset in decimal ("4800", see ResetTo).
type ResetOffsetsParams struct {
	To string
}

// ResetTo is the To of an offset number.
func ResetTo(offset int64) string { return strconv.FormatInt(offset, 10) }

func toValue(to string) any {
	if n, err := strconv.ParseInt(strings.TrimSpace(to), 10, 64); err == nil {
		return n
	}
	return to
}

// ConsumerGroupService is client.ConsumerGroups.
type ConsumerGroupService struct{ c *Client }

func groupPath(topic, group string) string {
	return "/v1/topics/" + seg(topic) + "/groups/" + seg(group)
}

// List returns the topic's groups with their consumers and lag.
func (s *ConsumerGroupService) List(ctx context.Context, topic string, opts ...option.RequestOption) ([]ConsumerGroupSummary, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []ConsumerGroupSummary `json:"data"`
	}
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/topics/" + seg(topic) + "/groups"}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Describe returns a group with its partitions and config. ErrGroupNotFound when there is none.
func (s *ConsumerGroupService) Describe(ctx context.Context, topic, group string, opts ...option.RequestOption) (*ConsumerGroup, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var g ConsumerGroup
	if _, err := c.do(ctx, request{method: "GET", path: groupPath(topic, group)}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Update merges params into the group's config, creating the group if needed.
func (s *ConsumerGroupService) Update(ctx context.Context, topic, group string, params ConsumerGroupUpdateParams, opts ...option.RequestOption) (*ConsumerGroup, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	body := map[string]any{}
	if params.AckTimeout != "" {
		body["ackTimeout"] = params.AckTimeout
	}
	if params.SessionTimeout != "" {
		body["sessionTimeout"] = params.SessionTimeout
	}
	if params.RemoveDeadLetter {
		body["deadLetter"] = json.RawMessage("null")
	} else if params.DeadLetter != nil {
		body["deadLetter"] = params.DeadLetter
	}
	null := json.RawMessage("null")
	if params.RemoveMaxInFlight {
		body["maxInFlight"] = null
	} else if params.MaxInFlight != 0 {
		body["maxInFlight"] = params.MaxInFlight
	}
	if params.RemoveRate {
		body["rate"] = null
	} else if params.Rate != 0 {
		body["rate"] = params.Rate
	}
	if params.RemoveFilter {
		body["filter"] = null
	} else if params.Filter != "" {
		body["filter"] = params.Filter
	}
	if params.RemovePush {
		body["push"] = json.RawMessage("null")
	} else if params.Push != nil {
		body["push"] = params.Push
	}
	var g ConsumerGroup
	if _, err := c.do(ctx, request{method: "PUT", path: groupPath(topic, group), body: body}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Delete removes a group (ErrGroupActive while members are connected).
func (s *ConsumerGroupService) Delete(ctx context.Context, topic, group string, opts ...option.RequestOption) error {
	c, err := s.c.with(opts)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, request{method: "DELETE", path: groupPath(topic, group)}, nil)
	return err
}

// ResetOffsets moves every partition of a stopped group to To; ErrGroupActive while members are
// connected (use Offsets.Reset or Offsets.Seek on a running group).
func (s *ConsumerGroupService) ResetOffsets(ctx context.Context, topic, group string, params ResetOffsetsParams, opts ...option.RequestOption) ([]PartitionPosition, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []PartitionPosition `json:"data"`
	}
	body := map[string]any{"to": toValue(params.To)}
	if _, err := c.do(ctx, request{method: "POST", path: groupPath(topic, group) + "/reset-offsets", body: body}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Pause pauses the group: no member receives messages (within a second, on every server) until
// params.Until or Resume; acks, nacks and extends still work. ErrGroupNotFound when there is none.
func (s *ConsumerGroupService) Pause(ctx context.Context, topic, group string, params PauseParams, opts ...option.RequestOption) (*GroupPause, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	body := map[string]any{}
	if !params.Until.IsZero() {
		body["until"] = params.Until.UTC().Format(time.RFC3339Nano)
	}
	var out GroupPause
	if _, err := c.do(ctx, request{method: "POST", path: groupPath(topic, group) + "/pause", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Resume ends the group's pause (a user's or the DLQ breaker's).
func (s *ConsumerGroupService) Resume(ctx context.Context, topic, group string, opts ...option.RequestOption) (*GroupPause, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out GroupPause
	if _, err := c.do(ctx, request{method: "POST", path: groupPath(topic, group) + "/resume"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
