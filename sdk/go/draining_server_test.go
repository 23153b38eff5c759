package queuecore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// ownServer is a queuecore-server of one test's own (the package's shared one is never signalled): migrated
// and bootstrapped in a temp data dir, served on a free port, restartable on the same dir and port.
type ownServer struct {
	t      *testing.T
	bin    string
	env    []string
	port   int
	url    string
	key    string
	proc   *exec.Cmd
	exited chan struct{}
}

func startOwnServer(t *testing.T) *ownServer {
	t.Helper()
	bin, err := serverBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUEUECORE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "QUEUECORE_DATA_DIR="+dir, "QUEUECORE_LOG_LEVEL=WARNING")
	s := &ownServer{t: t, bin: bin, env: env}
	if _, err := s.cli("migrate"); err != nil {
		t.Fatal(err)
	}
	out, err := s.cli("bootstrap", "--project", "go-sdk-drain", "--tier", "enterprise", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var boot struct {
		Keys map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(out, &boot); err != nil {
		t.Fatal(err)
	}
	s.key = boot.Keys["development"]
	if s.port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	s.url = fmt.Sprintf("http://127.0.0.1:%d", s.port)
	s.serve()
	t.Cleanup(func() { s.stop(syscall.SIGKILL) })
	return s
}

func (s *ownServer) cli(args ...string) ([]byte, error) {
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return nil, fmt.Errorf("queuecore-server %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return out, err
}

// serve starts the server and waits until it answers health 200.
func (s *ownServer) serve() {
	s.t.Helper()
	s.proc = exec.Command(s.bin, "serve", "--port", fmt.Sprint(s.port))
	s.proc.Env = s.env
	if err := s.proc.Start(); err != nil {
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(p *exec.Cmd) { _ = p.Wait(); close(exited) }(s.proc)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.t.Fatal("queuecore-server exited while starting")
		default:
		}
		if res, err := http.Get(s.url + "/v1/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatal("queuecore-server was not healthy within 60 s")
}

// stop signals the server and waits for it to exit (a SIGTERM drains first).
func (s *ownServer) stop(sig syscall.Signal) {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(45 * time.Second):
		_ = s.proc.Process.Kill()
		<-s.exited
		s.t.Errorf("queuecore-server did not exit within 45 s of %v", sig)
	}
	s.proc = nil
}

// A real server gets SIGTERM while a handler is still running: the consumer hands over (the handler
// finishes, its ack goes to the draining node and is answered) before it moves on, so the message is
// settled and never delivered again. Checked after a restart on the same data: the group's committed
// offset is past the message.
func TestARealServerDrainingSettlesTheAckOfARunningHandler(t *testing.T) {
	srv := startOwnServer(t)
	ctx := testCtx(t)
	c, err := queuecore.NewClient(option.WithAPIKey(srv.key), option.WithBaseURL(srv.url))
	if err != nil {
		t.Fatal(err)
	}
	topic := unique("drain")
	if _, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, topic, map[string]any{"n": 1}, nil); err != nil {
		t.Fatal(err)
	}
	consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: "g", StartFrom: "earliest",
		Transport: queuecore.TransportWebSocket, OnError: func(error) {}}) // the restart's refusals are expected
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var attempts []int
	started := make(chan struct{}, 1)
	acked := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- consumer.Start(ctx, func(_ context.Context, msg *queuecore.Message) error {
			mu.Lock()
			attempts = append(attempts, msg.Attempt)
			mu.Unlock()
			if msg.Attempt == 1 {
				started <- struct{}{}
				time.Sleep(time.Second) // still running when the node drains
				err := msg.Ack()
				acked <- err
				return err
			}
			return msg.Ack()
		})
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the message was never delivered")
	}
	srv.stop(syscall.SIGTERM) // drains (the consumer hands over), then exits
	if err := <-acked; err != nil {
		t.Fatalf("the running handler's ack: %v", err)
	}
	srv.serve()
	offsets, err := c.Offsets.List(ctx, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	_ = consumer.Close(ctx)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(offsets) != 1 || offsets[0].Current != 1 || !slices.Equal(attempts, []int{1}) {
		t.Fatalf("offsets %+v (want current 1: the ack settled before the drain ended), attempts handled %v",
			offsets, attempts)
	}
}
