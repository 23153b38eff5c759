package queuecore

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

func itoa(v int) string { return strconv.Itoa(v) }

// Topic is a named, partitioned log with a retention and a delivery guarantee.
type Topic struct {
	ID         string    `json:"id"`         // top_…
	Name       string    `json:"name"`       //
	Partitions int       `json:"partitions"` // 1–256; can be increased
	Retention  string    `json:"retention"`  // <n>m, <n>h or <n>d
	Delivery   string    `json:"delivery"`   // exactly-once or at-least-once
	Replicas   int       `json:"replicas"`   // copies the engine keeps of each message: 1, 3 or 5, fixed at creation
	Status     string    `json:"status"`     // active
	CreatedAt  time.Time `json:"createdAt"`
}

// PartitionDetail is the offsets and size of one partition.
type PartitionDetail struct {
	ID             int   `json:"id"`
	EarliestOffset int64 `json:"earliestOffset"` // the first retained offset
	LatestOffset   int64 `json:"latestOffset"`   // the next offset to be written
	Messages       int64 `json:"messages"`
	Bytes          int64 `json:"bytes"` // size on disk
	// Where the partition's copies live (server and zone), the leader first (one on a single-node server).
	Replicas []Replica `json:"replicas"`
}

// Replica is one copy of a partition.
type Replica struct {
	Server string `json:"server"` // the server holding it
	// The availability zone of its server (a NATS server's az:<zone> tag; on a single-node server, the
	// zone it is configured with); nil when not known.
	Zone    *string `json:"zone"`
	Leader  bool    `json:"leader"`  // this copy takes the partition's writes
	Current bool    `json:"current"` // it has everything the leader acknowledged
	// Operations it has yet to apply to catch up with the leader (0 for the leader and a caught-up copy);
	// nil when the leader cannot reach it.
	Lag *int64 `json:"lag"`
}

// TopicDetail is a topic with per-partition offsets and sizes (Topics.Get).
type TopicDetail struct {
	Topic
	PartitionDetails []PartitionDetail `json:"partitionDetails"`
}

// TopicCreateParams are the fields of a new topic; zero values take the server's defaults
// (retention "7d", delivery "exactly-once", 3 partitions, and replicas 3 on the replicated JetStream
// engine or 1 on the local engine, which refuses more with ErrInvalidRequest).
type TopicCreateParams struct {
	Name       string `json:"name"`
	Retention  string `json:"retention,omitempty"`
	Delivery   string `json:"delivery,omitempty"`
	Partitions int    `json:"partitions,omitempty"`
	Replicas   int    `json:"replicas,omitempty"` // 1, 3 or 5; cannot be changed later
}

// TopicUpdateParams changes a topic; zero values leave a field as it is. Partitions can only grow.
type TopicUpdateParams struct {
	Partitions int    `json:"partitions,omitempty"`
	Retention  string `json:"retention,omitempty"`
}

// TopicService is client.Topics.
type TopicService struct{ c *Client }

// Create makes a topic. ErrTopicAlreadyExists (409) when the name is taken.
func (s *TopicService) Create(ctx context.Context, params TopicCreateParams, opts ...option.RequestOption) (*Topic, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var t Topic
	_, err = c.do(ctx, request{method: "POST", path: "/v1/topics", body: params}, &t)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// List iterates over every topic of the environment, fetching pages lazily (params may be nil).
func (s *TopicService) List(ctx context.Context, params *ListParams, opts ...option.RequestOption) *Iter[Topic] {
	c, err := s.c.with(opts)
	if err != nil {
		return failedIter[Topic](ctx, err)
	}
	cursor := ""
	if params != nil {
		cursor = params.Cursor
	}
	first := true
	return newIter(ctx, func(ctx context.Context, next string) ([]Topic, string, error) {
		q := url.Values(params.query())
		if first {
			next, first = cursor, false
		}
		if next != "" {
			q.Set("cursor", next)
		}
		var page struct {
			Data       []Topic `json:"data"`
			NextCursor string  `json:"nextCursor"`
		}
		_, err := c.do(ctx, request{method: "GET", path: "/v1/topics", query: q}, &page)
		return page.Data, page.NextCursor, err
	})
}

// Get describes a topic with its partitions. ErrTopicNotFound when it does not exist.
func (s *TopicService) Get(ctx context.Context, name string, opts ...option.RequestOption) (*TopicDetail, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var t TopicDetail
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/topics/" + seg(name)}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Update adds partitions or changes the retention.
func (s *TopicService) Update(ctx context.Context, name string, params TopicUpdateParams, opts ...option.RequestOption) (*Topic, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var t Topic
	_, err = c.do(ctx, request{method: "PATCH", path: "/v1/topics/" + seg(name), body: params}, &t)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Delete removes a topic with its data, groups and dead-letter queues.
func (s *TopicService) Delete(ctx context.Context, name string, opts ...option.RequestOption) error {
	c, err := s.c.with(opts)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, request{method: "DELETE", path: "/v1/topics/" + seg(name)}, nil)
	return err
}
