package queuecore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Server-Sent Events transport: one streamed GET of …/groups/{group}/events is the membership (the
// server polls for the member; closing the stream leaves the group). Messages arrive as "message" events;
// acks, nacks and extends go through the pull calls (the pull transport's flush), with the member id and
// generation of the "welcome" and "rebalance" events. Reconnects with backoff when the stream drops, at
// once after "draining"; an "error" event (a revoked key, a deleted topic) ends Start with that *Error.

// sseReadIdle: the server sends a keepalive comment at least every 15 s; a stream silent longer is dead.
const sseReadIdle = 45 * time.Second

// sseEvent is one event of a text/event-stream.
type sseEvent struct {
	name string
	data string
	id   string
}

// readSSE calls fn with each event of r (comments skipped) until r ends or fails; touch is called for
// every line, keepalives included.
func readSSE(r io.Reader, touch func(), fn func(sseEvent)) error {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64<<10), 16<<20) // a data line holds a whole message (≤ 256 KiB of data)
	ev := sseEvent{name: "message"}
	var data []string
	for scanner.Scan() {
		touch()
		line := strings.TrimSuffix(scanner.Text(), "\r")
		if line == "" {
			if len(data) > 0 || ev.name != "message" {
				ev.data = strings.Join(data, "\n")
				fn(ev)
			}
			ev, data = sseEvent{name: "message"}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name = value
		case "data":
			data = append(data, value)
		case "id":
			ev.id = value
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	return io.EOF
}

func (k *Consumer) runSSE(handler MessageHandler) error {
	base := groupPath(k.topic, k.params.Group)
	m := &pullMember{session: 10 * time.Second}
	flushCtx, stopFlushing := context.WithCancel(context.Background())
	var flusher sync.WaitGroup
	flusher.Add(1)
	go func() { defer flusher.Done(); k.sseFlushLoop(flushCtx, m, base) }()
	// Ends the periodic flushes and waits for one in flight (cut short, its settlements are queued
	// again), so that the final flush of a graceful stop sends everything still unconfirmed.
	quiesce := func() {
		stopFlushing()
		flusher.Wait()
	}
	defer quiesce()
	failures := 0
	for !k.isStopping() {
		welcomed, err := k.sseSession(base, m, handler, quiesce)
		if err == nil || k.isStopping() {
			return nil // stopped
		}
		if errors.Is(err, errDraining) {
			failures = 0
			k.c.log.Info("queuecore consumer: the server is draining; reconnecting", "topic", k.topic)
			continue
		}
		k.emit(err)
		if fatal(err) {
			return err
		}
		if welcomed {
			failures = 0
		}
		failures++
		wait := consumeBackoff(failures)
		var e *Error
		if errors.As(err, &e) && e.RetryAfter > 0 {
			wait = min(e.RetryAfter, maxRetryAfter)
		}
		if !k.sleep(wait) {
			return nil
		}
	}
	return nil
}

// sseFlushLoop sends settlements through the pull calls every pullFlushInterval while a stream's member
// exists; between streams they wait for the next member.
func (k *Consumer) sseFlushLoop(ctx context.Context, m *pullMember, base string) {
	t := time.NewTicker(pullFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if id, _ := m.get(); id != "" {
			k.pullFlush(ctx, m, base, false)
		}
	}
}

// openSSE starts the stream; a refusal (non-200) is its *Error.
func (k *Consumer) openSSE(ctx context.Context, base string) (*http.Response, error) {
	q := url.Values{"startFrom": {k.params.StartFrom}, "maxInFlight": {strconv.Itoa(k.params.MaxInFlight)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.c.baseURL+base+"/events?"+q.Encode(), nil)
	if err != nil {
		return nil, &Error{Code: "INVALID_REQUEST", Message: err.Error(), Err: err}
	}
	k.c.setHeaders(req.Header, true)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := k.c.hc.Do(req)
	if err != nil {
		return nil, &Error{Code: "CONNECTION_ERROR", Message: "event stream connection failed: " + err.Error(), Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return nil, parseError(&response{status: resp.StatusCode, header: resp.Header, body: body,
			requestID: resp.Header.Get("X-Request-Id")})
	}
	return resp, nil
}

// sseSession runs one stream: nil once stopped gracefully, else why the stream ended. A graceful stop
// calls quiesce (the periodic flushes are over) before its final flush.
func (k *Consumer) sseSession(base string, m *pullMember, handler MessageHandler, quiesce func()) (welcomed bool, _ error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := k.openSSE(ctx, base)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()

	s := &pushSession{k: k, handler: handler, done: make(chan struct{}), ended: make(chan error, 2),
		queues: map[int]chan *Message{}}
	idle := time.AfterFunc(sseReadIdle, cancel) // a dead stream: the read fails
	defer idle.Stop()
	var welcome sync.Once
	welcomed = false
	var draining bool
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		var failure error
		err := readSSE(resp.Body, func() { idle.Reset(sseReadIdle) }, func(ev sseEvent) {
			if failure != nil {
				return
			}
			switch ev.name {
			case "welcome", "rebalance":
				var hello struct {
					MemberID     string `json:"memberId"`
					GenerationID int    `json:"generationId"`
					Assignments  []int  `json:"assignments"`
				}
				if json.Unmarshal([]byte(ev.data), &hello) != nil {
					return
				}
				m.set(hello.MemberID, hello.GenerationID)
				k.setMember(hello.MemberID)
				welcome.Do(func() {
					welcomed = true
					k.c.log.Debug("queuecore consumer: joined over SSE", "topic", k.topic, "member", hello.MemberID)
				})
				k.emitRebalance(hello.MemberID, hello.GenerationID, hello.Assignments)
			case "message":
				var msg Message
				if json.Unmarshal([]byte(ev.data), &msg) == nil {
					s.deliver(&msg)
				}
			case "draining":
				draining = true
			case "error":
				failure = frameError(json.RawMessage(eventEnvelope(ev.data)))
			}
		})
		switch {
		case failure != nil:
			s.ended <- failure
		case draining:
			s.ended <- errDraining
		default:
			s.ended <- &Error{Code: "CONNECTION_ERROR", Message: "event stream lost: " + err.Error(), Err: err}
		}
	}()

	var end error
	select {
	case end = <-s.ended:
	case <-k.stopCh:
	}
	close(s.done) // workers stop taking messages
	s.workers.Wait()
	id, _ := m.get()
	if end == nil {
		// Graceful: send what handlers settled while the member still exists (the stream is open).
		quiesce()
		final, done := context.WithTimeout(context.Background(), stopFlushTimeout)
		k.pullFlush(final, m, base, true)
		done()
	}
	cancel() // the server sees the stream close: the member leaves
	readerDone.Wait()
	m.set("", 0)
	k.setMember("")
	if end == nil && id != "" {
		// Leaving explicitly too makes Close return only once the group knows (a second leave is a 404).
		leave, done := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = k.c.do(leave, request{method: "DELETE", path: base + "/members/" + seg(id)}, nil)
		done()
	}
	return welcomed, end
}

// eventEnvelope is the "error" field of an error event's data ({"error": {...}}).
func eventEnvelope(data string) []byte {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal([]byte(data), &env) != nil {
		return nil
	}
	return env.Error
}
