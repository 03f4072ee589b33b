package controllers

import "time"

// Polling and retry intervals. The Metal API has no watch, so a machine
// looks again after these; none is shorter than minPoll, which bounds the
// reads any one machine makes.
const (
	minPoll       = 5 * time.Second
	maxPoll       = 30 * time.Second
	retryMax      = 5 * time.Minute
	slotPoll      = 10 * time.Second
	reportPoll    = 15 * time.Second
	slowPoll      = time.Minute
	vlanNotFound  = time.Minute
	noCredentials = time.Minute
	// steadyPoll is how often a machine whose device is done (active,
	// ports done, node reported) reads it again, to see it was not
	// deleted outside Cluster API.
	steadyPoll = 5 * time.Minute
)

// provisioningPoll is how long to wait before reading a provisioning device
// again: a quarter of its age, between minPoll and maxPoll, so a young
// device is read often and one that takes its time costs few reads.
func provisioningPoll(age time.Duration) time.Duration {
	return min(max(age/4, minPoll), maxPoll)
}

// nodeReportPoll is how long to wait before reading the device's events
// again while its node has not reported: a quarter of the time since the
// device became active, between reportPoll and slowPoll. A node that
// boots quickly is seen quickly; one that is slow, or never reports, costs
// a read a minute instead of one every reportPoll until the timeout.
func nodeReportPoll(activeFor time.Duration) time.Duration {
	return min(max(activeFor/4, reportPoll), slowPoll)
}
