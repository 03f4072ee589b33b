package metal

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Retry defaults, used for the zero fields of a RetryPolicy.
const (
	defaultMaxAttempts    = 5
	defaultInitialBackoff = 500 * time.Millisecond
	defaultMaxBackoff     = 20 * time.Second
	defaultMaxElapsed     = 45 * time.Second
)

// RetryPolicy bounds the retries of a failed call.
//
// A call is retried when the answer is 429 (the platform refused it before
// acting, so any request may be repeated; Retry-After is honoured), a 5xx
// other than 501, or a transport error, as long as repeating the request is
// safe: GET, HEAD, PUT and DELETE are idempotent; a port action (disbond)
// is a no-op on the platform when its effect is already in place, so it is
// retried too. Any other POST (a create) is only retried after a 429 or when
// the connection could not be established, because a 5xx or a dropped
// connection leaves unknown whether the object was created; callers stay
// idempotent by looking the object up (by its tags) before creating it
// again.
type RetryPolicy struct {
	// MaxAttempts caps the HTTP requests per call, the first included
	// (default 5; 1 disables retries).
	MaxAttempts int
	// InitialBackoff is the wait before the first retry (default 500ms); it
	// doubles per retry, with jitter, up to MaxBackoff (default 20s).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// MaxElapsed stops retrying once the next attempt would start later
	// than this after the first (default 45s). The call's deadline
	// (Config.Timeout) applies as well.
	MaxElapsed time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = defaultMaxAttempts
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = defaultInitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = defaultMaxBackoff
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = defaultMaxElapsed
	}
	return p
}

// backoff is the wait before retry number n (1-based): exponential, capped,
// with "equal jitter" (half fixed, half random) so that clients throttled
// together do not retry in lockstep.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.MaxBackoff
	if n <= 30 { // beyond that the shift overflows; the cap applies anyway
		d = min(p.InitialBackoff<<(n-1), p.MaxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

// newTransport stacks the retry transport on the metrics transport, so that
// every attempt is measured and every retry counted.
func newTransport(base http.RoundTripper, p RetryPolicy, m *metrics) http.RoundTripper {
	next := base
	if m != nil {
		next = &instrumentedTransport{next: base, metrics: m}
	}
	return &retryTransport{next: next, policy: p, metrics: m}
}

// retryTransport repeats failed requests according to a RetryPolicy.
type retryTransport struct {
	next    http.RoundTripper
	policy  RetryPolicy
	metrics *metrics
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	info := callInfoFrom(ctx)
	start := time.Now()
	attempt := req
	for n := 1; ; n++ {
		info.attempts.Store(int32(n))
		resp, err := t.next.RoundTrip(attempt)
		wait, retry := t.shouldRetry(req, info.op, resp, err, n, start)
		if !retry {
			return resp, err
		}
		if resp != nil {
			// Drain a little so the connection can be reused.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		}
		t.metrics.retried(info.op.name)
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
		if attempt, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

// shouldRetry decides whether attempt n of req, which ended with resp or
// err, is retried, and after how long.
func (t *retryTransport) shouldRetry(req *http.Request, op operation, resp *http.Response, err error, n int, start time.Time) (time.Duration, bool) {
	if n >= t.policy.MaxAttempts || req.Context().Err() != nil || !rewindable(req) {
		return 0, false
	}
	switch {
	case err != nil:
		if !repeatable(req, op) && !isDialError(err) {
			return 0, false
		}
	case resp.StatusCode == http.StatusTooManyRequests:
		// Refused before anything was done: safe for any request.
	case resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented:
		if !repeatable(req, op) {
			return 0, false
		}
	default:
		return 0, false
	}
	wait := t.policy.backoff(n)
	if resp != nil {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			wait = d
		}
	}
	// Give the last answer back rather than wait past the budget or the
	// deadline only to fail with a less telling error.
	if time.Since(start)+wait > t.policy.MaxElapsed {
		return 0, false
	}
	if deadline, ok := req.Context().Deadline(); ok && time.Until(deadline) < wait {
		return 0, false
	}
	return wait, true
}

// repeatable reports whether sending req twice has the effect of sending it
// once.
func repeatable(req *http.Request, op operation) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return op.safeToRepeat
}

// isDialError reports whether the connection could not be established, in
// which case the server never saw the request.
func isDialError(err error) bool {
	opErr, ok := errors.AsType[*net.OpError](err)
	return ok && opErr.Op == "dial"
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return time.Duration(max(secs, 0)) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

func rewindable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewind prepares a fresh copy of req for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
