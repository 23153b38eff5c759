// Package config holds the client settings that the option package sets. It is internal: customers set
// them through option.With* functions only.
package config

import (
	"log/slog"
	"net/http"
	"time"
)

// Config is what NewClient builds the client from.
type Config struct {
	APIKey     string
	APIKeySet  bool
	BaseURL    string
	Region     string
	Timeout    time.Duration
	MaxRetries int
	HTTPClient *http.Client
	Logger     *slog.Logger
	Headers    http.Header
	Tracer     Tracer // nil: no trace context is sent or followed
	// IdempotencyKey is a per-call option (a publish's key).
	IdempotencyKey string
	// ResponseInto is a per-call option: where the call's final HTTP answer goes.
	ResponseInto **http.Response
}
