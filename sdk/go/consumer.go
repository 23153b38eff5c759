package queuecore

import (
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand"
	"sync"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// Transport is how a consumer gets its messages.
type Transport string

const (
	// TransportWebSocket: the server pushes messages over one WebSocket connection (the default).
	TransportWebSocket Transport = "websocket"
	// TransportPull: long polls over REST, with heartbeats; for networks that block WebSocket.
	TransportPull Transport = "pull"
	// TransportSSE: a Server-Sent Events stream (one streamed GET is the membership); acks go through the
	// pull calls.
	TransportSSE Transport = "sse"
)

// ConsumeParams configure a consumer.
type ConsumeParams struct {
	// Group is the consumer group (required); its members share the topic's partitions.
	Group string
	// StartFrom is "latest" (default) or "earliest": where a group without committed offsets starts.
	StartFrom string
	// DeadLetter, when set, configures the group's dead-letter queue before consuming.
	DeadLetter *DeadLetter
	// MaxInFlight caps unacked messages held at once (default 100; 1–10000 over WebSocket and SSE, 1–1000 pull).
	MaxInFlight int
	// Transport is TransportWebSocket (default), TransportPull or TransportSSE.
	Transport Transport
	// OnError gets every error the consumer survives (dropped connections, refused calls, handler
	// errors, and an *AckError for each ack, nack or extend the server refused); by default they are
	// logged. It must not block for long.
	OnError func(error)
	// OnRebalance gets the member's partitions after each join and rebalance. It must not block for long.
	OnRebalance func(RebalanceEvent)
}

// MessageHandler processes one message and settles it (msg.Ack()). Returning an error, or panicking,
// nacks the message. Messages of one partition are handled one at a time, in offset order; different
// partitions run concurrently.
type MessageHandler func(ctx context.Context, msg *Message) error

// Consumer is a member of a consumer group. Make it with Client.Consume, run it with Start, stop it with
// Close.
type Consumer struct {
	c      *Client
	topic  string
	params ConsumeParams
	settle *settler

	mu          sync.Mutex
	started     bool
	stopping    bool
	memberID    string
	assignments []int
	stopCh      chan struct{}
	doneCh      chan struct{}

	hctx    context.Context // handlers' context: canceled only when Close gives up waiting
	hcancel context.CancelFunc
	workers sync.WaitGroup
}

const (
	ackLinger         = 2 * time.Millisecond
	ackBatch          = 500
	stopFlushTimeout  = 5 * time.Second
	maxConsumeBackoff = 5 * time.Second
	pullWaitSeconds   = 5
	pullFlushInterval = 100 * time.Millisecond
)

// Consume makes a consumer of topic in params.Group; it does not connect until Start. With
// params.DeadLetter it first sets the group's dead-letter queue.
func (c *Client) Consume(ctx context.Context, topic string, params ConsumeParams, opts ...option.RequestOption) (*Consumer, error) {
	c, err := c.with(opts)
	if err != nil {
		return nil, err
	}
	if params.Group == "" {
		return nil, &Error{Code: "INVALID_REQUEST", Message: "Consume needs a Group"}
	}
	if params.StartFrom == "" {
		params.StartFrom = "latest"
	}
	if params.StartFrom != "latest" && params.StartFrom != "earliest" {
		return nil, &Error{Code: "INVALID_REQUEST", Message: `StartFrom is "latest" or "earliest"`}
	}
	if params.Transport == "" {
		params.Transport = TransportWebSocket
	}
	limit := 10000
	switch params.Transport {
	case TransportWebSocket, TransportSSE:
	case TransportPull:
		limit = 1000
	default:
		return nil, &Error{Code: "INVALID_REQUEST", Message: fmt.Sprintf("unknown transport %q", params.Transport)}
	}
	if params.MaxInFlight == 0 {
		params.MaxInFlight = 100
	}
	if params.MaxInFlight < 1 || params.MaxInFlight > limit {
		return nil, &Error{Code: "INVALID_REQUEST", Message: fmt.Sprintf("MaxInFlight is 1 to %d", limit)}
	}
	if params.DeadLetter != nil {
		if _, err := c.ConsumerGroups.Update(ctx, topic, params.Group, ConsumerGroupUpdateParams{DeadLetter: params.DeadLetter}); err != nil {
			return nil, err
		}
	}
	k := &Consumer{c: c, topic: topic, params: params, stopCh: make(chan struct{}), doneCh: make(chan struct{})}
	k.settle = newSettler()
	return k, nil
}

// Topic is the consumed topic.
func (k *Consumer) Topic() string { return k.topic }

// Group is the consumer group.
func (k *Consumer) Group() string { return k.params.Group }

// MemberID is the member id while joined (csr_…), "" otherwise.
func (k *Consumer) MemberID() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.memberID
}

func (k *Consumer) setMember(id string) {
	k.mu.Lock()
	k.memberID = id
	k.mu.Unlock()
}

func (k *Consumer) isStopping() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stopping
}

// Start joins the group and runs handler on every message until Close is called or ctx ends (both stop
// gracefully and make Start return nil), or the server refuses the consumer for good (401, 403, a
// missing topic: Start returns that *Error). Dropped connections, restarts and 429/5xx are ridden out:
// the consumer reconnects and rejoins with backoff, reporting each to OnError.
func (k *Consumer) Start(ctx context.Context, handler MessageHandler) error {
	if handler == nil {
		return errors.New("queuecore: Start needs a handler")
	}
	k.mu.Lock()
	if k.started {
		k.mu.Unlock()
		return errors.New("queuecore: the consumer was already started")
	}
	k.started = true
	if k.stopping {
		k.mu.Unlock()
		close(k.doneCh)
		return ErrConsumerClosed
	}
	k.hctx, k.hcancel = context.WithCancel(context.WithoutCancel(ctx))
	k.mu.Unlock()
	defer close(k.doneCh)
	defer k.hcancel()

	watch := make(chan struct{})
	defer close(watch)
	go func() {
		select {
		case <-ctx.Done():
			k.requestStop()
		case <-watch:
		}
	}()
	var err error
	switch k.params.Transport {
	case TransportPull:
		err = k.runPull(handler)
	case TransportSSE:
		err = k.runSSE(handler)
	default:
		err = k.runPush(handler)
	}
	k.requestStop()
	k.workers.Wait()
	k.settle.close()
	return err
}

func (k *Consumer) requestStop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopping {
		k.stopping = true
		close(k.stopCh)
	}
}

// Stop asks the consumer to stop gracefully and returns at once; Start returns when that is done. Safe
// from a handler (where Close would wait for the handler itself).
func (k *Consumer) Stop() { k.requestStop() }

// Done is closed when Start has returned.
func (k *Consumer) Done() <-chan struct{} { return k.doneCh }

// Close stops the consumer gracefully and returns once Start has returned: no new messages are handled,
// running handlers finish, their acks are sent and confirmed by the server, and the member leaves the
// group. Messages received but not yet handled are not acked: the server redelivers them. If ctx ends
// first, running handlers' contexts are canceled and Close returns ctx's error. Do not call it from a
// handler (it would wait for that handler): use Stop there.
func (k *Consumer) Close(ctx context.Context) error {
	k.requestStop()
	k.mu.Lock()
	started := k.started
	k.mu.Unlock()
	if !started {
		k.settle.close()
		return nil
	}
	select {
	case <-k.doneCh:
		return nil
	case <-ctx.Done():
		k.mu.Lock()
		if k.hcancel != nil {
			k.hcancel()
		}
		k.mu.Unlock()
		return ctx.Err()
	}
}

func (k *Consumer) emit(err error) {
	if k.params.OnError != nil {
		k.params.OnError(err)
		return
	}
	k.c.log.Warn("queuecore consumer", "topic", k.topic, "group", k.params.Group, "error", err)
}

// sleep waits d unless the consumer stops first; false when it stopped.
func (k *Consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.stopCh:
		return false
	case <-t.C:
		return true
	}
}

func consumeBackoff(failures int) time.Duration {
	d := math.Min(float64(maxConsumeBackoff), float64(100*time.Millisecond)*math.Pow(2, float64(failures)))
	return time.Duration(d * (0.5 + mrand.Float64()/2))
}

// handle runs the handler on one message; an error or a panic nacks it.
func (k *Consumer) handle(handler MessageHandler, m *Message) {
	defer func() {
		if r := recover(); r != nil {
			_ = m.Nack(truncate(fmt.Sprintf("panic: %v", r)), 0)
			k.emit(fmt.Errorf("queuecore: the handler panicked on %s: %v", m.ID, r))
		}
	}()
	if err := k.run(handler, m); err != nil {
		_ = m.Nack(truncate(err.Error()), 0)
		k.emit(fmt.Errorf("queuecore: the handler failed on %s: %w", m.ID, err))
	}
}

func truncate(s string) string {
	if len(s) > 1024 {
		return s[:1024]
	}
	return s
}

// fatal reports whether retrying cannot fix err (a refusal: 400, 401, 403, 404, 409, 413).
func fatal(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch {
	case e.Status == 0:
		return false
	case e.Status == 408 || e.Status == 425 || e.Status == 429 || e.Status >= 500:
		return false
	}
	return true
}

// -- settling ----------------------------------------------------------------------------------------

type settlement struct {
	kind       string // ack, nack, extend
	id         string
	reason     string
	delay      time.Duration
	deadLetter bool // a nack straight to the dead-letter queue
}

// settler queues acks, nacks and extends from any goroutine for the transport to send.
type settler struct {
	mu     sync.Mutex
	items  []settlement
	closed bool
	wake   chan struct{}
}

func newSettler() *settler { return &settler{wake: make(chan struct{}, 1)} }

func (s *settler) add(x settlement) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrConsumerClosed
	}
	s.items = append(s.items, x)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *settler) take() []settlement {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.items
	s.items = nil
	return withoutSupersededExtends(items)
}

// withoutSupersededExtends drops each extend followed, in the same batch, by an ack or nack of the same
// message: settling ends the lease anyway, and as acks are sent first the extend would reach the server
// after the ack and be refused (ACK_EXPIRED), a failure the application never caused.
func withoutSupersededExtends(items []settlement) []settlement {
	settled := map[string]int{} // id -> index of its last ack or nack
	for i, x := range items {
		if x.kind != "extend" {
			settled[x.id] = i
		}
	}
	if len(settled) == 0 {
		return items
	}
	kept := items[:0:0]
	for i, x := range items {
		if last, ok := settled[x.id]; x.kind == "extend" && ok && last > i {
			continue
		}
		kept = append(kept, x)
	}
	return kept
}

// putBack returns settlements that could not be sent, ahead of newer ones.
func (s *settler) putBack(items []settlement) {
	if len(items) == 0 {
		return
	}
	s.mu.Lock()
	s.items = append(append([]settlement(nil), items...), s.items...)
	s.mu.Unlock()
}

func (s *settler) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func durationString(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// -- events ---------------------------------------------------------------------------------------------

// RebalanceEvent is what ConsumeParams.OnRebalance gets after each join and rebalance: the partitions
// this member holds from now on (the same event, with the same fields, in every QueueCore SDK).
type RebalanceEvent struct {
	MemberID     string
	GenerationID int
	Assignments  []int
}

// AckError is a settlement (ack, nack or extend) the server refused, reported to ConsumeParams.OnError
// (never returned by Message.Ack). Code is the reason: ACK_EXPIRED when the ack deadline passed or the
// partition moved to another member, so the message was or will be redelivered. Read it with errors.As.
type AckError struct {
	MessageID string
	Code      string
	// Action is "ack", "nack" or "extend".
	Action string
}

func (e *AckError) Error() string {
	return fmt.Sprintf("queuecore: the %s of %s failed: %s", e.Action, e.MessageID, e.Code)
}

func (k *Consumer) emitRebalance(memberID string, generation int, assignments []int) {
	k.mu.Lock()
	k.assignments = append([]int(nil), assignments...)
	k.mu.Unlock()
	k.c.log.Debug("queuecore consumer: partitions", "topic", k.topic, "generation", generation, "assignments", assignments)
	if k.params.OnRebalance != nil {
		k.params.OnRebalance(RebalanceEvent{MemberID: memberID, GenerationID: generation,
			Assignments: append([]int(nil), assignments...)})
	}
}

func (k *Consumer) reportFailed(failed []failedID, action string) {
	for _, x := range failed {
		k.emit(&AckError{MessageID: x.ID, Code: x.Code, Action: action})
	}
}

// Assignments are the partitions this member holds now.
func (k *Consumer) Assignments() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]int(nil), k.assignments...)
}
