package queuecore_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// lockedBuffer is a log sink the client may write from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestSeekBeyondTheEndLandsThereWithAWarning(t *testing.T) {
	var logged lockedBuffer
	c := newClient(t, option.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	ctx := testCtx(t)
	topic := newTopic(t, c, 1)
	for i := 0; i < 3; i++ {
		if _, err := c.Publish(ctx, topic, map[string]any{"n": i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ConsumerGroups.Update(ctx, topic, "seekers", queuecore.ConsumerGroupUpdateParams{}); err != nil {
		t.Fatal(err)
	}
	seek := func(offset int64) *queuecore.SeekResult {
		s, err := c.Offsets.Seek(ctx, topic, queuecore.OffsetSeekParams{Group: "seekers", Partition: 0, Offset: queuecore.Int64(offset)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := seek(4800); s.Offset != 3 {
		t.Fatalf("seek to 4800 landed at %d, want 3 (the end)", s.Offset)
	}
	out := logged.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "asked=4800") || !strings.Contains(out, "landed=3") {
		t.Fatalf("no warning naming the asked and landed offsets: %q", out)
	}
	before := strings.Count(out, "level=WARN")
	if s := seek(1); s.Offset != 1 {
		t.Fatalf("seek to 1 landed at %d", s.Offset)
	}
	if after := strings.Count(logged.String(), "level=WARN"); after != before {
		t.Fatalf("a seek that landed where asked logged a warning: %q", logged.String())
	}
}
