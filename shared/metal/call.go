package metal

import (
	"context"
	"net/http"
	"sync/atomic"
)

// operation identifies one kind of API call. The name is the operationId of
// the Metal API's OpenAPI document (and so of the SDK method); it labels the
// metrics and is the name the simulator counts calls and injects faults by.
type operation struct {
	name string
	// safeToRepeat marks POST actions that the platform treats as no-ops
	// when their effect is already in place (port assign, convert, bond,
	// ...). They are retried like idempotent methods; other POSTs are not.
	safeToRepeat bool
}

// callInfo travels with a request through the transports in its context.
type callInfo struct {
	op       operation
	attempts atomic.Int32 // HTTP attempts made, set by the retry transport
}

type callInfoKey struct{}

// callInfoFrom returns the call a request belongs to. Requests always come
// from call, so the fallback only keeps a misuse from panicking.
func callInfoFrom(ctx context.Context) *callInfo {
	if info, ok := ctx.Value(callInfoKey{}).(*callInfo); ok {
		return info
	}
	return &callInfo{op: operation{name: "unknown"}}
}

// call runs one SDK request under the client's deadline, tagged with op for
// the transports, and turns a failure into this package's errors. exec must
// build its SDK request from the context it is given.
func call[T any](ctx context.Context, c *Client, op operation, exec func(context.Context) (T, *http.Response, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	info := &callInfo{op: op}
	v, resp, err := exec(context.WithValue(ctx, callInfoKey{}, info))
	if err != nil {
		var zero T
		return zero, newError(info, resp, err)
	}
	return v, nil
}

// callNoContent is call for requests answered without a body (deletes).
func callNoContent(ctx context.Context, c *Client, op operation, exec func(context.Context) (*http.Response, error)) error {
	_, err := call(ctx, c, op, func(ctx context.Context) (struct{}, *http.Response, error) {
		resp, err := exec(ctx)
		return struct{}{}, resp, err
	})
	return err
}
