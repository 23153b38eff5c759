// One round of the Go SDK's figures against a running server, driven by bench/go_sdk_bench.py: the same
// two measurements, payloads and shapes as the Python and Node.js SDKs' rounds.
//
//	go_sdk_bench --base-url URL [--messages 20000]   (the key in QUEUECORE_API_KEY)
//
// Prints one JSON line: {"client": "go", "go": version, "publishBatch": msgs/s, "consume": msgs/s}.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

func payload(i int) map[string]any {
	return map[string]any{"type": "order.created", "orderId": fmt.Sprintf("ord_%08d", i), "amount": 9900,
		"note": strings.Repeat("x", 120)}
}

func name(what string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench-go-" + what + "-" + hex.EncodeToString(b[:])
}

func batches(messages int) [][]any {
	var out [][]any
	for start := 0; start < messages; start += 1000 {
		var batch []any
		for i := start; i < start+1000 && i < messages; i++ {
			batch = append(batch, payload(i))
		}
		out = append(out, batch)
	}
	return out
}

// publishBatchRate: batches of 1,000 on a 3-partition topic, four in flight.
func publishBatchRate(ctx context.Context, c *queuecore.Client, messages int) (float64, error) {
	topic := name("pub")
	if _, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: topic, Partitions: 3}); err != nil {
		return 0, err
	}
	pending := make(chan []any, messages/1000+1)
	for _, b := range batches(messages) {
		pending <- b
	}
	close(pending)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	started := time.Now()
	for lane := 0; lane < 4; lane++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range pending {
				if _, err := c.PublishBatch(ctx, topic, b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	_ = c.Topics.Delete(ctx, topic)
	return float64(messages) / seconds, nil
}

// consumeRate: one WebSocket consumer (maxInFlight 1000) of a fresh group reads and acks pre-published
// messages of a 1-partition topic; from Start until every message is handled and Start has returned
// (every ack confirmed, the member gone).
func consumeRate(ctx context.Context, c *queuecore.Client, messages int) (float64, error) {
	topic := name("csm")
	if _, err := c.Topics.Create(ctx, queuecore.TopicCreateParams{Name: topic, Partitions: 1}); err != nil {
		return 0, err
	}
	for _, b := range batches(messages) {
		if _, err := c.PublishBatch(ctx, topic, b); err != nil {
			return 0, err
		}
	}
	consumer, err := c.Consume(ctx, topic, queuecore.ConsumeParams{Group: "bench", StartFrom: "earliest", MaxInFlight: 1000})
	if err != nil {
		return 0, err
	}
	handled := 0 // one partition: the handler runs on one goroutine at a time
	started := time.Now()
	err = consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		if err := msg.Ack(); err != nil {
			return err
		}
		if handled++; handled == messages {
			consumer.Stop()
		}
		return nil
	})
	seconds := time.Since(started).Seconds()
	if err != nil {
		return 0, err
	}
	off, err := c.Offsets.Get(ctx, topic, queuecore.OffsetGetParams{Group: "bench", Partition: 0})
	if err != nil {
		return 0, err
	}
	if off.Lag != 0 {
		return 0, fmt.Errorf("lag %d after the consumer stopped: acks not all confirmed", off.Lag)
	}
	_ = c.Topics.Delete(ctx, topic)
	return float64(messages) / seconds, nil
}

func main() {
	baseURL := flag.String("base-url", "", "the server")
	messages := flag.Int("messages", 20000, "messages per measurement")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := queuecore.NewClient(option.WithBaseURL(*baseURL), option.WithAPIKey(os.Getenv("QUEUECORE_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	publish, err := publishBatchRate(ctx, c, *messages)
	if err != nil {
		log.Fatal(err)
	}
	consume, err := consumeRate(ctx, c, *messages)
	if err != nil {
		log.Fatal(err)
	}
	out, _ := json.Marshal(map[string]any{"client": "go", "go": runtime.Version(), "publishBatch": publish, "consume": consume})
	fmt.Println(string(out))
}
