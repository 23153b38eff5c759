// Package option holds the functional options of queuecore.NewClient, of Client.WithOptions, and of
// every call (its last arguments, applied to that call only):
//
//	client, err := queuecore.NewClient(
//		option.WithAPIKey(os.Getenv("QUEUECORE_API_KEY")),
//		option.WithRegion("us-east-1"),
//		option.WithMaxRetries(4),
//	)
//	topic, err := client.Topics.Get(ctx, "order.events", option.WithTimeout(2*time.Second))
//	res, err := client.Publish(ctx, "order.events", data, nil, option.WithIdempotencyKey("order-42"))
//	var raw *http.Response
//	topic, err = client.Topics.Get(ctx, "order.events", option.WithResponseInto(&raw))
package option

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/queuecore/queuecore-go/internal/config"
)

// RequestOption configures a client, or one call. Options are applied in order; a later one wins.
type RequestOption func(*config.Config) error

// WithAPIKey sets the project environment's key (pq_live_sk_… / pq_test_sk_…). Surrounding whitespace is
// trimmed (a key read from a file ends in a newline). Default: the QUEUECORE_API_KEY environment variable.
func WithAPIKey(key string) RequestOption {
	return func(c *config.Config) error {
		c.APIKey, c.APIKeySet = key, true
		return nil
	}
}

// WithBaseURL sets the API's address, e.g. "https://us-east-1.api.queuecore.cloud". It wins over
// QUEUECORE_BASE_URL and WithRegion.
func WithBaseURL(url string) RequestOption {
	return func(c *config.Config) error {
		c.BaseURL = url
		return nil
	}
}

// WithRegion picks the region's endpoint, https://<region>.api.queuecore.cloud, unless a base URL is
// given (WithBaseURL or QUEUECORE_BASE_URL), which wins.
func WithRegion(region string) RequestOption {
	return func(c *config.Config) error {
		c.Region = region
		return nil
	}
}

// WithTimeout bounds each attempt of a call (default 30 s); the call's context bounds the whole call,
// retries included. Zero means no per-attempt timeout.
func WithTimeout(d time.Duration) RequestOption {
	return func(c *config.Config) error {
		if d < 0 {
			return errors.New("queuecore: the timeout must not be negative")
		}
		c.Timeout = d
		return nil
	}
}

// WithMaxRetries sets how many times a failed attempt is retried (default 2): 429 (after Retry-After),
// 502, 503, 504 and connection errors. Other errors are never retried.
func WithMaxRetries(n int) RequestOption {
	return func(c *config.Config) error {
		if n < 0 {
			return errors.New("queuecore: max retries must be 0 or more")
		}
		c.MaxRetries = n
		return nil
	}
}

// WithHTTPClient sends every request through hc (proxies, transports, tracing). It is used as is and
// may be shared with other code.
func WithHTTPClient(hc *http.Client) RequestOption {
	return func(c *config.Config) error {
		if hc == nil {
			return errors.New("queuecore: WithHTTPClient(nil)")
		}
		c.HTTPClient = hc
		return nil
	}
}

// WithLogger logs retries, reconnects and consumer trouble to l (default: nothing is logged).
func WithLogger(l *slog.Logger) RequestOption {
	return func(c *config.Config) error {
		c.Logger = l
		return nil
	}
}

// WithHeader adds a header to every request.
func WithHeader(key, value string) RequestOption {
	return func(c *config.Config) error {
		if c.Headers == nil {
			c.Headers = http.Header{}
		}
		c.Headers.Add(key, value)
		return nil
	}
}

// WithIdempotencyKey sets the idempotency key of one Publish (it wins over PublishParams.IdempotencyKey);
// on a PublishBatch, the messages without a key of their own get "<key>:<index>" (0-based), so running
// the same batch again publishes nothing twice. Other calls ignore it; NewClient and WithOptions refuse
// it (a key belongs to one publish).
func WithIdempotencyKey(key string) RequestOption {
	return func(c *config.Config) error {
		if key == "" {
			return errors.New("queuecore: WithIdempotencyKey(\"\")")
		}
		c.IdempotencyKey = key
		return nil
	}
}

// WithResponseInto stores the call's final HTTP answer (after retries; its body already read, and readable
// again) in *dst, also when the call returns an API error: the Go counterpart of Python's
// with_raw_response. queuecore.ParseRateLimit(resp.Header) reads its rate-limit state. A call option only
// (NewClient and WithOptions refuse it).
func WithResponseInto(dst **http.Response) RequestOption {
	return func(c *config.Config) error {
		if dst == nil {
			return errors.New("queuecore: WithResponseInto(nil)")
		}
		c.ResponseInto = dst
		return nil
	}
}
