package queuecore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The REST pull transport: join, long polls (which count as heartbeats), heartbeats, acks in batches
// every 100 ms, leave. Stateless on the server: any node answers any call.

type pullMember struct {
	mu         sync.Mutex
	id         string
	generation int
	session    time.Duration
}

func (p *pullMember) get() (string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id, p.generation
}

func (p *pullMember) set(id string, generation int) {
	p.mu.Lock()
	p.id, p.generation = id, generation
	p.mu.Unlock()
}

// forget marks the membership gone (MEMBER_NOT_FOUND: join afresh) or stale (join again with the id).
func (p *pullMember) forget(err error) bool {
	switch {
	case errors.Is(err, ErrMemberNotFound):
		p.set("", 0)
	case errors.Is(err, ErrStaleGeneration):
		p.mu.Lock()
		p.generation = 0
		p.mu.Unlock()
	default:
		return false
	}
	return true
}

func (k *Consumer) runPull(handler MessageHandler) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-k.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	m := &pullMember{session: 10 * time.Second}
	base := groupPath(k.topic, k.params.Group)
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); k.heartbeat(ctx, m, base) }()
	go func() { defer bg.Done(); k.flushLoop(ctx, m, base) }()

	err := k.pollLoop(ctx, m, base, handler)
	cancel()
	bg.Wait()
	k.workers.Wait()
	// Graceful end: send the last acks (waiting for their answers), then leave.
	final, done := context.WithTimeout(context.Background(), stopFlushTimeout)
	defer done()
	k.pullFlush(final, m, base, true)
	if id, _ := m.get(); id != "" {
		_, _ = k.c.do(final, request{method: "DELETE", path: base + "/members/" + seg(id)}, nil)
	}
	k.setMember("")
	return err
}

func (k *Consumer) join(ctx context.Context, m *pullMember, base string) error {
	id, _ := m.get()
	body := map[string]any{"startFrom": k.params.StartFrom}
	if id != "" {
		body["memberId"] = id
	}
	var out struct {
		MemberID       string `json:"memberId"`
		GenerationID   int    `json:"generationId"`
		Assignments    []int  `json:"assignments"`
		SessionTimeout string `json:"sessionTimeout"`
	}
	if _, err := k.c.do(ctx, request{method: "POST", path: base + "/members", body: body}, &out); err != nil {
		return err
	}
	m.set(out.MemberID, out.GenerationID)
	if d, err := time.ParseDuration(out.SessionTimeout); err == nil && d > 0 {
		m.mu.Lock()
		m.session = d
		m.mu.Unlock()
	}
	k.setMember(out.MemberID)
	k.emitRebalance(out.MemberID, out.GenerationID, out.Assignments)
	return nil
}

func (k *Consumer) pollLoop(ctx context.Context, m *pullMember, base string, handler MessageHandler) error {
	failures := 0
	for !k.isStopping() {
		err := func() error {
			if id, gen := m.get(); id == "" || gen == 0 {
				if err := k.join(ctx, m, base); err != nil {
					return err
				}
			}
			id, gen := m.get()
			var out struct {
				Messages []Message `json:"messages"`
			}
			body := map[string]any{"memberId": id, "generationId": gen, "maxMessages": k.params.MaxInFlight,
				"waitSeconds": pullWaitSeconds}
			// Not retried by the request loop: a lost answer must reach the loop below (see there).
			zero := 0
			if _, err := k.c.do(ctx, request{method: "POST", path: base + "/poll", body: body, maxRetries: &zero}, &out); err != nil {
				return err
			}
			failures = 0
			k.dispatch(handler, out.Messages)
			return nil
		}()
		if err == nil || k.isStopping() {
			continue
		}
		if m.forget(err) {
			continue
		}
		k.emit(err)
		if IsConnectionError(err) {
			// The poll's answer may have been lost with messages in it, which the server now counts as
			// in flight to this member until their ack deadline. Settle what was handled, then leave and
			// join afresh: leaving releases them at once.
			k.pullFlush(ctx, m, base, false)
			if id, _ := m.get(); id != "" {
				if _, err := k.c.do(ctx, request{method: "DELETE", path: base + "/members/" + seg(id)}, nil); err == nil || IsNotFound(err) {
					m.set("", 0)
				}
			}
		}
		if fatal(err) {
			return err
		}
		failures++
		if !k.sleep(consumeBackoff(failures)) {
			return nil
		}
	}
	return nil
}

// dispatch runs one poll's messages: partitions concurrently, each in offset order; once stopping, the
// messages not started are left unacked (released when the member leaves).
func (k *Consumer) dispatch(handler MessageHandler, messages []Message) {
	byPartition := map[int][]*Message{}
	var order []int
	for i := range messages {
		msg := &messages[i]
		msg.settle = k.settle
		if _, ok := byPartition[msg.Partition]; !ok {
			order = append(order, msg.Partition)
		}
		byPartition[msg.Partition] = append(byPartition[msg.Partition], msg)
	}
	var wg sync.WaitGroup
	for _, p := range order {
		run := byPartition[p]
		wg.Add(1)
		k.workers.Add(1)
		go func() {
			defer k.workers.Done()
			defer wg.Done()
			for _, msg := range run {
				if k.isStopping() {
					return
				}
				k.handle(handler, msg)
			}
		}()
	}
	wg.Wait()
}

func (k *Consumer) heartbeat(ctx context.Context, m *pullMember, base string) {
	for {
		m.mu.Lock()
		every := max(500*time.Millisecond, m.session/3)
		m.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		id, gen := m.get()
		if id == "" || gen == 0 {
			continue
		}
		var out struct {
			GenerationID int   `json:"generationId"`
			ShouldRejoin bool  `json:"shouldRejoin"`
			Assignments  []int `json:"assignments"`
		}
		_, err := k.c.do(ctx, request{method: "POST", path: base + "/members/" + seg(id) + "/heartbeat",
			body: map[string]any{"generationId": gen}}, &out)
		if err != nil {
			m.forget(err)
			continue
		}
		if out.ShouldRejoin {
			m.mu.Lock()
			m.generation = 0
			m.mu.Unlock()
		} else if out.Assignments != nil && !sameInts(out.Assignments, k.Assignments()) {
			m.mu.Lock()
			if m.id == id {
				m.generation = out.GenerationID
			}
			m.mu.Unlock()
			k.emitRebalance(id, out.GenerationID, out.Assignments)
		}
	}
}

func (k *Consumer) flushLoop(ctx context.Context, m *pullMember, base string) {
	t := time.NewTicker(pullFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k.pullFlush(ctx, m, base, false)
	}
}

// pullFlush sends queued settlements over REST; on a retryable failure they are queued again (unless
// final). A flush cut short by the consumer's own stop (ctx canceled mid-request) is a retryable failure
// too: the final flush, which runs once the loops are done and waits for its answers, sends it again
// (an ack the server had applied already is answered as acked: acks are idempotent).
func (k *Consumer) pullFlush(ctx context.Context, m *pullMember, base string, final bool) {
	items := k.settle.take()
	if len(items) == 0 {
		return
	}
	id, gen := m.get()
	var acks []string
	var failed []settlement
	for _, x := range items {
		if x.kind == "ack" {
			acks = append(acks, x.id)
			continue
		}
		body := map[string]any{"memberId": id, "generationId": gen}
		path := base + "/" + x.kind
		if x.kind == "nack" {
			body["id"] = x.id
			if x.reason != "" {
				body["reason"] = x.reason
			}
			if x.delay > 0 {
				body["delay"] = durationString(x.delay)
			}
			if x.deadLetter {
				body["deadLetter"] = true
			}
		} else {
			body["ids"] = []string{x.id}
			body["seconds"] = x.delay.Seconds()
		}
		var answer struct {
			Failed []failedID `json:"failed"`
		}
		if _, err := k.c.do(ctx, request{method: "POST", path: path, body: body}, &answer); err == nil {
			k.reportFailed(answer.Failed, x.kind)
		} else {
			if !final && !fatal(err) {
				failed = append(failed, x)
			} else {
				k.emit(err)
			}
		}
	}
	for start := 0; start < len(acks); start += 1000 {
		end := min(start+1000, len(acks))
		body := map[string]any{"memberId": id, "generationId": gen, "ids": acks[start:end]}
		var answer struct {
			Failed []failedID `json:"failed"`
		}
		if _, err := k.c.do(ctx, request{method: "POST", path: base + "/ack", body: body}, &answer); err == nil {
			k.reportFailed(answer.Failed, "ack")
		} else {
			if !final && !fatal(err) {
				for _, a := range acks[start:end] {
					failed = append(failed, settlement{kind: "ack", id: a})
				}
			} else {
				k.emit(err)
			}
		}
	}
	k.settle.putBack(failed)
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
