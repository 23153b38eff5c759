package queuecore

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// PublishParams are the optional parts of a publish (nil for none).
type PublishParams struct {
	// Key picks the partition by a stable hash (same key, same partition, in order).
	Key string
	// Headers travel with the message.
	Headers map[string]string
	// Partition, when set, wins over Key.
	Partition *int
	// IdempotencyKey deduplicates the publish within the topic (24 h). Default: a fresh key per call,
	// the same across the call's retries, so a retried publish never duplicates.
	IdempotencyKey string
	// Delay, when positive, delivers the message to consumer groups this much later (at most 30 days).
	// It is stored, and readable, at once.
	Delay time.Duration
	// DeliverAt, when set, delivers it from this time on instead (a past time means now). Not with Delay.
	DeliverAt time.Time
	// TTL, when positive: never delivered once this long has passed since the publish (with a DLQ it
	// moves there with reason "expired").
	TTL time.Duration
	// ExpiresAt, when set: never delivered from this time on. Not with TTL.
	ExpiresAt time.Time
}

// timing is the wire form of a message's Delay, DeliverAt, TTL and ExpiresAt.
type timing struct {
	Delay     *float64 `json:"delay,omitempty"` // seconds
	DeliverAt string   `json:"deliverAt,omitempty"`
	TTL       *float64 `json:"ttl,omitempty"` // seconds
	ExpiresAt string   `json:"expiresAt,omitempty"`
}

func timingOf(delay time.Duration, deliverAt time.Time, ttl time.Duration, expiresAt time.Time) timing {
	var t timing
	if delay != 0 { // a negative one is sent: the server refuses it, naming the field
		seconds := delay.Seconds()
		t.Delay = &seconds
	}
	if !deliverAt.IsZero() {
		t.DeliverAt = deliverAt.UTC().Format(wireTime)
	}
	if ttl != 0 {
		seconds := ttl.Seconds()
		t.TTL = &seconds
	}
	if !expiresAt.IsZero() {
		t.ExpiresAt = expiresAt.UTC().Format(wireTime)
	}
	return t
}

// wireTime is how the API writes instants: ISO-8601 UTC with milliseconds.
const wireTime = "2006-01-02T15:04:05.000Z07:00"

// PublishResult says where a published message landed; it is answered once the message is durable.
type PublishResult struct {
	ID         string    `json:"id"` // msg_…
	Offset     int64     `json:"offset"`
	Partition  int       `json:"partition"`
	Timestamp  time.Time `json:"timestamp"`
	Latency    int       `json:"latency"`    // server-side milliseconds
	Durability string    `json:"durability"` // fsync or replicated:<n>
	// DeliverAt is when consumer groups receive it (nil: at once, not delayed).
	DeliverAt *time.Time `json:"deliverAt"`
	// ExpiresAt is when it expires undelivered (nil: never).
	ExpiresAt *time.Time `json:"expiresAt"`
	// Replayed is true when the idempotency key had been seen: nothing was appended, this is the
	// original result.
	Replayed bool `json:"replayed"`
	// RequestID identifies the request.
	RequestID string `json:"-"`
}

type publishBody struct {
	Data      any               `json:"data"`
	Key       string            `json:"key,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Partition *int              `json:"partition,omitempty"`
	timing
}

// Publish appends data (any value encoding/json takes; a json.RawMessage is sent as is) to topic.
func (c *Client) Publish(ctx context.Context, topic string, data any, params *PublishParams, opts ...option.RequestOption) (*PublishResult, error) {
	c, err := c.with(opts)
	if err != nil {
		return nil, err
	}
	body := publishBody{Data: data}
	key := ""
	if params != nil {
		body.Key, body.Headers, body.Partition = params.Key, params.Headers, params.Partition
		body.timing = timingOf(params.Delay, params.DeliverAt, params.TTL, params.ExpiresAt)
		key = params.IdempotencyKey
	}
	if c.idempotencyKey != "" {
		key = c.idempotencyKey
	}
	if key == "" {
		key = newIdempotencyKey() // once, before the retries: they all carry it
	}
	var res PublishResult
	resp, err := c.do(ctx, request{method: "POST", path: "/v1/topics/" + seg(topic) + "/messages", body: body,
		idempotencyKey: key, header: c.traceContext(ctx)}, &res)
	if err != nil {
		return nil, err
	}
	res.RequestID = resp.requestID
	if strings.EqualFold(resp.header.Get("Idempotent-Replayed"), "true") {
		res.Replayed = true
	}
	return &res, nil
}

// BatchMessage is one message of PublishBatch with its options; any other element of the batch is taken
// as the data of a message without options.
type BatchMessage struct {
	Data           any               `json:"data"`
	Key            string            `json:"key,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Partition      *int              `json:"partition,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	// Delay, DeliverAt, TTL and ExpiresAt are as in PublishParams.
	Delay     time.Duration `json:"-"`
	DeliverAt time.Time     `json:"-"`
	TTL       time.Duration `json:"-"`
	ExpiresAt time.Time     `json:"-"`
}

// MarshalJSON writes the item as the API takes it (durations in seconds, instants in ISO-8601).
func (m BatchMessage) MarshalJSON() ([]byte, error) {
	type fields BatchMessage // the same fields, without this method
	return json.Marshal(struct {
		fields
		timing
	}{fields(m), timingOf(m.Delay, m.DeliverAt, m.TTL, m.ExpiresAt)})
}

// BatchItem says where one message of a batch landed.
type BatchItem struct {
	ID        string     `json:"id"`
	Offset    int64      `json:"offset"`
	Partition int        `json:"partition"`
	Timestamp time.Time  `json:"timestamp"`
	DeliverAt *time.Time `json:"deliverAt"` // nil: not delayed
	ExpiresAt *time.Time `json:"expiresAt"` // nil: no expiry
	Replayed  bool       `json:"replayed"`  // its idempotency key had been seen; not written again
}

// BatchResult answers PublishBatch: every message was written atomically, in the order given.
type BatchResult struct {
	Count      int         `json:"count"`
	Latency    int         `json:"latency"`
	Durability string      `json:"durability"`
	Messages   []BatchItem `json:"messages"`
	RequestID  string      `json:"-"`
}

// MaxBatchSize is the most messages one PublishBatch takes.
const MaxBatchSize = 1000

// PublishBatch appends 1 to 1000 messages atomically: all are written or none. Each element is the data
// of a message, or a BatchMessage / *BatchMessage with options. Every item gets an idempotency key
// (unless it has one) once, so the call's retries never duplicate.
func (c *Client) PublishBatch(ctx context.Context, topic string, messages []any, opts ...option.RequestOption) (*BatchResult, error) {
	c, err := c.with(opts)
	if err != nil {
		return nil, err
	}
	if len(messages) == 0 || len(messages) > MaxBatchSize {
		return nil, &Error{Code: "INVALID_REQUEST", Message: "a batch holds 1 to 1000 messages, not " + strconv.Itoa(len(messages))}
	}
	items := make([]BatchMessage, len(messages))
	trace := c.traceContext(ctx) // each item carries the publisher's context (option.WithTracer)
	for i, m := range messages {
		switch v := m.(type) {
		case BatchMessage:
			items[i] = v
		case *BatchMessage:
			if v == nil {
				return nil, &Error{Code: "INVALID_REQUEST", Message: "a nil *BatchMessage in the batch"}
			}
			items[i] = *v
		default:
			items[i] = BatchMessage{Data: m}
		}
		if items[i].IdempotencyKey == "" && c.idempotencyKey != "" {
			items[i].IdempotencyKey = c.idempotencyKey + ":" + strconv.Itoa(i)
		}
		if items[i].IdempotencyKey == "" {
			items[i].IdempotencyKey = newIdempotencyKey()
		}
		items[i].Headers = withTraceContext(items[i].Headers, trace)
	}
	body := struct {
		Messages []BatchMessage `json:"messages"`
	}{items}
	var res BatchResult
	resp, err := c.do(ctx, request{method: "POST", path: "/v1/topics/" + seg(topic) + "/messages/batch", body: body}, &res)
	if err != nil {
		return nil, err
	}
	res.RequestID = resp.requestID
	return &res, nil
}

// Message is a stored message. Delivered by a consumer, it also has Attempt and AckDeadline and must be
// settled with Ack, Nack or Extend.
type Message struct {
	ID        string            `json:"id"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       *string           `json:"key"` // nil when published without a key
	Headers   map[string]string `json:"headers"`
	// Data is the JSON value as published ("null" for a published null); see Decode.
	Data      json.RawMessage `json:"data"`
	Timestamp time.Time       `json:"timestamp"`
	// DeliverAt is when it was due to consumer groups (nil: not delayed).
	DeliverAt *time.Time `json:"deliverAt"`
	// ExpiresAt is when it expires undelivered (nil: never).
	ExpiresAt *time.Time `json:"expiresAt"`
	// Attempt is 1 on first delivery, +1 on every redelivery (consumers only).
	Attempt int `json:"attempt,omitempty"`
	// AckDeadline: unacked by then, the message is redelivered (consumers only).
	AckDeadline time.Time `json:"ackDeadline,omitempty"`

	settle *settler
}

// Decode unmarshals Data into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Data, v) }

// Ack marks the message processed: it is not delivered to this group again. It does not block: acks
// go out in batches within milliseconds, and Consumer.Close waits until the server confirmed them.
func (m *Message) Ack() error {
	if m.settle == nil {
		return ErrNotDelivered
	}
	return m.settle.add(settlement{kind: "ack", id: m.ID})
}

// Nack gives the message back for redelivery now, or after delay when it is positive; with a
// dead-letter queue, to the queue once its retries are spent. reason is recorded with the dead letter.
func (m *Message) Nack(reason string, delay time.Duration) error {
	if m.settle == nil {
		return ErrNotDelivered
	}
	return m.settle.add(settlement{kind: "nack", id: m.ID, reason: reason, delay: delay})
}

// NackDeadLetter moves the message to the group's dead-letter queue at once, whatever retries remain
// (the server refuses it, reported to OnError, when the group has no dead-letter queue).
func (m *Message) NackDeadLetter(reason string) error {
	if m.settle == nil {
		return ErrNotDelivered
	}
	return m.settle.add(settlement{kind: "nack", id: m.ID, reason: reason, deadLetter: true})
}

// Extend moves the ack deadline to d from now (1 s to 12 h).
func (m *Message) Extend(d time.Duration) error {
	if m.settle == nil {
		return ErrNotDelivered
	}
	if d < time.Second {
		return errors.New("queuecore: Extend takes 1 s to 12 h")
	}
	return m.settle.add(settlement{kind: "extend", id: m.ID, delay: d})
}

// MessagePage is a run of messages from one partition (Messages.Read).
type MessagePage struct {
	Data           []Message `json:"data"`
	NextOffset     int64     `json:"nextOffset"`     // read from here next
	EarliestOffset int64     `json:"earliestOffset"` // reads below it start there
}

// ReadParams says where to read a partition from: FromOffset, or FromTimestamp, else the start; Limit
// 1–1000 (default 100).
type ReadParams struct {
	FromOffset    *int64
	FromTimestamp *time.Time
	Limit         int
}

// MessageService is client.Messages.
type MessageService struct{ c *Client }

// Get reads one message by id. ErrMessageNotFound when there is none.
func (s *MessageService) Get(ctx context.Context, topic, id string, opts ...option.RequestOption) (*Message, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var m Message
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/topics/" + seg(topic) + "/messages/" + seg(id)}, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Read reads a partition by offset, without a consumer group (browsing, replay). Follow NextOffset to
// read on; an empty page means the end for now.
func (s *MessageService) Read(ctx context.Context, topic string, partition int, params *ReadParams, opts ...option.RequestOption) (*MessagePage, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if params != nil {
		if params.FromOffset != nil {
			q.Set("fromOffset", strconv.FormatInt(*params.FromOffset, 10))
		}
		if params.FromTimestamp != nil {
			q.Set("fromTimestamp", strconv.FormatInt(params.FromTimestamp.UnixMilli(), 10))
		}
		if params.Limit > 0 {
			q.Set("limit", strconv.Itoa(params.Limit))
		}
	}
	var page MessagePage
	path := "/v1/topics/" + seg(topic) + "/partitions/" + strconv.Itoa(partition) + "/messages"
	if _, err := c.do(ctx, request{method: "GET", path: path, query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}
