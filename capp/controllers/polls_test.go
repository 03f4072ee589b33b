package controllers

import (
	"testing"
	"time"
)

func TestProvisioningPoll(t *testing.T) {
	for _, tt := range []struct {
		name                 string
		age, provisioningFor time.Duration
		percent              float64
		want                 time.Duration
	}{
		{"just created", 0, 0, 0, minPoll},
		{"queued: its age", 10 * time.Second, 0, 0, 10 * time.Second},
		{"queued long: maxPoll", time.Hour, 0, 0, maxPoll},
		{"no percentage: as queued", 40 * time.Second, 20 * time.Second, 0, maxPoll},
		{"just started: no estimate", 20 * time.Second, time.Second, 1, 20 * time.Second},
		{"a quarter done: three times as long again", 2 * time.Minute, time.Minute, 25, 3*time.Minute + time.Second},
		{"nearly done: minPoll", 5 * time.Minute, 5 * time.Minute, 99.9, minPoll},
		{"a percent in a minute: estimatedPollMax", time.Minute, time.Minute, 1, estimatedPollMax},
		{"100 but not active yet: as queued", 10 * time.Minute, 10 * time.Minute, 100, maxPoll},
	} {
		if got := provisioningPoll(tt.age, tt.provisioningFor, tt.percent); got != tt.want {
			t.Errorf("%s: provisioningPoll(%s, %s, %.1f) = %s, want %s", tt.name, tt.age, tt.provisioningFor, tt.percent, got, tt.want)
		}
	}
}

// TestProvisioningReadsAtPlatformTimes follows a device through the
// platform's provisioning times in simulated time, read when
// provisioningPoll says: queued for queue, then provisioning with a
// percentage that grows evenly to 100 at active. The reads must not grow
// with the time, and the read that sees the device active must come
// promptly.
func TestProvisioningReadsAtPlatformTimes(t *testing.T) {
	// latency is the time from the platform's answer to the reconcile's
	// clock reading: the percentage is as of the answer.
	const latency = 50 * time.Millisecond
	// A queue that lasts costs a read per maxPoll: the platform queues a
	// device for seconds when it has the hardware.
	for _, queue := range []time.Duration{time.Second, 20 * time.Second} {
		for _, provision := range []time.Duration{2 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute} {
			if queue >= provision {
				continue
			}
			reads, late := 0, time.Duration(0)
			for at := time.Duration(0); ; {
				reads++
				if at >= provision {
					late = at - provision
					break
				}
				var provisioningFor time.Duration
				var percent float64
				if at >= queue {
					provisioningFor = at - queue + latency
					percent = 100 * float64(at-queue) / float64(provision-queue)
				}
				at += latency + provisioningPoll(at+latency, provisioningFor, percent)
			}
			// The create's answer is the first read; a quick device is
			// seen at minPoll.
			t.Logf("queued %s, provisioned in %s: %d reads, seen %s late", queue, provision, reads, late.Round(time.Millisecond))
			if reads > 7 {
				t.Errorf("queued %s, provisioned in %s: %d reads, want at most 7", queue, provision, reads)
			}
			// A quick device is seen at the first read, minPoll after
			// its creation; a slow one a second and the estimate's excess
			// after it is active.
			if late > max(minPoll-provision, 5*time.Second) {
				t.Errorf("queued %s, provisioned in %s: seen %s late", queue, provision, late)
			}
		}
	}
}

func TestNodeReportPoll(t *testing.T) {
	for _, tt := range []struct{ activeFor, want time.Duration }{
		{0, reportPoll},
		{time.Minute, reportPoll},
		{2 * time.Minute, 30 * time.Second},
		{10 * time.Minute, slowPoll},
	} {
		if got := nodeReportPoll(tt.activeFor); got != tt.want {
			t.Errorf("nodeReportPoll(%s) = %s, want %s", tt.activeFor, got, tt.want)
		}
	}
}
