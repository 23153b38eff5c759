package queuecore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// One real queuecore-server for the package's tests, started as an operator would: migrate, bootstrap an
// enterprise project, serve on a free port, in a temp data dir. Its keys: development for the tests,
// staging for the Example functions (through QUEUECORE_API_KEY), production for the README's examples.

var (
	serverURL string
	keys      map[string]string
)

func serverBin() (string, error) {
	if bin := os.Getenv("QUEUECORE_TEST_SERVER"); bin != "" {
		return bin, nil
	}
	local, _ := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "queuecore-server"))
	if _, err := os.Stat(local); err == nil {
		return local, nil
	}
	return exec.LookPath("queuecore-server")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func TestMain(m *testing.M) {
	os.Exit(runWithServer(m))
}

func runWithServer(m *testing.M) int {
	bin, err := serverBin()
	if err != nil {
		fmt.Fprintln(os.Stderr, "queuecore-server not found (set QUEUECORE_TEST_SERVER):", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "queuecore-go-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUEUECORE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "QUEUECORE_DATA_DIR="+dir, "QUEUECORE_LOG_LEVEL=WARNING")
	cli := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return nil, fmt.Errorf("queuecore-server %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
			}
		}
		return out, err
	}
	if _, err := cli("migrate"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out, err := cli("bootstrap", "--project", "go-sdk-test", "--tier", "enterprise", "--json")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var boot struct {
		Keys map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(out, &boot); err != nil {
		fmt.Fprintln(os.Stderr, "bootstrap answered no keys:", err)
		return 1
	}
	keys = boot.Keys
	if _, err := cli("projects", "set-tier", "--project", "go-sdk-test", "--tier", "enterprise",
		"--limits", "publish=100000,consume=100000,admin=100000"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	port, err := freePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	srv := exec.Command(bin, "serve", "--port", fmt.Sprint(port))
	srv.Env, srv.Stdout, srv.Stderr = env, logFile, logFile
	if err := srv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	}()
	serverURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHealthy(exited, 60*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		fmt.Fprintf(os.Stderr, "%v\n%s\n", err, log)
		return 1
	}
	// The Example functions read these, as a customer's program would.
	os.Setenv("QUEUECORE_API_KEY", keys["staging"])
	os.Setenv("QUEUECORE_BASE_URL", serverURL)
	os.Setenv("QUEUECORE_GO_TEST_KEY", keys["development"]) // for the package's internal tests
	code := m.Run()
	if code != 0 {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		if len(log) > 4000 {
			log = log[len(log)-4000:]
		}
		fmt.Fprintf(os.Stderr, "--- server log (tail) ---\n%s\n", log)
	}
	return code
}

func waitHealthy(exited chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("queuecore-server exited")
		default:
		}
		res, err := http.Get(serverURL + "/v1/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("queuecore-server was not healthy within %s", timeout)
}

func newClient(t *testing.T, opts ...option.RequestOption) *queuecore.Client {
	t.Helper()
	all := append([]option.RequestOption{option.WithAPIKey(keys["development"]), option.WithBaseURL(serverURL)}, opts...)
	c, err := queuecore.NewClient(all...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "." + hex.EncodeToString(b[:])
}

// newTopic creates a fresh topic with n partitions.
func newTopic(t *testing.T, c *queuecore.Client, partitions int) string {
	t.Helper()
	name := unique("go")
	if _, err := c.Topics.Create(testCtx(t), queuecore.TopicCreateParams{Name: name, Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	return name
}

// testCtx is a context that ends with the test (generous: a bound on a hung test, not a speed check).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds (or fails the test after a generous bound).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// started is a consumer running Start in a goroutine, with every error it reported to OnError.
type started struct {
	consumer *queuecore.Consumer
	done     chan error
	mu       sync.Mutex
	reported []error
}

// startConsumer consumes topic with params (its OnError collects into reported) and handler.
func startConsumer(t *testing.T, ctx context.Context, c *queuecore.Client, topic string, params queuecore.ConsumeParams, handler queuecore.MessageHandler) *started {
	t.Helper()
	s := &started{done: make(chan error, 1)}
	params.OnError = func(err error) { s.mu.Lock(); s.reported = append(s.reported, err); s.mu.Unlock() }
	consumer, err := c.Consume(ctx, topic, params)
	if err != nil {
		t.Fatal(err)
	}
	s.consumer = consumer
	go func() { s.done <- consumer.Start(ctx, handler) }()
	return s
}

// stop closes the consumer gracefully and answers Close's error, else what Start returned.
func (s *started) stop(ctx context.Context) error {
	closed := s.consumer.Close(ctx)
	returned := <-s.done
	if closed != nil {
		return closed
	}
	return returned
}

// errors answers what OnError was given so far.
func (s *started) errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.reported...)
}

// acking acks every message it is handed.
func acking(ctx context.Context, msg *queuecore.Message) error { return msg.Ack() }
