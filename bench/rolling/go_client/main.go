// The Go SDK's share of the rolling-restart load (bench/rolling_restart.py, tests/system/faults/rollout.py):
// publishers sending sequential values with the SDK's retries and idempotency keys as shipped, and push
// members of one consumer group acking every message, through the deployment's one address for as long as
// the rollout lasts.
//
//	go_client --base-url URL --topic T --group G --out FILE [--publishers 2] [--consumers 2] [--max-retries 8] [--drain 60]
//
// The key comes from QUEUECORE_API_KEY. It prints {"ready": true} once its members are started, publishes
// until a line "stop" (or the end) on stdin, then waits until every acknowledged publish was delivered (or
// --drain seconds), 2 s more for a late redelivery, closes its members and exits. Every event is a JSON line
// of FILE, which the Python side reads (rollout.read_record):
//
//	{"event": "publish", "value": 7, "at": <unix seconds>, "seconds": <latency>}
//	{"event": "publish_error", "at": ..., "error": "..."}
//	{"event": "delivery", "value": 7, "partition": 1, "offset": 3, "attempt": 1, "at": ...}
//	{"event": "consumer_error", "at": ..., "error": "..."}
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

// record writes the events, one JSON line each, and keeps what the drain waits on.
type record struct {
	mu        sync.Mutex
	out       *bufio.Writer
	acked     map[int]bool
	delivered map[int]bool
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (r *record) write(event map[string]any) {
	line, err := json.Marshal(event)
	if err != nil {
		log.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out.Write(line)
	r.out.WriteByte('\n')
	switch event["event"] {
	case "publish":
		r.acked[event["value"].(int)] = true
	case "delivery":
		r.delivered[event["value"].(int)] = true
	}
}

func (r *record) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for v := range r.acked {
		if !r.delivered[v] {
			return false
		}
	}
	return true
}

func describe(err error) string { return fmt.Sprintf("%T: %v", err, err) }

func main() {
	baseURL := flag.String("base-url", "", "the deployment's address")
	topic := flag.String("topic", "", "an exactly-once topic")
	group := flag.String("group", "", "the consumer group")
	outPath := flag.String("out", "", "where the JSON lines go")
	publishers := flag.Int("publishers", 2, "")
	consumers := flag.Int("consumers", 2, "")
	maxRetries := flag.Int("max-retries", 8, "")
	drain := flag.Float64("drain", 60, "seconds to wait for the last deliveries")
	flag.Parse()

	file, err := os.Create(*outPath)
	if err != nil {
		log.Fatal(err)
	}
	rec := &record{out: bufio.NewWriter(file), acked: map[int]bool{}, delivered: map[int]bool{}}
	client, err := queuecore.NewClient(option.WithBaseURL(*baseURL), option.WithMaxRetries(*maxRetries))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var members []*queuecore.Consumer
	var running sync.WaitGroup
	for i := 0; i < *consumers; i++ {
		consumer, err := client.Consume(ctx, *topic, queuecore.ConsumeParams{
			Group:       *group,
			StartFrom:   "earliest",
			MaxInFlight: 200,
			// Errors the consumer survives (reconnects, refused acks) are reported here, not returned.
			OnError: func(err error) {
				rec.write(map[string]any{"event": "consumer_error", "at": now(), "error": describe(err)})
			},
		})
		if err != nil {
			log.Fatal(err)
		}
		members = append(members, consumer)
		running.Add(1)
		go func() {
			defer running.Done()
			err := consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
				var body struct {
					V int `json:"v"`
				}
				if err := msg.Decode(&body); err != nil {
					return err
				}
				rec.write(map[string]any{"event": "delivery", "value": body.V, "partition": msg.Partition,
					"offset": msg.Offset, "attempt": msg.Attempt, "at": now()})
				return msg.Ack()
			})
			if err != nil { // a refusal retrying cannot fix: what Start returns to its caller
				rec.write(map[string]any{"event": "consumer_error", "at": now(), "error": describe(err)})
			}
		}()
	}
	fmt.Println(`{"ready": true}`)

	var mu sync.Mutex
	next, publishing := 0, true
	var published sync.WaitGroup
	for i := 0; i < *publishers; i++ {
		published.Add(1)
		go func() {
			defer published.Done()
			for {
				mu.Lock()
				if !publishing {
					mu.Unlock()
					return
				}
				value := next
				next++
				mu.Unlock()
				started := time.Now()
				_, err := client.Publish(ctx, *topic, map[string]any{"v": value},
					&queuecore.PublishParams{Key: strconv.Itoa(value)})
				if err != nil { // an error surfaced to the caller: what the run counts
					rec.write(map[string]any{"event": "publish_error", "at": now(), "error": describe(err)})
					continue
				}
				rec.write(map[string]any{"event": "publish", "value": value, "at": now(),
					"seconds": time.Since(started).Seconds()})
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	stdin := bufio.NewScanner(os.Stdin)
	for stdin.Scan() && stdin.Text() != "stop" {
	}
	mu.Lock()
	publishing = false
	mu.Unlock()
	published.Wait()
	deadline := time.Now().Add(time.Duration(*drain * float64(time.Second)))
	for time.Now().Before(deadline) && !rec.drained() {
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a redelivery after the last ack would show now
	closing, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, consumer := range members {
		if err := consumer.Close(closing); err != nil {
			rec.write(map[string]any{"event": "consumer_error", "at": now(), "error": "close: " + describe(err)})
		}
	}
	running.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err := rec.out.Flush(); err != nil {
		log.Fatal(err)
	}
	if err := file.Close(); err != nil {
		log.Fatal(err)
	}
}
