package queuecore

import (
	"context"
	"net/url"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// AlertEndpoint is the project's alert webhook.
type AlertEndpoint struct {
	URL        string    `json:"url"`
	SecretHint string    `json:"secretHint"` // the secret's last four characters
	State      string    `json:"state"`      // the delivery breaker: closed, open or half-open
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// Secret is only in the answer that generated it: keep it, it is never shown again.
	Secret string `json:"secret"`
}

// AlertDelivery is one attempt at delivering an alert.
type AlertDelivery struct {
	ID         string    `json:"id"`
	EventID    string    `json:"eventId"`
	EventType  string    `json:"eventType"`
	Attempt    int       `json:"attempt"`
	OK         bool      `json:"ok"`
	StatusCode int       `json:"statusCode"`
	Error      string    `json:"error"`
	DurationMS int       `json:"durationMs"`
	At         time.Time `json:"at"`
}

// AlertEndpointParams sets the webhook; without Secret on creation one is generated and returned once.
type AlertEndpointParams struct {
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// AlertService is client.Alerts.
type AlertService struct{ c *Client }

const alertEndpoint = "/v1/alerts/endpoint"

// Set creates or updates the endpoint.
func (s *AlertService) Set(ctx context.Context, params AlertEndpointParams, opts ...option.RequestOption) (*AlertEndpoint, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var e AlertEndpoint
	if _, err := c.do(ctx, request{method: "PUT", path: alertEndpoint, body: params}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Get returns the endpoint (never its secret); a 404 when none is set.
func (s *AlertService) Get(ctx context.Context, opts ...option.RequestOption) (*AlertEndpoint, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var e AlertEndpoint
	if _, err := c.do(ctx, request{method: "GET", path: alertEndpoint}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Delete removes the endpoint.
func (s *AlertService) Delete(ctx context.Context, opts ...option.RequestOption) error {
	c, err := s.c.with(opts)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, request{method: "DELETE", path: alertEndpoint}, nil)
	return err
}

// SendTestEvent queues a signed test event for the endpoint and returns its event id.
func (s *AlertService) SendTestEvent(ctx context.Context, opts ...option.RequestOption) (string, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return "", err
	}
	var out struct {
		EventID string `json:"eventId"`
	}
	if _, err := c.do(ctx, request{method: "POST", path: alertEndpoint + "/test"}, &out); err != nil {
		return "", err
	}
	return out.EventID, nil
}

// Deliveries iterates over every delivery attempt, newest first (params may be nil).
func (s *AlertService) Deliveries(ctx context.Context, params *ListParams, opts ...option.RequestOption) *Iter[AlertDelivery] {
	c, err := s.c.with(opts)
	if err != nil {
		return failedIter[AlertDelivery](ctx, err)
	}
	first := true
	return newIter(ctx, func(ctx context.Context, cursor string) ([]AlertDelivery, string, error) {
		q := url.Values(params.query())
		if first && params != nil {
			cursor = params.Cursor
		}
		first = false
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Data       []AlertDelivery `json:"data"`
			NextCursor string          `json:"nextCursor"`
		}
		_, err := c.do(ctx, request{method: "GET", path: "/v1/alerts/deliveries", query: q}, &page)
		return page.Data, page.NextCursor, err
	})
}
