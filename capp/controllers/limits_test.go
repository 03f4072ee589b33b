package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
)

func TestCreationSlots(t *testing.T) {
	slots := NewCreationSlots(2)
	inFlight := func(want int) {
		t.Helper()
		if got, limit := slots.InFlight(); got != want || limit != 2 {
			t.Fatalf("InFlight() = %d of %d, want %d of 2", got, limit, want)
		}
		if got := testutil.ToFloat64(deviceCreationsInFlight); got != float64(want) {
			t.Fatalf("capp_device_creations_in_flight = %v, want %d", got, want)
		}
	}
	if !slots.Acquire("a") || !slots.Acquire("b") {
		t.Fatal("the first two machines got no slot")
	}
	inFlight(2)
	if !slots.Acquire("a") {
		t.Error("a machine holding a slot was refused it")
	}
	if slots.Acquire("c") {
		t.Error("a third machine got a slot over the limit")
	}
	// A device found provisioning after a restart counts, over the limit.
	slots.Hold(types.UID("d"))
	inFlight(3)
	slots.Release("a")
	slots.Release("d")
	slots.Release("unknown")
	inFlight(1)
	if !slots.Acquire("c") {
		t.Error("a freed slot was not given")
	}
	if NewCreationSlots(0).Acquire("x") == false {
		t.Error("a limit below 1 allows no creation at all")
	}
}

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
