package queuecore_test

// Examples, run by go test against the live server TestMain started (QUEUECORE_API_KEY and
// QUEUECORE_BASE_URL are set, as in a customer's environment).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
	"github.com/queuecore/queuecore-go/option"
)

func ExampleNewClient() {
	// The key and the base URL default to QUEUECORE_API_KEY and QUEUECORE_BASE_URL. A region picks
	// https://<region>.api.queuecore.cloud, unless a base URL is given (here: the variable), which wins.
	client, err := queuecore.NewClient(
		option.WithAPIKey(os.Getenv("QUEUECORE_API_KEY")),
		option.WithRegion("us-east-1"),
		option.WithTimeout(10*time.Second),
		option.WithMaxRetries(3),
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(client.BaseURL() == os.Getenv("QUEUECORE_BASE_URL"))
	fmt.Println(client.Health(context.Background()).Status)
	// Output:
	// true
	// ok
}

func ExampleTopicService_Create() {
	ctx := context.Background()
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	topic, err := client.Topics.Create(ctx, queuecore.TopicCreateParams{
		Name:       "example.create",
		Retention:  "30d",
		Delivery:   "exactly-once",
		Partitions: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(topic.Name, topic.Partitions, topic.Retention, topic.Status)
	_ = client.Topics.Delete(ctx, topic.Name)
	// Output: example.create 6 30d active
}

func ExampleTopicService_List() {
	ctx := context.Background()
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"example.list.a", "example.list.b", "example.list.c"} {
		if _, err := client.Topics.Create(ctx, queuecore.TopicCreateParams{Name: name, Partitions: 1}); err != nil {
			log.Fatal(err)
		}
		defer client.Topics.Delete(ctx, name)
	}
	// The iterator fetches the pages as it goes (here two topics a page).
	it := client.Topics.List(ctx, &queuecore.ListParams{Limit: 2})
	for it.Next() {
		if name := it.Current().Name; strings.HasPrefix(name, "example.list.") {
			fmt.Println(name)
		}
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// example.list.a
	// example.list.b
	// example.list.c
}

func ExampleClient_Publish() {
	ctx := context.Background()
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Topics.Create(ctx, queuecore.TopicCreateParams{Name: "example.publish", Partitions: 1}); err != nil {
		log.Fatal(err)
	}
	defer client.Topics.Delete(ctx, "example.publish")
	result, err := client.Publish(ctx, "example.publish", map[string]any{
		"type":     "order.created",
		"orderId":  "ord_92jf8x",
		"amount":   9900,
		"currency": "usd",
	}, &queuecore.PublishParams{Key: "ord_92jf8x"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result.Partition, result.Offset, result.Durability)
	// Output: 0 0 fsync
}

func ExampleClient_PublishBatch() {
	ctx := context.Background()
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Topics.Create(ctx, queuecore.TopicCreateParams{Name: "example.batch"}); err != nil {
		log.Fatal(err)
	}
	defer client.Topics.Delete(ctx, "example.batch")
	results, err := client.PublishBatch(ctx, "example.batch", []any{
		map[string]any{"type": "order.created", "orderId": "ord_a1b2c3", "amount": 4500},
		map[string]any{"type": "order.created", "orderId": "ord_d4e5f6", "amount": 12000},
		queuecore.BatchMessage{Data: map[string]any{"type": "order.updated", "orderId": "ord_g7h8i9", "status": "shipped"}, Key: "ord_g7h8i9"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(results.Count, len(results.Messages))
	// Output: 3 3
}

func ExampleClient_Consume() {
	ctx := context.Background()
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Topics.Create(ctx, queuecore.TopicCreateParams{Name: "example.consume", Partitions: 1}); err != nil {
		log.Fatal(err)
	}
	defer client.Topics.Delete(ctx, "example.consume")
	for _, id := range []string{"ord_1", "ord_2", "ord_3"} {
		if _, err := client.Publish(ctx, "example.consume", map[string]string{"orderId": id}, nil); err != nil {
			log.Fatal(err)
		}
	}
	consumer, err := client.Consume(ctx, "example.consume", queuecore.ConsumeParams{
		Group:     "order-processing",
		StartFrom: "earliest",
		OnError:   func(err error) { log.Println("consumer error:", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	handled := 0
	err = consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		var order struct {
			OrderID string `json:"orderId"`
		}
		if err := msg.Decode(&order); err != nil {
			return err // nacks the message
		}
		fmt.Println(msg.Topic, msg.Partition, msg.Offset, order.OrderID)
		if err := msg.Ack(); err != nil {
			return err
		}
		if handled++; handled == 3 {
			consumer.Stop() // Start returns once the acks are confirmed and the member has left
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// example.consume 0 0 ord_1
	// example.consume 0 1 ord_2
	// example.consume 0 2 ord_3
}

func ExampleError() {
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Topics.Get(context.Background(), "user.events")
	var qerr *queuecore.Error
	if errors.As(err, &qerr) {
		fmt.Println(qerr.Status, qerr.Code, qerr.RequestID != "")
	}
	fmt.Println(errors.Is(err, queuecore.ErrTopicNotFound), queuecore.IsNotFound(err))
	// Output:
	// 404 TOPIC_NOT_FOUND true
	// true true
}

func ExampleOffsetService_Get() {
	ctx := context.Background()
	client, err := queuecore.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Topics.Create(ctx, queuecore.TopicCreateParams{Name: "example.offsets", Partitions: 1}); err != nil {
		log.Fatal(err)
	}
	defer client.Topics.Delete(ctx, "example.offsets")
	if _, err := client.PublishBatch(ctx, "example.offsets", []any{1, 2, 3, 4, 5}); err != nil {
		log.Fatal(err)
	}
	// A group exists from its first configuration, join or consume.
	if _, err := client.ConsumerGroups.Update(ctx, "example.offsets", "order-processing", queuecore.ConsumerGroupUpdateParams{AckTimeout: "30s"}); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Offsets.Seek(ctx, "example.offsets", queuecore.OffsetSeekParams{Group: "order-processing", Partition: 0, Offset: queuecore.Int64(2)}); err != nil {
		log.Fatal(err)
	}
	offset, err := client.Offsets.Get(ctx, "example.offsets", queuecore.OffsetGetParams{Group: "order-processing", Partition: 0})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("current %d, latest %d, lag %d\n", offset.Current, offset.Latest, offset.Lag)
	// Output: current 2, latest 5, lag 3
}
