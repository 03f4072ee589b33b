package sim

import (
	"fmt"
	"net/http"
	"time"
)

// fault makes the next calls of an operation fail.
type fault struct {
	remaining  int
	status     int
	retryAfter time.Duration
}

// answer is what a faulted call gets: the status with an error body, and a
// Retry-After header (whole seconds, rounded up) when one was asked for.
func (f *fault) answer() answer {
	e := errorf(f.status, "simulated fault: %d %s", f.status, http.StatusText(f.status))
	body, _ := marshal(e.body()) // a string slice always marshals
	return answer{status: f.status, body: body, retryAfter: f.retryAfter}
}

// FailNext makes the next n calls of op fail with status, e.g. 429 with a
// retryAfter to send as Retry-After, or 500/503 (retryAfter 0 sends none).
// Faults queued for the same operation apply one after the other. Faulted
// calls are counted by Calls and change nothing.
func (s *Server) FailNext(op Operation, n, status int, retryAfter time.Duration) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = append(s.faults[op], &fault{remaining: n, status: status, retryAfter: retryAfter})
}

// FailBatches makes the next n VLAN assignment batches fail when they
// apply, as the platform fails a batch it accepted: with state failed,
// message among its error_messages, and no change to the port. Unlike
// FailNext, the create call itself succeeds.
func (s *Server) FailBatches(n int, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.batchFaults = append(s.batchFaults, message)
	}
}

// ClearFaults drops every queued fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
	s.batchFaults = nil
}

// SetLatency delays every API answer by d from now on.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// Calls is how many requests for op the simulator received, failed ones
// (unauthenticated, faulted, refused) included.
func (s *Server) Calls(op Operation) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// TotalCalls is how many requests the simulator received, of every
// operation (its controls under /_sim aside).
func (s *Server) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

// Answers is how many answers of the given HTTP status calls of op got, e.g.
// Answers(OpCreateDevice, 429) for the creates refused by
// Options.MaxDevicesInFlight. Unlike Calls it leaves out calls whose client
// went away before the answer.
func (s *Server) Answers(op Operation, status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers[op][status]
}

// ResetCalls sets every call and answer counter back to zero.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
	clear(s.answers)
}

// takeFault consumes one call of the first fault queued for op. The caller
// holds the lock.
func (s *Server) takeFault(op Operation) *fault {
	queue := s.faults[op]
	if len(queue) == 0 {
		return nil
	}
	f := queue[0]
	if f.remaining--; f.remaining == 0 {
		s.faults[op] = queue[1:]
	}
	return f
}

// checkFault validates a fault asked for over HTTP.
func (s *Server) checkFault(op Operation, n, status int) error {
	switch {
	case !s.operations[op]:
		return fmt.Errorf("unknown operation %q", op)
	case n <= 0:
		return fmt.Errorf("count must be positive")
	case status < 400 || status > 599:
		return fmt.Errorf("status must be an HTTP error status (4xx or 5xx)")
	}
	return nil
}
