package metal

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Error kinds, matched with errors.Is (or the Is* helpers) against the errors
// the Client returns.
var (
	// ErrNotFound: the object does not exist (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized: the token is invalid (401) or may not access the
	// object (403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrUnprocessable: the API rejected the request as invalid (422); the
	// reasons are in ErrorMessages.
	ErrUnprocessable = errors.New("unprocessable")
	// ErrRateLimited: the API still answered 429 when retries ran out.
	ErrRateLimited = errors.New("rate limited")
)

// APIError is an HTTP error answer from the Metal API. Its message is built
// from the operation, the status and the API's own messages only: never from
// request headers, so the API token cannot end up in it.
type APIError struct {
	// Operation is the API operationId, e.g. "findVrfById".
	Operation string
	// StatusCode is the HTTP status of the last attempt.
	StatusCode int
	// Messages are the "error" and "errors" of the API's answer.
	Messages []string
	// Attempts is how many HTTP requests the call made.
	Attempts int

	sdkErr error
}

// maxMessages is how many of an answer's messages an APIError repeats.
const maxMessages = 4

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "metal %s: %d %s", e.Operation, e.StatusCode, http.StatusText(e.StatusCode))
	// The answer's messages are the API's (or whatever answered at the
	// endpoint's address) and end up in conditions: each is quoted and cut,
	// and only the first few are repeated.
	for i, m := range e.Messages {
		if i == maxMessages {
			fmt.Fprintf(&b, "; and %d more", len(e.Messages)-maxMessages)
			break
		}
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(message.Quote(m))
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Unwrap exposes the SDK's *metalv1.GenericOpenAPIError.
func (e *APIError) Unwrap() error { return e.sdkErr }

// Is maps the status code onto the error kinds.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrUnprocessable:
		return e.StatusCode == http.StatusUnprocessableEntity
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// IsNotFound reports whether err means the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsUnauthorized reports whether err means the credentials were refused.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsUnprocessable reports whether the API rejected the request as invalid.
func IsUnprocessable(err error) bool { return errors.Is(err, ErrUnprocessable) }

// ErrorMessages returns the messages the API gave for a failed call, e.g. why
// a VRF IP reservation was refused; nil when err is not an API answer.
func ErrorMessages(err error) []string {
	if apiErr, ok := errors.AsType[*APIError](err); ok {
		return apiErr.Messages
	}
	return nil
}

// newError describes a failed call. resp is the last HTTP response, nil when
// no answer arrived.
func newError(info *callInfo, resp *http.Response, err error) error {
	attempts := int(info.attempts.Load())
	if resp == nil {
		// Transport failure or expired deadline. The error quotes the
		// request URL, which never holds credentials.
		if attempts > 1 {
			return fmt.Errorf("metal %s (after %d attempts): %w", info.op.name, attempts, err)
		}
		return fmt.Errorf("metal %s: %w", info.op.name, err)
	}
	if resp.StatusCode < http.StatusMultipleChoices {
		return fmt.Errorf("metal %s: decoding the response: %w", info.op.name, err)
	}
	apiErr := &APIError{Operation: info.op.name, StatusCode: resp.StatusCode, Attempts: attempts, sdkErr: err}
	if sdkErr, ok := errors.AsType[*metalv1.GenericOpenAPIError](err); ok {
		apiErr.Messages = apiMessages(sdkErr.Body())
	}
	return apiErr
}

// apiMessages extracts the messages of an error body. The SDK only decodes
// the bodies of some statuses (not 422), so the body is decoded here.
func apiMessages(body []byte) []string {
	var model metalv1.Error
	if json.Unmarshal(body, &model) != nil {
		return nil
	}
	msgs := model.GetErrors()
	if msg := model.GetError(); msg != "" {
		msgs = append(msgs, msg)
	}
	return msgs
}
