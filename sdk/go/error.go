package queuecore

import (
	"errors"
	"fmt"
	"time"
)

// Error is every error a call returns: an answer of the API (Status is its HTTP status, Code one of the
// documented codes) or a request that never got an answer (Status 0, Code "CONNECTION_ERROR", "TIMEOUT"
// or "CANCELED", Err the cause). Use errors.As to read it, errors.Is with the Err* values to test it:
//
//	var qerr *queuecore.Error
//	if errors.As(err, &qerr) {
//		log.Printf("%s (%d), request %s", qerr.Code, qerr.Status, qerr.RequestID)
//	}
//	if errors.Is(err, queuecore.ErrTopicNotFound) { … }
type Error struct {
	// Status is the HTTP status, 0 when no answer came.
	Status int `json:"status"`
	// Code is machine-readable: TOPIC_NOT_FOUND, RATE_LIMIT_EXCEEDED, …
	Code string `json:"code"`
	// Message is for people.
	Message string `json:"message"`
	// RequestID identifies the request; include it when contacting support.
	RequestID string `json:"requestId"`
	// Details lists validation problems, when the API gave them.
	Details []ErrorDetail `json:"details,omitempty"`
	// RetryAfter is the server's Retry-After (429), zero when absent.
	RetryAfter time.Duration `json:"-"`
	// Err is the cause of an error without an answer (a connection error, the context's error).
	Err error `json:"-"`
}

// ErrorDetail is one validation problem.
type ErrorDetail struct {
	Field string `json:"field"`
	Issue string `json:"issue"`
}

func (e *Error) Error() string {
	s := e.Code
	if e.Status != 0 {
		s = fmt.Sprintf("%d %s", e.Status, e.Code)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	if e.Err != nil && e.Message == "" {
		s += ": " + e.Err.Error()
	}
	return "queuecore: " + s
}

// Unwrap gives the cause of an error without an answer (so errors.Is(err, context.DeadlineExceeded)
// holds for a call that ran out of time).
func (e *Error) Unwrap() error { return e.Err }

// Is matches the Err* values: same Code when the target has one, else same Status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.Code != "" {
		return e.Code == t.Code
	}
	return t.Status != 0 && e.Status == t.Status
}

// Values to test errors with errors.Is. The code-specific ones match that code; ErrNotFound, ErrConflict,
// ErrRateLimited and ErrUnavailable match any error of their status.
var (
	ErrInvalidAPIKey      = &Error{Code: "INVALID_API_KEY", Status: 401}
	ErrForbidden          = &Error{Code: "FORBIDDEN", Status: 403}
	ErrTopicNotFound      = &Error{Code: "TOPIC_NOT_FOUND", Status: 404}
	ErrGroupNotFound      = &Error{Code: "GROUP_NOT_FOUND", Status: 404}
	ErrMessageNotFound    = &Error{Code: "MESSAGE_NOT_FOUND", Status: 404}
	ErrMemberNotFound     = &Error{Code: "MEMBER_NOT_FOUND", Status: 404}
	ErrInvalidRequest     = &Error{Code: "INVALID_REQUEST", Status: 400}
	ErrOffsetOutOfRange   = &Error{Code: "OFFSET_OUT_OF_RANGE", Status: 400}
	ErrTopicAlreadyExists = &Error{Code: "TOPIC_ALREADY_EXISTS", Status: 409}
	ErrGroupActive        = &Error{Code: "GROUP_ACTIVE", Status: 409}
	ErrStaleGeneration    = &Error{Code: "STALE_GENERATION", Status: 409}
	ErrPayloadTooLarge    = &Error{Code: "PAYLOAD_TOO_LARGE", Status: 413}
	ErrRateLimitExceeded  = &Error{Code: "RATE_LIMIT_EXCEEDED", Status: 429}
	ErrServiceUnavailable = &Error{Code: "SERVICE_UNAVAILABLE", Status: 503}
	ErrInternal           = &Error{Code: "INTERNAL_ERROR", Status: 500}
	ErrConnection         = &Error{Code: "CONNECTION_ERROR"}

	ErrNotFound    = &Error{Status: 404}
	ErrConflict    = &Error{Status: 409}
	ErrRateLimited = &Error{Status: 429}
	ErrUnavailable = &Error{Status: 503}
)

// ErrConsumerClosed is returned by Message.Ack, Nack and Extend once the consumer is closed, and by
// Consumer.Start on a closed consumer.
var ErrConsumerClosed = errors.New("queuecore: the consumer is closed")

// ErrNotDelivered is returned by Ack, Nack and Extend of a message that was not delivered by a consumer
// (read with Messages.Get or Messages.Read).
var ErrNotDelivered = errors.New("queuecore: the message was not delivered by a consumer")

func statusIs(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// IsNotFound reports whether err is a 404 (no such topic, group, message or member).
func IsNotFound(err error) bool { return statusIs(err, 404) }

// IsConflict reports whether err is a 409 (already exists, group active, stale generation).
func IsConflict(err error) bool { return statusIs(err, 409) }

// IsRateLimited reports whether err is a 429 that outlasted the retries.
func IsRateLimited(err error) bool { return statusIs(err, 429) }

// IsUnauthorized reports whether err is a 401 (missing, malformed, unknown or revoked key).
func IsUnauthorized(err error) bool { return statusIs(err, 401) }

// IsConnectionError reports whether err is a request that got no answer.
func IsConnectionError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == 0
}
