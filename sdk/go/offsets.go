package queuecore

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// Offset is a group's position on one partition.
type Offset struct {
	Current int64 `json:"current"` // everything below it is acked
	Latest  int64 `json:"latest"`  // the next offset to be written
	Lag     int64 `json:"lag"`     // Latest − Current
}

// PartitionOffset is an Offset naming its partition (Offsets.List).
type PartitionOffset struct {
	Partition int `json:"partition"`
	Offset
}

// SeekResult is where Offsets.Seek moved the partition.
type SeekResult struct {
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
}

// OffsetGetParams names a group's partition.
type OffsetGetParams struct {
	Group     string
	Partition int
}

// OffsetSeekParams moves a partition of a group to Offset, or to the first message at or after
// Timestamp (exactly one of them). Allowed while consuming: delivery resumes there.
type OffsetSeekParams struct {
	Group     string    `json:"-"`
	Partition int       `json:"partition"`
	Offset    *int64    `json:"offset,omitempty"`
	Timestamp time.Time `json:"-"`
}

// OffsetResetParams moves a group (one Partition, or all when nil) To "earliest" or "latest"; allowed
// while consuming.
type OffsetResetParams struct {
	Group     string
	To        string
	Partition *int
}

// OffsetService is client.Offsets.
type OffsetService struct{ c *Client }

// Get returns the group's current, latest and lag on one partition.
func (s *OffsetService) Get(ctx context.Context, topic string, params OffsetGetParams, opts ...option.RequestOption) (*Offset, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var o Offset
	q := url.Values{"partition": {strconv.Itoa(params.Partition)}}
	if _, err := c.do(ctx, request{method: "GET", path: groupPath(topic, params.Group) + "/offsets", query: q}, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// List returns the group's offsets on every partition.
func (s *OffsetService) List(ctx context.Context, topic, group string, opts ...option.RequestOption) ([]PartitionOffset, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []PartitionOffset `json:"data"`
	}
	if _, err := c.do(ctx, request{method: "GET", path: groupPath(topic, group) + "/offsets"}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Seek moves one partition of the group to an offset or a timestamp. An offset outside the partition's
// range is clamped into it: the result says where it landed, and a warning is logged (WithLogger) when
// that differs from what was asked.
func (s *OffsetService) Seek(ctx context.Context, topic string, params OffsetSeekParams, opts ...option.RequestOption) (*SeekResult, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	body := map[string]any{"partition": params.Partition}
	switch {
	case params.Offset != nil && !params.Timestamp.IsZero():
		return nil, &Error{Code: "INVALID_REQUEST", Message: "Seek takes Offset or Timestamp, not both"}
	case params.Offset != nil:
		body["offset"] = *params.Offset
	case !params.Timestamp.IsZero():
		body["timestamp"] = params.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z")
	default:
		return nil, &Error{Code: "INVALID_REQUEST", Message: "Seek takes Offset or Timestamp"}
	}
	var out SeekResult
	if _, err := c.do(ctx, request{method: "POST", path: groupPath(topic, params.Group) + "/offsets/seek", body: body}, &out); err != nil {
		return nil, err
	}
	// An offset outside the partition's range is clamped into it: say so when it landed elsewhere.
	if params.Offset != nil && out.Offset != *params.Offset {
		c.log.Warn("queuecore: seek landed elsewhere than asked (the partition's range ends there)",
			"topic", topic, "group", params.Group, "partition", out.Partition, "asked", *params.Offset, "landed", out.Offset)
	}
	return &out, nil
}

// Reset moves the group to the earliest or latest offset.
func (s *OffsetService) Reset(ctx context.Context, topic string, params OffsetResetParams, opts ...option.RequestOption) ([]PartitionPosition, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	body := map[string]any{"to": params.To}
	if params.Partition != nil {
		body["partition"] = *params.Partition
	}
	var out struct {
		Data []PartitionPosition `json:"data"`
	}
	if _, err := c.do(ctx, request{method: "POST", path: groupPath(topic, params.Group) + "/offsets/reset", body: body}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}
