package queuecore

import (
	"context"
	"encoding/json"
	"net/url"
	"time"

	"github.com/queuecore/queuecore-go/option"
)

// Schedule publishes one message to Topic at every due time of Cron (in Timezone) or Every, exactly once
// per due time.
type Schedule struct {
	ID        string            `json:"id"`        // sch_…
	Topic     string            `json:"topic"`     //
	Cron      *string           `json:"cron"`      // five-field cron; nil for an Every schedule
	Every     *string           `json:"every"`     // <n>ms|s|m|h|d; nil for a Cron schedule
	Timezone  string            `json:"timezone"`  // an IANA name, UTC by default
	Status    string            `json:"status"`    // active or paused
	NextRunAt *time.Time        `json:"nextRunAt"` // the next due time; nil while paused
	CreatedAt time.Time         `json:"createdAt"` //
	Data      json.RawMessage   `json:"data"`      // what every run publishes
	Key       *string           `json:"key"`       //
	Headers   map[string]string `json:"headers"`   // every run adds queuecore-schedule and queuecore-scheduled-at
}

// ScheduleCreateParams are the fields of a new schedule: exactly one of Cron and Every. Data is any value
// encoding/json takes (nil publishes JSON null).
type ScheduleCreateParams struct {
	Topic    string            `json:"topic"`
	Cron     string            `json:"cron,omitempty"`     // minute hour day-of-month month day-of-week
	Every    string            `json:"every,omitempty"`    // a period of at least 1s, from creation
	Timezone string            `json:"timezone,omitempty"` // an IANA name for Cron; UTC when empty
	Data     any               `json:"data"`
	Key      string            `json:"key,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// ScheduleRun is one run of a schedule: its due time and the message it published.
type ScheduleRun struct {
	At        time.Time `json:"at"` // the due time (the message's queuecore-scheduled-at header)
	MessageID string    `json:"messageId"`
	Partition int       `json:"partition"`
	Offset    int64     `json:"offset"`
}

// ScheduleService is client.Schedules.
type ScheduleService struct{ c *Client }

func schedulePath(id string, action string) string {
	path := "/v1/schedules/" + seg(id)
	if action != "" {
		path += "/" + action
	}
	return path
}

func (s *ScheduleService) one(ctx context.Context, method, path string, body any, opts []option.RequestOption) (*Schedule, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out Schedule
	if _, err := c.do(ctx, request{method: method, path: path, body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Create makes a schedule. ErrInvalidRequest names the field (Error.Details) for a bad cron, period or
// zone; ErrTopicNotFound for an unknown topic; ErrPermissionDenied (QUOTA_EXCEEDED) past the quota.
func (s *ScheduleService) Create(ctx context.Context, params ScheduleCreateParams, opts ...option.RequestOption) (*Schedule, error) {
	return s.one(ctx, "POST", "/v1/schedules", params, opts)
}

// List iterates over every schedule of the environment, fetching pages lazily (params may be nil).
func (s *ScheduleService) List(ctx context.Context, params *ListParams, opts ...option.RequestOption) *Iter[Schedule] {
	c, err := s.c.with(opts)
	if err != nil {
		return failedIter[Schedule](ctx, err)
	}
	cursor := ""
	if params != nil {
		cursor = params.Cursor
	}
	first := true
	return newIter(ctx, func(ctx context.Context, next string) ([]Schedule, string, error) {
		q := url.Values(params.query())
		if first {
			next, first = cursor, false
		}
		if next != "" {
			q.Set("cursor", next)
		}
		var page struct {
			Data       []Schedule `json:"data"`
			NextCursor string     `json:"nextCursor"`
		}
		_, err := c.do(ctx, request{method: "GET", path: "/v1/schedules", query: q}, &page)
		return page.Data, page.NextCursor, err
	})
}

// Get answers one schedule; ErrNotFound (code NOT_FOUND) when there is none of this id.
func (s *ScheduleService) Get(ctx context.Context, id string, opts ...option.RequestOption) (*Schedule, error) {
	return s.one(ctx, "GET", schedulePath(id, ""), nil, opts)
}

// Pause stops publishing runs until Resume.
func (s *ScheduleService) Pause(ctx context.Context, id string, opts ...option.RequestOption) (*Schedule, error) {
	return s.one(ctx, "POST", schedulePath(id, "pause"), nil, opts)
}

// Resume publishes again from the first due time after now.
func (s *ScheduleService) Resume(ctx context.Context, id string, opts ...option.RequestOption) (*Schedule, error) {
	return s.one(ctx, "POST", schedulePath(id, "resume"), nil, opts)
}

// Delete removes a schedule (the messages it published stay in the topic).
func (s *ScheduleService) Delete(ctx context.Context, id string, opts ...option.RequestOption) error {
	c, err := s.c.with(opts)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, request{method: "DELETE", path: schedulePath(id, "")}, nil)
	return err
}

// Runs answers the schedule's last runs, newest first.
func (s *ScheduleService) Runs(ctx context.Context, id string, opts ...option.RequestOption) ([]ScheduleRun, error) {
	c, err := s.c.with(opts)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data []ScheduleRun `json:"data"`
	}
	if _, err := c.do(ctx, request{method: "GET", path: schedulePath(id, "runs")}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}
