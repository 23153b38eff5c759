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
	// RateLimit is the key's rate-limit state the answer reported (nil on routes without a limit).
	RateLimit *RateLimit `json:"-"`
	// Err is the cause of an error without an answer (a connection error, the context's error).
	Err error `json:"-"`

	// class is set on the class values (ErrBadRequest, ErrConnection, ...): what they match.
	class func(*Error) bool
}

// ErrorDetail is one validation problem.
type ErrorDetail struct {
	Field string `json:"field"`
	Issue string `json:"issue"`
	// Position (1-based) and Expected say where a bad group filter went wrong and what was expected there.
	Position int    `json:"position,omitempty"`
	Expected string `json:"expected,omitempty"`
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

// Is matches the Err* values: a class value (ErrBadRequest, ErrNotFound, ErrConnection, …) matches its
// class of errors; a code value (ErrTopicNotFound, …) the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t.class != nil {
		return t.class(e)
	}
	if t.Code != "" {
		return e.Code == t.Code
	}
	return t.Status != 0 && e.Status == t.Status
}

// The classes of errors, one per error class of the Python and Node.js SDKs (sdk/README.md has the
// table): test them with errors.Is. Each matches every error of its class whatever its code.
var (
	// ErrBadRequest is any 400 (INVALID_REQUEST, OFFSET_OUT_OF_RANGE): BadRequestError.
	ErrBadRequest = statusClass(400)
	// ErrAuthentication is any 401 (INVALID_API_KEY): AuthenticationError.
	ErrAuthentication = statusClass(401)
	// ErrPermissionDenied is any 403 (FORBIDDEN, QUOTA_EXCEEDED): PermissionDeniedError.
	ErrPermissionDenied = statusClass(403)
	// ErrNotFound is any 404 (TOPIC_NOT_FOUND, GROUP_NOT_FOUND, …): NotFoundError.
	ErrNotFound = statusClass(404)
	// ErrConflict is any 409 (TOPIC_ALREADY_EXISTS, GROUP_ACTIVE, …): ConflictError.
	ErrConflict = statusClass(409)
	// ErrPayloadTooLarge is any 413 (PAYLOAD_TOO_LARGE): PayloadTooLargeError.
	ErrPayloadTooLarge = statusClass(413)
	// ErrRateLimit is any 429 (RATE_LIMIT_EXCEEDED) that outlasted the retries: RateLimitError.
	ErrRateLimit = statusClass(429)
	// ErrInternalServer is a 500 or any other 5xx but 503: InternalServerError.
	ErrInternalServer = &Error{Status: 500, class: func(e *Error) bool { return e.Status >= 500 && e.Status != 503 }}
	// ErrServiceUnavailable is any 503 (SERVICE_UNAVAILABLE): ServiceUnavailableError.
	ErrServiceUnavailable = statusClass(503)
	// ErrConnection is a call that got no answer, a timed-out one included: APIConnectionError.
	ErrConnection = &Error{Code: "CONNECTION_ERROR", class: func(e *Error) bool {
		return e.Status == 0 && (e.Code == "CONNECTION_ERROR" || e.Code == "TIMEOUT")
	}}
	// ErrTimeout is a call that got no answer in time (per attempt, or the context's deadline):
	// APITimeoutError.
	ErrTimeout = &Error{Code: "TIMEOUT", class: func(e *Error) bool { return e.Status == 0 && e.Code == "TIMEOUT" }}
	// ErrInvalidResponse is a 2xx answer that is not what the API promises (INVALID_RESPONSE):
	// APIResponseValidationError.
	ErrInvalidResponse = &Error{Code: "INVALID_RESPONSE", class: func(e *Error) bool { return e.Code == "INVALID_RESPONSE" }}
)

func statusClass(status int) *Error {
	return &Error{Status: status, class: func(e *Error) bool { return e.Status == status }}
}

// Values for one code each, to test with errors.Is.
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
	ErrRateLimitExceeded  = &Error{Code: "RATE_LIMIT_EXCEEDED", Status: 429}
	ErrInternal           = &Error{Code: "INTERNAL_ERROR", Status: 500}
)

// Deprecated names, kept so that existing code goes on compiling and matching.
var (
	// Deprecated: use ErrRateLimit (the same value).
	ErrRateLimited = ErrRateLimit
	// Deprecated: use ErrServiceUnavailable (the same value).
	ErrUnavailable = ErrServiceUnavailable
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

// IsRateLimited reports whether err is a 429 that outlasted the retries (errors.Is(err, ErrRateLimit)).
func IsRateLimited(err error) bool { return statusIs(err, 429) }

// IsUnauthorized reports whether err is a 401 (missing, malformed, unknown or revoked key).
func IsUnauthorized(err error) bool { return statusIs(err, 401) }

// IsConnectionError reports whether err is a request that got no answer.
func IsConnectionError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == 0
}
