package queuecore

import (
	"context"
	"encoding/json"

	"github.com/queuecore/queuecore-go/option"
)

// Health is the service's readiness.
type Health struct {
	Status  string            `json:"status"`  // ok, degraded or down
	Checks  map[string]string `json:"checks"`  // database, redis, logEngine: ok, degraded, down or embedded
	Version string            `json:"version"` //
	// Error says why the service counts as down when it gave no health answer (unreachable, refused).
	Error string `json:"-"`
}

// OK is true unless the service is down.
func (h *Health) OK() bool { return h.Status != "down" }

// Health asks the service whether it is ready. It never fails: a service that is down, unreachable or
// answers nonsense reports Status "down" (with Error saying why).
func (c *Client) Health(ctx context.Context, opts ...option.RequestOption) *Health {
	c, err := c.with(opts)
	if err != nil {
		return &Health{Status: "down", Checks: map[string]string{}, Error: err.Error()}
	}
	zero := 0
	resp, err := c.send(ctx, request{method: "GET", path: "/v1/health", noAuth: true, acceptStatus: 503, maxRetries: &zero})
	if err != nil {
		return &Health{Status: "down", Checks: map[string]string{}, Error: err.Error()}
	}
	var h Health
	if json.Unmarshal(resp.body, &h) != nil || h.Status == "" {
		return &Health{Status: "down", Checks: map[string]string{}, Error: "the health answer is not a health report"}
	}
	if h.Checks == nil {
		h.Checks = map[string]string{}
	}
	return &h
}

// WebSocketToken is a short-lived token for a browser's WebSocket consumer (?token=…).
type WebSocketToken struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expiresAt"`
}

// CreateWebSocketToken issues a token bound to topic (and group, if not empty).
func (c *Client) CreateWebSocketToken(ctx context.Context, topic, group string, opts ...option.RequestOption) (*WebSocketToken, error) {
	c, err := c.with(opts)
	if err != nil {
		return nil, err
	}
	body := map[string]string{"topic": topic}
	if group != "" {
		body["group"] = group
	}
	var t WebSocketToken
	if _, err := c.do(ctx, request{method: "POST", path: "/v1/tokens/websocket", body: body}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
