package controllers

import (
	"testing"
	"time"
)

func TestProvisioningPoll(t *testing.T) {
	for _, tt := range []struct{ age, want time.Duration }{
		{0, minPoll},
		{10 * time.Second, minPoll},
		{40 * time.Second, 10 * time.Second},
		{time.Hour, maxPoll},
	} {
		if got := provisioningPoll(tt.age); got != tt.want {
			t.Errorf("provisioningPoll(%s) = %s, want %s", tt.age, got, tt.want)
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
