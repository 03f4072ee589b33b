package device

import "time"

// User states a node reports about its network configuration (the rendered
// script posts them to the metadata service's user_state_url).
const (
	UserStateRunning   = "running"
	UserStateSucceeded = "succeeded"
	UserStateFailed    = "failed"
)

// Event is a device event as the platform lists it. User-state events are
// the ones with a State: the platform's own events carry none.
type Event struct {
	State   string
	Message string
	At      time.Time
}

// Report is what the node last said about its network configuration.
type Report struct {
	// State is the newest user state, empty when the node said nothing yet.
	State   string
	Message string
	At      time.Time
}

// NodeReport returns the newest user-state event of events, in whatever
// order they come.
func NodeReport(events []Event) Report {
	var r Report
	for _, e := range events {
		if e.State == "" || (!r.At.IsZero() && !e.At.After(r.At)) {
			continue
		}
		r = Report(e)
	}
	return r
}

// PlatformReason is the message of the platform's newest own event (one
// without a user state), e.g. why provisioning failed.
func PlatformReason(events []Event) string {
	var newest Event
	for _, e := range events {
		if e.State == "" && (newest.At.IsZero() || e.At.After(newest.At)) {
			newest = e
		}
	}
	return newest.Message
}
