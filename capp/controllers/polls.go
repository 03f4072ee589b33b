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
	// estimatedPollMax bounds the wait a provisioning device's progress
	// sets (see provisioningPoll): the platform's slowest provisioning,
	// 15 minutes, is then seen with two such waits.
	estimatedPollMax = 10 * time.Minute
)

// provisioningPoll is how long to wait before reading a device in creation
// again, given its age, how long it has been provisioning (0 while queued
// or when not known) and the provisioning_percentage it reported (0 when
// none). The platform provisions in 5 to 15 minutes, so a poll at a fixed
// pace costs reads in proportion to that time; the device's progress says
// instead when it will be done.
//
// With progress, the wait is the time left at the rate so far, a second
// past it for the clocks' skew, at least minPoll: when the progress grows
// evenly the next read sees the device active, whatever the provisioning
// time, late by that second and by the estimate's own excess (the rate is
// the percentage as of the platform's answer over the time until this
// reconcile, so it errs long, by the read's latency over the time
// provisioning: 1% for 50 ms after minPoll, less after). The estimate is
// not trusted before the device has provisioned for minPoll (a percentage
// of a few hundredths, over a time the latency of one read distorts), and
// never for longer than estimatedPollMax: a device whose progress runs
// behind its real pace, active sooner than it said, is seen at most that
// late.
//
// Without progress (queued, just started, no percentage reported, or no
// provisioning.101 event to date its start), the wait is the device's age,
// between minPoll and maxPoll: the reads double in spacing while the
// device is young, so one that is active in seconds is seen in seconds,
// and a queue that lasts costs a read per maxPoll.
func provisioningPoll(age, provisioningFor time.Duration, percent float64) time.Duration {
	if percent > 0 && percent < 100 && provisioningFor >= minPoll {
		left := time.Duration(float64(provisioningFor) * (100 - percent) / percent)
		return min(max(left+time.Second, minPoll), estimatedPollMax)
	}
	return min(max(age, minPoll), maxPoll)
}

// nodeReportPoll is how long to wait before reading the device's events
// again while its node has not reported: a quarter of the time since the
// device became active, between reportPoll and slowPoll. A node that
// boots quickly is seen quickly; one that is slow, or never reports, costs
// a read a minute instead of one every reportPoll until the timeout.
func nodeReportPoll(activeFor time.Duration) time.Duration {
	return min(max(activeFor/4, reportPoll), slowPoll)
}
