// Package queuecore is the Go client of QueueCore, the managed pub/sub message broker.
//
//	client, err := queuecore.NewClient() // QUEUECORE_API_KEY, QUEUECORE_BASE_URL
//	if err != nil { … }
//	res, err := client.Publish(ctx, "order.events", map[string]any{"type": "order.created"}, nil)
//
// Every call takes a context.Context first and honours its cancellation and deadline, retries included.
// Errors are *queuecore.Error (see errors.As, errors.Is with ErrTopicNotFound and friends). Calls are
// grouped as in the docs: client.Topics, client.ConsumerGroups, client.DLQ, client.Offsets,
// client.Messages, client.Alerts, client.Schedules; Publish, PublishBatch, Consume and Health are on the client itself.
package queuecore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/queuecore/queuecore-go/internal/config"
	"github.com/queuecore/queuecore-go/option"
)

// Version is the SDK's version, sent in the User-Agent.
const Version = "0.1.0"

// Defaults of the client options.
const (
	DefaultBaseURL    = "http://127.0.0.1:8080"
	DefaultTimeout    = 30 * time.Second
	DefaultMaxRetries = 2
	// EnvAPIKey and EnvBaseURL are read when the matching option is not given.
	EnvAPIKey  = "QUEUECORE_API_KEY"
	EnvBaseURL = "QUEUECORE_BASE_URL"

	initialRetryDelay = 500 * time.Millisecond
	maxRetryDelay     = 8 * time.Second
	maxRetryAfter     = 60 * time.Second
)

// Client is the QueueCore client. It is safe for concurrent use; make one and share it.
type Client struct {
	// Topics creates, lists, gets, updates and deletes topics.
	Topics *TopicService
	// Messages gets messages by id and reads partitions (stream mode).
	Messages *MessageService
	// ConsumerGroups lists, describes, configures and deletes consumer groups; resets stopped groups.
	ConsumerGroups *ConsumerGroupService
	// DLQ inspects, replays and deletes dead letters, and lists the audit trail.
	DLQ *DLQService
	// Offsets gets, seeks and resets a group's offsets, also while it consumes.
	Offsets *OffsetService
	// Alerts sets the project's alert webhook and lists its deliveries.
	Alerts *AlertService
	// Schedules publishes a message to a topic on a cron expression or a fixed period.
	Schedules *ScheduleService

	apiKey     string
	baseURL    string
	timeout    time.Duration
	maxRetries int
	hc         *http.Client
	log        *slog.Logger
	headers    http.Header
	tracer     Tracer // option.WithTracer; nil: no trace context

	rateLimit      *rateLimitState // shared with the copies WithOptions and per-call options make
	idempotencyKey string          // option.WithIdempotencyKey, per call
	responseInto   **http.Response // option.WithResponseInto, per call
}

// NewClient makes a client. Without options it reads QUEUECORE_API_KEY and QUEUECORE_BASE_URL.
//
// The base URL is, in this order: option.WithBaseURL, QUEUECORE_BASE_URL,
// https://<region>.api.queuecore.cloud for option.WithRegion, else http://127.0.0.1:8080.
func NewClient(opts ...option.RequestOption) (*Client, error) {
	cfg := config.Config{Timeout: DefaultTimeout, MaxRetries: DefaultMaxRetries}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	key := cfg.APIKey
	if !cfg.APIKeySet {
		key = os.Getenv(EnvAPIKey)
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return nil, fmt.Errorf("queuecore: no API key: pass option.WithAPIKey or set %s", EnvAPIKey)
	}
	if strings.ContainsAny(key, " \t\r\n") {
		return nil, errors.New("queuecore: the API key contains whitespace")
	}
	base, err := resolveBaseURL(cfg.BaseURL, os.Getenv(EnvBaseURL), cfg.Region)
	if err != nil {
		return nil, err
	}
	c := &Client{
		apiKey:     key,
		baseURL:    base,
		timeout:    cfg.Timeout,
		maxRetries: cfg.MaxRetries,
		hc:         cfg.HTTPClient,
		log:        cfg.Logger,
		headers:    cfg.Headers,
		tracer:     cfg.Tracer,
		rateLimit:  &rateLimitState{},
	}
	if cfg.IdempotencyKey != "" || cfg.ResponseInto != nil {
		return nil, errors.New("queuecore: option.WithIdempotencyKey and option.WithResponseInto are options of a call, not of a client")
	}
	if c.hc == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = 64
		c.hc = &http.Client{Transport: transport}
	}
	if c.log == nil {
		c.log = slog.New(discardHandler{})
	}
	c.Topics = &TopicService{c}
	c.Messages = &MessageService{c}
	c.ConsumerGroups = &ConsumerGroupService{c}
	c.DLQ = &DLQService{c}
	c.Offsets = &OffsetService{c}
	c.Alerts = &AlertService{c}
	c.Schedules = &ScheduleService{c}
	return c, nil
}

// resolveBaseURL applies the region rule shared by every SDK: an explicit base URL wins, then the
// environment variable, then the region's endpoint, then the local default.
func resolveBaseURL(explicit, env, region string) (string, error) {
	base := strings.TrimSpace(explicit)
	if base == "" {
		base = strings.TrimSpace(env)
	}
	if base == "" && strings.TrimSpace(region) != "" {
		base = "https://" + strings.TrimSpace(region) + ".api.queuecore.cloud"
	}
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("queuecore: the base URL %q is not an http(s) URL", base)
	}
	return strings.TrimRight(base, "/"), nil
}

// WithOptions is a copy of the client with opts applied, sharing its connection pool and rate-limit
// state (as Python's with_options and Node's withOptions):
//
//	fast, err := client.WithOptions(option.WithMaxRetries(0), option.WithTimeout(2*time.Second))
//
// The same options can be given to a single call, as its last arguments:
//
//	topic, err := client.Topics.Get(ctx, "order.events", option.WithTimeout(2*time.Second))
func (c *Client) WithOptions(opts ...option.RequestOption) (*Client, error) {
	copied, err := c.with(opts)
	if err != nil {
		return nil, err
	}
	if copied.idempotencyKey != "" || copied.responseInto != nil {
		return nil, errors.New("queuecore: option.WithIdempotencyKey and option.WithResponseInto are options of a call, not of a client")
	}
	return copied, nil
}

// with applies a call's options to a copy of the client (the client itself when there are none). A
// base URL or key given per call is used as given; WithRegion does not change a client's base URL.
func (c *Client) with(opts []option.RequestOption) (*Client, error) {
	if len(opts) == 0 {
		return c, nil
	}
	cfg := config.Config{APIKey: c.apiKey, APIKeySet: true, BaseURL: c.baseURL, Timeout: c.timeout,
		MaxRetries: c.maxRetries, HTTPClient: c.hc, Logger: c.log, Headers: c.headers.Clone(),
		Tracer: c.tracer, IdempotencyKey: c.idempotencyKey, ResponseInto: c.responseInto}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	copied := *c
	copied.apiKey = strings.TrimSpace(cfg.APIKey)
	if copied.apiKey == "" || strings.ContainsAny(copied.apiKey, " \t\r\n") {
		return nil, errors.New("queuecore: the API key given to the call is empty or contains whitespace")
	}
	if cfg.BaseURL != c.baseURL {
		base, err := resolveBaseURL(cfg.BaseURL, "", "")
		if err != nil {
			return nil, err
		}
		copied.baseURL = base
	}
	copied.timeout, copied.maxRetries, copied.hc = cfg.Timeout, cfg.MaxRetries, cfg.HTTPClient
	copied.headers, copied.idempotencyKey, copied.responseInto = cfg.Headers, cfg.IdempotencyKey, cfg.ResponseInto
	copied.tracer = cfg.Tracer
	if cfg.Logger != nil {
		copied.log = cfg.Logger
	}
	// Services point at their client: the copy gets its own.
	copied.Topics = &TopicService{&copied}
	copied.Messages = &MessageService{&copied}
	copied.ConsumerGroups = &ConsumerGroupService{&copied}
	copied.DLQ = &DLQService{&copied}
	copied.Offsets = &OffsetService{&copied}
	copied.Alerts = &AlertService{&copied}
	copied.Schedules = &ScheduleService{&copied}
	return &copied, nil
}

// BaseURL is where the client sends its requests.
func (c *Client) BaseURL() string { return c.baseURL }

type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }

// -- the request loop ------------------------------------------------------------------------------

type request struct {
	method         string
	path           string // starting with /v1/, segments escaped
	query          url.Values
	body           any
	hasBody        bool
	idempotencyKey string
	noAuth         bool
	acceptStatus   int // a non-2xx status whose non-envelope body is an answer (health's 503)
	maxRetries     *int
	header         map[string]string // this call's own headers (a publish's trace context)
}

type response struct {
	status    int
	header    http.Header
	body      []byte
	requestID string
	raw       *http.Response // its Body reads body again
}

func newIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "qc-go-" + hex.EncodeToString(b[:])
}

func seg(s string) string { return url.PathEscape(s) }

// do sends one call, retrying what is safe to retry, and decodes a 2xx JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, r request, out any) (*response, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	if out != nil && len(resp.body) > 0 {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return resp, &Error{Status: resp.status, Code: "INVALID_RESPONSE", RequestID: resp.requestID,
				Message: "the answer does not match the expected shape: " + err.Error(), Err: err}
		}
	}
	return resp, nil
}

func (c *Client) send(ctx context.Context, r request) (*response, error) {
	var payload []byte
	if r.hasBody || r.body != nil {
		var err error
		if payload, err = json.Marshal(r.body); err != nil {
			return nil, &Error{Code: "INVALID_REQUEST", Message: "the body is not valid JSON: " + err.Error(), Err: err}
		}
	}
	target := c.baseURL + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	maxRetries := c.maxRetries
	if r.maxRetries != nil {
		maxRetries = *r.maxRetries
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.attempt(ctx, r, target, payload)
		var wait time.Duration
		if err != nil {
			if ctx.Err() != nil {
				return nil, contextError(ctx, err)
			}
			if attempt >= maxRetries || !retryableTransport(err) {
				return nil, err
			}
			wait = backoff(attempt)
			c.log.Info("queuecore: retrying", "method", r.method, "path", r.path, "in", wait, "error", err)
		} else {
			if c.responseInto != nil {
				*c.responseInto = resp.raw
			}
			if (resp.status >= 200 && resp.status < 300) || (r.acceptStatus != 0 && resp.status == r.acceptStatus) {
				return resp, nil
			}
			apiErr := parseError(resp)
			if !retryableStatus(resp.status) || attempt >= maxRetries {
				return nil, apiErr
			}
			wait = backoff(attempt)
			if apiErr.RetryAfter > 0 {
				wait = min(apiErr.RetryAfter, maxRetryAfter)
			}
			c.log.Info("queuecore: retrying", "method", r.method, "path", r.path, "in", wait, "status", resp.status)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, contextError(ctx, nil)
		case <-timer.C:
		}
	}
}

func (c *Client) attempt(ctx context.Context, r request, target string, payload []byte) (*response, error) {
	actx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(actx, r.method, target, body)
	if err != nil {
		return nil, &Error{Code: "INVALID_REQUEST", Message: err.Error(), Err: err}
	}
	c.setHeaders(req.Header, !r.noAuth)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", r.idempotencyKey)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(actx, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, transportError(actx, err)
	}
	c.rateLimit.set(ParseRateLimit(res.Header))
	res.Body = io.NopCloser(bytes.NewReader(data))
	return &response{status: res.StatusCode, header: res.Header, body: data, requestID: res.Header.Get("X-Request-Id"), raw: res}, nil
}

func (c *Client) setHeaders(h http.Header, auth bool) {
	h.Set("Accept", "application/json")
	h.Set("User-Agent", "queuecore-go/"+Version)
	for k, vs := range c.headers {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if auth {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
}

func transportError(actx context.Context, err error) *Error {
	if actx.Err() == context.DeadlineExceeded {
		return &Error{Code: "TIMEOUT", Message: "the request timed out", Err: err}
	}
	return &Error{Code: "CONNECTION_ERROR", Message: "connection error: " + err.Error(), Err: err}
}

func contextError(ctx context.Context, last error) *Error {
	msg := "the call's context ended"
	if last != nil {
		msg += " (last attempt: " + last.Error() + ")"
	}
	code := "CANCELED"
	if ctx.Err() == context.DeadlineExceeded {
		code = "TIMEOUT"
	}
	return &Error{Code: code, Message: msg, Err: ctx.Err()}
}

func retryableTransport(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == "CONNECTION_ERROR" || e.Code == "TIMEOUT")
}

// retryableStatus: 429 is refused before any work is done; 502/503/504 mean the call did not get through
// or the service is briefly unable (a publish is safe to repeat thanks to its idempotency key). Never
// another 4xx, never 500.
func retryableStatus(status int) bool {
	return status == 429 || status == 502 || status == 503 || status == 504
}

// backoff is the wait before retry number attempt+1: 0.5 s × 2^attempt capped at 8 s, less up to 25 %
// jitter so that clients failing together do not retry together.
func backoff(attempt int) time.Duration {
	d := float64(initialRetryDelay) * math.Pow(2, float64(attempt))
	if d > float64(maxRetryDelay) {
		d = float64(maxRetryDelay)
	}
	return time.Duration(d * (1 - 0.25*mrand.Float64()))
}

func parseRetryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func parseError(resp *response) *Error {
	var env struct {
		Error *Error `json:"error"`
	}
	e := &Error{}
	if json.Unmarshal(resp.body, &env) == nil && env.Error != nil {
		e = env.Error
	}
	e.Status = resp.status
	if e.Code == "" {
		e.Code = http.StatusText(resp.status)
		e.Message = strings.TrimSpace(string(resp.body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200]
		}
	}
	if e.RequestID == "" {
		e.RequestID = resp.requestID
	}
	e.RetryAfter = parseRetryAfter(resp.header)
	e.RateLimit = ParseRateLimit(resp.header)
	return e
}

// -- small helpers for optional fields ----------------------------------------------------------------

// Int returns a pointer to v, for optional fields where 0 is meaningful (Partition, MaxRetries).
func Int(v int) *int { return &v }

// Int64 returns a pointer to v (optional offsets).
func Int64(v int64) *int64 { return &v }

// Float64 returns a pointer to v.
func Float64(v float64) *float64 { return &v }
