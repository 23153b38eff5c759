package queuecore

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	mrand "math/rand"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// The WebSocket transport: GET /v1/topics/{topic}/consume pushes messages; acks, nacks and extends go
// back as frames, batched; the connection is the membership (closing it leaves the group).

const (
	wsPingEvery = 10 * time.Second
	wsReadIdle  = 35 * time.Second
)

type frame struct {
	Type         string          `json:"type"`
	MemberID     string          `json:"memberId"`
	GenerationID int             `json:"generationId"`
	Assignments  []int           `json:"assignments"`
	Messages     []Message       `json:"messages"`
	IDs          []string        `json:"ids"`
	Failed       []failedID      `json:"failed"`
	Error        json.RawMessage `json:"error"`
}

type failedID struct {
	ID   string `json:"id"`
	Code string `json:"code"`
}

func (k *Consumer) wsURL() (string, error) {
	u, err := url.Parse(k.c.baseURL)
	if err != nil {
		return "", err
	}
	scheme := "ws"
	if u.Scheme == "https" {
		scheme = "wss"
	}
	q := url.Values{
		"group":       {k.params.Group},
		"startFrom":   {k.params.StartFrom},
		"maxInFlight": {strconv.Itoa(k.params.MaxInFlight)},
	}
	return scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/") + "/v1/topics/" + seg(k.topic) +
		"/consume?" + q.Encode(), nil
}

// errDraining ends a push session whose server is draining for a deploy (it said "draining", or closed
// with 1012, service restart): not a failure.
var errDraining = errors.New("queuecore: the server is draining")

// errClosedAfterError ends a push session the server closed normally (1000) after an error frame, which
// was reported as it came and said why: the close is that same end, not a second failure. The consumer
// reconnects with backoff as after any failure (a refusal retrying cannot fix then comes at the upgrade).
var errClosedAfterError = errors.New("queuecore: the server closed the connection after an error frame")

func (k *Consumer) runPush(handler MessageHandler) error {
	target, err := k.wsURL()
	if err != nil {
		return &Error{Code: "INVALID_REQUEST", Message: err.Error(), Err: err}
	}
	failures := 0
	for !k.isStopping() {
		welcomed, err := k.pushSession(target, handler)
		if err == nil {
			return nil // stopped
		}
		if k.isStopping() {
			return nil
		}
		if errors.Is(err, errDraining) {
			// A deploy: the node said "draining" (the session handed over) or closed with 1012. Reconnect at
			// once (to another node behind the same address), reporting nothing: no error happened.
			failures = 0
			k.c.log.Info("queuecore consumer: the server is draining; reconnecting", "topic", k.topic)
			// Up to 100 ms: the members of a draining node do not all knock on the next one at once (nor
			// spin on the draining node itself while the balancer still routes to it).
			if !k.sleep(time.Duration(mrand.Int63n(int64(100 * time.Millisecond)))) {
				return nil
			}
			continue
		}
		if !errors.Is(err, errClosedAfterError) {
			k.emit(err)
			if fatal(err) {
				return err
			}
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
		k.c.log.Info("queuecore consumer: reconnecting", "topic", k.topic, "in", wait)
		if !k.sleep(wait) {
			return nil
		}
	}
	return nil
}

func (k *Consumer) dial(target string) (*websocket.Conn, error) {
	header := http.Header{}
	k.c.setHeaders(header, true)
	header.Del("Accept")
	dialer := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  16 << 10,
	}
	dctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-k.stopCh:
			cancel()
		case <-dctx.Done():
		}
	}()
	conn, resp, err := dialer.DialContext(dctx, target, header)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			return nil, parseError(&response{status: resp.StatusCode, header: resp.Header, body: body,
				requestID: resp.Header.Get("X-Request-Id")})
		}
		return nil, &Error{Code: "CONNECTION_ERROR", Message: "WebSocket connection failed: " + err.Error(), Err: err}
	}
	conn.SetReadLimit(64 << 20)
	return conn, nil
}

// pushSession runs one connection: nil once stopped gracefully, else why the connection ended.
func (k *Consumer) pushSession(target string, handler MessageHandler) (welcomed bool, _ error) {
	conn, err := k.dial(target)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hello frame
	if err := conn.ReadJSON(&hello); err != nil {
		return false, &Error{Code: "CONNECTION_ERROR", Message: "no welcome frame: " + err.Error(), Err: err}
	}
	if hello.Type == "error" {
		return false, frameError(hello.Error)
	}
	if hello.Type == "draining" {
		return false, errDraining // opened on a node already draining: told to go elsewhere before joining
	}
	if hello.Type != "welcome" {
		return false, &Error{Code: "CONNECTION_ERROR", Message: "expected a welcome frame, got " + hello.Type}
	}
	k.setMember(hello.MemberID)
	defer k.setMember("")
	k.emitRebalance(hello.MemberID, hello.GenerationID, hello.Assignments)
	k.c.log.Debug("queuecore consumer: joined", "topic", k.topic, "member", hello.MemberID)
	s := &pushSession{k: k, conn: conn, handler: handler, done: make(chan struct{}), ended: make(chan error, 3),
		answered: make(chan struct{}, 1), drainSaid: make(chan struct{}), readDone: make(chan struct{}),
		queues: map[int]chan *Message{}}
	_ = conn.SetReadDeadline(time.Now().Add(wsReadIdle))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsReadIdle)) })

	go func() { defer close(s.readDone); s.read() }()
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); s.write() }()

	var end error
	select {
	case end = <-s.ended:
	case <-s.drainSaid:
		end = errDraining
	case <-k.stopCh:
	}
	close(s.done) // workers stop taking messages; the writer stops
	<-writerDone
	s.workers.Wait() // running handlers finish (their acks are queued)
	if end == nil || errors.Is(end, errDraining) {
		// Graceful (a stop, or a deploy's handover: a draining node still settles what its member sends
		// until it closes): send what handlers settled and wait until the server confirmed it.
		if err := s.flush(); err == nil {
			deadline := time.NewTimer(stopFlushTimeout)
			for s.unanswered.Load() > 0 {
				select {
				case <-s.answered:
					continue
				case <-s.readDone:
				case <-deadline.C:
				}
				break
			}
			deadline.Stop()
		}
		_ = conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, "consumer closed"), time.Now().Add(time.Second))
	}
	_ = conn.Close()
	<-s.readDone
	if end == nil {
		// The server removes the member when it sees the close; leaving explicitly too makes Close return
		// only once the group knows (a second leave is a harmless 404).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = k.c.do(ctx, request{method: "DELETE", path: groupPath(k.topic, k.params.Group) + "/members/" + seg(hello.MemberID)}, nil)
		cancel()
	}
	return true, end
}

func frameError(raw json.RawMessage) *Error {
	e := &Error{}
	if len(raw) == 0 || json.Unmarshal(raw, e) != nil || e.Code == "" {
		return &Error{Code: "CONNECTION_ERROR", Message: "the server sent an error frame: " + string(raw)}
	}
	return e
}

type pushSession struct {
	k          *Consumer
	conn       *websocket.Conn
	handler    MessageHandler
	done       chan struct{} // closed when the session ends
	ended      chan error    // why the connection ended (reader or writer)
	answered   chan struct{} // an acked frame arrived
	unanswered atomic.Int64  // ack/nack/extend frames sent and not yet answered
	draining   atomic.Bool   // the server said "draining": the close that follows is a deploy
	drainSaid  chan struct{} // closed by the "draining" frame: hand over, then reconnect
	readDone   chan struct{} // closed when the reader returns (the connection is gone)
	workers    sync.WaitGroup
	queues     map[int]chan *Message // reader's goroutine only
}

func (s *pushSession) read() {
	errorSaid := false // an error frame came: a normal close after it is the end it announced
	for {
		var f frame
		_, data, err := s.conn.ReadMessage()
		if err == nil {
			err = json.Unmarshal(data, &f)
		}
		if err != nil {
			// 1012 (service restart) without the frame: a connection opened on a node that had begun draining.
			if s.draining.Load() || websocket.IsCloseError(err, websocket.CloseServiceRestart) {
				s.ended <- errDraining
				return
			}
			if errorSaid && websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				s.ended <- errClosedAfterError
				return
			}
			s.ended <- &Error{Code: "CONNECTION_ERROR", Message: "WebSocket connection lost: " + err.Error(), Err: err}
			return
		}
		_ = s.conn.SetReadDeadline(time.Now().Add(wsReadIdle))
		switch f.Type {
		case "draining":
			if !s.draining.Swap(true) {
				close(s.drainSaid)
			}
		case "message":
			var m Message
			if json.Unmarshal(data, &m) == nil {
				s.deliver(&m)
			}
		case "messages":
			for i := range f.Messages {
				s.deliver(&f.Messages[i])
			}
		case "acked":
			s.unanswered.Add(-1)
			select {
			case s.answered <- struct{}{}:
			default:
			}
			s.k.reportFailed(f.Failed, "ack")
		case "rebalance":
			s.k.emitRebalance(s.k.MemberID(), f.GenerationID, f.Assignments)
		case "error":
			// A refused client frame is answered by an error frame instead of "acked".
			if s.unanswered.Add(-1) < 0 {
				s.unanswered.Store(0)
			}
			select {
			case s.answered <- struct{}{}:
			default:
			}
			errorSaid = true
			s.k.emit(frameError(f.Error))
		}
	}
}

// deliver hands a message to its partition's worker (one per partition: offset order is kept).
func (s *pushSession) deliver(m *Message) {
	select {
	case <-s.done:
		return // handing over (a stop, a drain): the server redelivers it once this member left
	default:
	}
	if s.k.isStopping() {
		return // not handled, not acked: the server redelivers it once this member left
	}
	m.settle = s.k.settle
	q, ok := s.queues[m.Partition]
	if !ok {
		q = make(chan *Message, s.k.params.MaxInFlight+16)
		s.queues[m.Partition] = q
		s.workers.Add(1)
		s.k.workers.Add(1)
		go s.work(q)
	}
	select {
	case q <- m:
	case <-s.done:
	}
}

func (s *pushSession) work(q chan *Message) {
	defer s.k.workers.Done()
	defer s.workers.Done()
	for {
		select {
		case <-s.done:
			return
		case m := <-q:
			select {
			case <-s.done:
				return // received but not handled: released for redelivery
			default:
			}
			s.k.handle(s.handler, m)
		}
	}
}

func (s *pushSession) write() {
	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-ping.C:
			if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second)); err != nil {
				s.ended <- &Error{Code: "CONNECTION_ERROR", Message: "WebSocket ping failed: " + err.Error(), Err: err}
				return
			}
		case <-s.k.settle.wake:
			time.Sleep(ackLinger) // let acks of the same burst share a frame
			if err := s.flush(); err != nil {
				s.ended <- err
				return
			}
		}
	}
}

// flush sends every queued settlement (from the writer, or from the session once the writer stopped).
func (s *pushSession) flush() error {
	items := s.k.settle.take()
	var acks []string
	var rest []settlement
	for _, x := range items {
		if x.kind == "ack" {
			acks = append(acks, x.id)
		} else {
			rest = append(rest, x)
		}
	}
	send := func(v any) error {
		_ = s.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := s.conn.WriteJSON(v); err != nil {
			return err
		}
		s.unanswered.Add(1)
		return nil
	}
	for start := 0; start < len(acks); start += ackBatch {
		end := min(start+ackBatch, len(acks))
		if err := send(map[string]any{"type": "ack", "ids": acks[start:end]}); err != nil {
			s.k.settle.putBack(items)
			return &Error{Code: "CONNECTION_ERROR", Message: "sending acks failed: " + err.Error(), Err: err}
		}
	}
	for i, x := range rest {
		f := map[string]any{"type": x.kind, "id": x.id}
		if x.kind == "nack" {
			if x.reason != "" {
				f["reason"] = x.reason
			}
			if x.delay > 0 {
				f["delay"] = durationString(x.delay)
			}
			if x.deadLetter {
				f["deadLetter"] = true
			}
		} else {
			f["seconds"] = x.delay.Seconds()
		}
		if err := send(f); err != nil {
			s.k.settle.putBack(rest[i:])
			return &Error{Code: "CONNECTION_ERROR", Message: "sending a " + x.kind + " failed: " + err.Error(), Err: err}
		}
	}
	return nil
}
