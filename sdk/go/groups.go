package queuecore

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/queuecore/queuecore-go/option"
)

// DeadLetter configures a group's dead-letter queue: after MaxRetries failed attempts (nacks or ack
// timeouts, retried RetryDelay × 2^(n−1) apart) a message moves to the DLQ. Unset fields take the
// server's defaults (5 retries, "30s", alert at 100).
type DeadLetter struct {
	MaxRetries     *int   `json:"maxRetries,omitempty"`     // 0 to 100
	RetryDelay     string `json:"retryDelay,omitempty"`     // "0s" to "1h"
	AlertThreshold *int   `json:"alertThreshold,omitempty"` // DLQ depth that triggers the alert webhook
}

// ConsumerGroupConfig is a group's settings.
type ConsumerGroupConfig struct {
	AckTimeout     string      `json:"ackTimeout"`     // "1s" to "12h"
	SessionTimeout string      `json:"sessionTimeout"` // "2s" to "5m"
	DeadLetter     *DeadLetter `json:"deadLetter"`     // nil without a DLQ
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
	// Expired counts the messages whose TTL passed before the group delivered them, since its creation.
	Expired int64 `json:"expired"`
}

// PartitionPosition is where a partition of a group stands after a reset.
type PartitionPosition struct {
	Partition int   `json:"partition"`
	Current   int64 `json:"current"`
}

// ConsumerGroupUpdateParams changes a group's config (it creates the group if needed); fields left
// zero keep their value. RemoveDeadLetter removes the DLQ.
type ConsumerGroupUpdateParams struct {
	AckTimeout       string
	SessionTimeout   string
	DeadLetter       *DeadLetter
	RemoveDeadLetter bool
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
