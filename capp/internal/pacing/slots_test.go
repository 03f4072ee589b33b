package pacing

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

func TestCreationSlots(t *testing.T) {
	slots := NewCreationSlots(2, 0)
	inFlight := func(want int) {
		t.Helper()
		if got := len(slots.locked.holders); got != want {
			t.Fatalf("%d slots held, want %d", got, want)
		}
		if got := slotMetrics(t, slots)["capp_device_creations_in_flight"]; got != float64(want) {
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
	slots.Hold(types.UID("d"), key("d"), time.Time{})
	inFlight(3)
	slots.Release("a")
	select {
	case e := <-slots.Wakeups():
		t.Fatalf("woke %s while every slot is still taken", e.Object.GetName())
	default:
	}
	slots.Release("d")
	select {
	case e := <-slots.Wakeups():
		if e.Object.GetName() != "c" || e.Object.GetNamespace() != "ns" {
			t.Errorf("woke %s/%s, want ns/c", e.Object.GetNamespace(), e.Object.GetName())
		}
	default:
		t.Error("the machine waiting for a slot was not woken when one freed")
	}
	slots.Release("unknown")
	inFlight(1)
	if !slots.Acquire("c", key("c")) {
		t.Error("a freed slot was not given")
	}
	if NewCreationSlots(0, 0).Acquire("x", key("x")) == false {
		t.Error("a limit below 1 allows no creation at all")
	}
}

// TestCreationSlotsAreShared is the attack of a namespace that creates
// machine after machine to keep the creation slots from everyone else: once
// another namespace waits, a slot that frees goes to it, not to the next
// machine of the namespace holding more than its share.
func TestCreationSlotsAreShared(t *testing.T) {
	slots := NewCreationSlots(5, 0)
	key := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	for i := range 5 {
		name := fmt.Sprintf("a%d", i)
		if !slots.Acquire(types.UID(name), key("team-a", name)) {
			t.Fatalf("team-a alone was refused slot %d of 5", i+1)
		}
	}
	if slots.Acquire("b0", key("team-b", "b0")) {
		t.Fatal("team-b got a slot over the limit")
	}
	slots.Release("a0")
	if slots.Acquire("a5", key("team-a", "a5")) {
		t.Error("team-a, holding 4 of 5 slots, took the freed one while team-b waits")
	}
	if !slots.Acquire("b0", key("team-b", "b0")) {
		t.Error("team-b was refused the freed slot")
	}
	if msg := slots.Waiting("team-a"); !strings.Contains(msg, "4 of them in namespace team-a, whose share is 3") {
		t.Errorf("Waiting(team-a) = %q", msg)
	}

	capped := NewCreationSlots(5, 2)
	for i, want := range []bool{true, true, false} {
		if got := capped.Acquire(types.UID(fmt.Sprint(i)), key("team-a", fmt.Sprint(i))); got != want {
			t.Errorf("--max-device-creations-per-namespace=2, acquisition %d = %t, want %t", i+1, got, want)
		}
	}
}

// TestCreationSlotsForgetMachinesGone is the attack of a tenant whose
// machines vanish without their delete path (finalizer removed, namespace
// deleted): their slots are freed when the manager sees them gone, or when
// a machine of the same name but another UID takes their place.
func TestCreationSlotsForgetMachinesGone(t *testing.T) {
	slots := NewCreationSlots(2, 0)
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "tenant", Name: name} }
	if !slots.Acquire("x-1", key("x")) || !slots.Acquire("y-1", key("y")) {
		t.Fatal("the first two machines got no slot")
	}
	if slots.Acquire("z-1", key("z")) {
		t.Fatal("a third machine got a slot over the limit")
	}
	slots.Forget(key("x"))
	if !slots.Acquire("z-1", key("z")) {
		t.Error("the slot of a machine gone stayed taken")
	}
	// y is deleted and made again under its name before the manager saw
	// the old one go.
	if !slots.Acquire("y-2", key("y")) {
		t.Error("the slot of a machine replaced under its name stayed taken")
	}
	if n := len(slots.locked.holders); n != 2 {
		t.Errorf("%d slots held, want 2 (z and the new y)", n)
	}
}

// TestCreationSlotsAge follows the age of the oldest creation in flight:
// from the create call, then from the platform's creation time of the
// device once read (also after a restart, when the slot is taken back).
func TestCreationSlotsAge(t *testing.T) {
	start := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	now := start
	slots := NewCreationSlots(2, 0)
	slots.now = func() time.Time { return now }
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	age := func(want time.Duration) {
		t.Helper()
		if got := slotMetrics(t, slots)["capp_oldest_device_creation_age_seconds"]; got != want.Seconds() {
			t.Errorf("capp_oldest_device_creation_age_seconds = %v, want %v", got, want.Seconds())
		}
	}
	age(0)
	slots.Acquire("a", key("a"))
	now = now.Add(90 * time.Second)
	age(90 * time.Second)
	// The platform dates the device a little after the create call.
	slots.Hold("a", key("a"), start.Add(10*time.Second))
	age(80 * time.Second)
	// Found provisioning after a restart: created an hour ago.
	slots.Hold("b", key("b"), now.Add(-time.Hour))
	age(time.Hour)
	slots.Hold("b", key("b"), time.Time{})
	age(time.Hour)
	slots.Release("b")
	age(80 * time.Second)
	slots.Forget(key("a"))
	age(0)
}

// slotMetrics collects the slots' series by name.
func slotMetrics(t *testing.T, slots *CreationSlots) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(slots)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, f := range families {
		values[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return values
}
