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
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	if !slots.Acquire("a", key("a")) || !slots.Acquire("b", key("b")) {
		t.Fatal("the first two machines got no slot")
	}
	inFlight(2)
	if !slots.Acquire("a", key("a")) {
		t.Error("a machine holding a slot was refused it")
	}
	if slots.Acquire("c", key("c")) {
		t.Error("a third machine got a slot over the limit")
	}
	select {
	case e := <-slots.Wakeups():
		t.Fatalf("woke %s while no slot freed", e.Object.GetName())
	default:
	}
	// A device found provisioning after a restart counts, over the limit.
	slots.Hold(types.UID("d"))
	inFlight(3)
	slots.Release("a")
	select {
	case e := <-slots.Wakeups():
		if e.Object.GetName() != "c" || e.Object.GetNamespace() != "ns" {
			t.Errorf("woke %s/%s, want ns/c", e.Object.GetNamespace(), e.Object.GetName())
		}
	default:
		t.Error("the machine waiting for a slot was not woken when one freed")
	}
	slots.Release("d")
	slots.Release("unknown")
	inFlight(1)
	if !slots.Acquire("c", key("c")) {
		t.Error("a freed slot was not given")
	}
	if NewCreationSlots(0).Acquire("x", key("x")) == false {
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

func TestBackoff(t *testing.T) {
	b := newBackoff()
	if w := b.waiting("m"); w != 0 {
		t.Fatalf("waiting before any failure = %s", w)
	}
	first := b.next("m")
	if w := b.waiting("m"); w <= 0 || w > first {
		t.Errorf("waiting after a failure = %s, want (0, %s]", w, first)
	}
	if second := b.next("m"); second <= first {
		t.Errorf("the second wait %s does not grow from %s", second, first)
	}
	if w := b.waiting("other"); w != 0 {
		t.Errorf("another object waits %s", w)
	}
	b.reset("m")
	if w := b.waiting("m"); w != 0 {
		t.Errorf("waiting after a reset = %s", w)
	}
	if again := b.next("m"); again != first {
		t.Errorf("the wait after a reset = %s, want %s again", again, first)
	}
}
