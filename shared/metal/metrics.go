package metal

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client's Prometheus collectors. They are labelled by
// operation (the API operationId) and status code only: never by URL, object
// ID or anything derived from the credentials.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
}

// newMetrics registers the collectors with reg, or returns nil when reg is
// nil. Collectors already registered by another Client are reused, so every
// client of a process feeds the same series.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	requests, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "metal_api",
		Name:      "requests_total",
		Help:      "HTTP requests sent to the Equinix Metal API, by operation and status code (\"error\" when no answer arrived). Retries count as requests.",
	}, []string{"operation", "code"}))
	if err != nil {
		return nil, err
	}
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "metal_api",
		Name:      "request_duration_seconds",
		Help:      "Time from sending a request to the Equinix Metal API to receiving the response headers, by operation.",
		Buckets:   prometheus.ExponentialBuckets(0.05, 2, 10),
	}, []string{"operation"}))
	if err != nil {
		return nil, err
	}
	retries, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "metal_api",
		Name:      "retries_total",
		Help:      "Requests to the Equinix Metal API repeated after a rate limit, server error or transport error, by operation.",
	}, []string{"operation"}))
	if err != nil {
		return nil, err
	}
	return &metrics{requests: requests, duration: duration, retries: retries}, nil
}

// register registers c with reg, or returns the equal collector registered
// before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// retried counts a retry of op; a nil receiver (metrics disabled) does
// nothing.
func (m *metrics) retried(op string) {
	if m != nil {
		m.retries.WithLabelValues(op).Inc()
	}
}

// instrumentedTransport measures every HTTP attempt.
type instrumentedTransport struct {
	next    http.RoundTripper
	metrics *metrics
}

func (t *instrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := callInfoFrom(req.Context()).op.name
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.metrics.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.metrics.requests.WithLabelValues(op, code).Inc()
	return resp, err
}
