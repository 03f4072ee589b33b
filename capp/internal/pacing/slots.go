package pacing

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// CreationSlots limits the devices the manager has in creation at once: the
// platform accepts only a few creations in flight and answers more with
// 429, so a burst of machines waits here, each saying so, instead of
// hammering the API. A machine holds its slot from its create call until its
// device is active or failed, or the machine is gone (Forget). After a
// restart, machines whose devices are still provisioning take their slots
// back as they are reconciled. A machine refused a slot is woken as soon as
// one frees.
//
// The slots are shared fairly between namespaces, one per team on a shared
// management cluster: a namespace takes a free slot only while it holds
// fewer than its share, the limit divided among the namespaces holding or
// waiting for one (rounded up, and at most perNamespace when set). Alone, a
// namespace gets every slot; a namespace with a hundred machines waiting
// gets no more than its share while another namespace waits, so it delays
// no one else by more than a creation's time.
//
// The slots are a Prometheus collector: the creations in flight and the age
// of the oldest, read at scrape time.
type CreationSlots struct {
	wake chan event.GenericEvent
	now  func() time.Time

	mu sync.Mutex
	// locked is read and written only through with, which holds mu.
	locked slots
}

// slots are the holders and the waiting of CreationSlots, with its limits.
type slots struct {
	max, perNamespace int
	holders           map[types.UID]holder
	// waiting are the machines refused a slot, woken through wake when one
	// frees rather than at their next poll.
	waiting map[types.UID]types.NamespacedName
	// woken are the machines to wake once the lock is released.
	woken []types.NamespacedName
}

// holder is a machine holding a slot and when its creation began.
type holder struct {
	key   types.NamespacedName
	since time.Time
}

// NewCreationSlots returns a limit of limit creations in flight (at least
// 1), and of perNamespace in one namespace (no limit but the fair share
// when 0).
func NewCreationSlots(limit, perNamespace int) *CreationSlots {
	return &CreationSlots{
		wake: make(chan event.GenericEvent, wakeBuffer),
		now:  time.Now,
		locked: slots{
			max: max(limit, 1), perNamespace: max(perNamespace, 0),
			holders: map[types.UID]holder{}, waiting: map[types.UID]types.NamespacedName{},
		},
	}
}

// wakeBuffer bounds the wake-ups not yet taken by the controller; a machine
// whose wake-up does not fit still looks again at its next poll.
const wakeBuffer = 1024

// with runs fn with the lock held, the one place it is taken, then wakes
// the machines fn freed a slot for.
func (c *CreationSlots) with(fn func(s *slots)) {
	c.mu.Lock()
	fn(&c.locked)
	woken := c.locked.woken
	c.locked.woken = nil
	c.mu.Unlock()
	for _, key := range woken {
		select {
		case c.wake <- event.GenericEvent{Object: &infrav1.PacketMachine{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
		default:
			return
		}
	}
}

// Acquire takes a slot for the machine, or reports that it already holds
// one; false means the slots are taken or its namespace has its share, and
// the machine is woken (through Wakeups) when one frees.
func (c *CreationSlots) Acquire(machine types.UID, key types.NamespacedName) (ok bool) {
	now := c.now()
	c.with(func(s *slots) {
		if _, ok = s.holders[machine]; ok {
			return
		}
		s.forget(key, machine)
		if ok = len(s.holders) < s.max && s.held(key.Namespace) < s.share(key.Namespace); !ok {
			s.waiting[machine] = key
			return
		}
		delete(s.waiting, machine)
		s.holders[machine] = holder{key: key, since: now}
	})
	return ok
}

// Hold records a machine whose device is already in creation, over the
// limits if need be: the creation happened, so it counts. created is when
// the platform created the device (zero when unknown): it dates the
// creation from then on, also after a restart.
func (c *CreationSlots) Hold(machine types.UID, key types.NamespacedName, created time.Time) {
	now := c.now()
	c.with(func(s *slots) {
		s.forget(key, machine)
		delete(s.waiting, machine)
		h, held := s.holders[machine]
		switch {
		case !created.IsZero():
			h.since = created
		case !held:
			h.since = now
		}
		h.key = key
		s.holders[machine] = h
	})
}

// Release frees the machine's slot, if it holds one, and wakes the machines
// waiting for one.
func (c *CreationSlots) Release(machine types.UID) {
	c.with(func(s *slots) { s.release(machine) })
}

// Forget frees whatever the machine of that name held or waited for: it is
// gone, by its delete path or any other (its finalizer removed by hand, its
// namespace deleted), and its slot must not stay taken.
func (c *CreationSlots) Forget(key types.NamespacedName) {
	c.with(func(s *slots) { s.forget(key, "") })
}

// forget frees what the machines named key held or waited for, but the one
// of UID keep: a name names one object at a time, so a machine of the same
// name and another UID is gone.
func (s *slots) forget(key types.NamespacedName, keep types.UID) {
	for uid, h := range s.holders {
		if h.key == key && uid != keep {
			s.release(uid)
		}
	}
	for uid, k := range s.waiting {
		if k == key && uid != keep {
			delete(s.waiting, uid)
		}
	}
}

// release frees a slot and wakes the waiting machines whose namespace may
// take one now.
func (s *slots) release(machine types.UID) {
	delete(s.waiting, machine)
	if _, ok := s.holders[machine]; !ok {
		return
	}
	delete(s.holders, machine)
	if len(s.holders) >= s.max {
		return
	}
	// The woken stay waiting, and so count in the shares, until they take
	// a slot or are gone.
	for _, key := range s.waiting {
		if s.held(key.Namespace) < s.share(key.Namespace) {
			s.woken = append(s.woken, key)
		}
	}
}

// held is how many slots the namespace holds.
func (s *slots) held(namespace string) int {
	n := 0
	for _, h := range s.holders {
		if h.key.Namespace == namespace {
			n++
		}
	}
	return n
}

// share is how many slots the namespace may hold: the limit divided among
// the namespaces holding or waiting for one, itself included, rounded up,
// and at most perNamespace.
func (s *slots) share(namespace string) int {
	active := map[string]bool{namespace: true}
	for _, h := range s.holders {
		active[h.key.Namespace] = true
	}
	for _, k := range s.waiting {
		active[k.Namespace] = true
	}
	n := (s.max + len(active) - 1) / len(active)
	if s.perNamespace > 0 {
		n = min(n, s.perNamespace)
	}
	return max(n, 1)
}

// Wakeups is where the machines waiting for a slot are woken: a source for
// the controller.
func (c *CreationSlots) Wakeups() <-chan event.GenericEvent { return c.wake }

// Waiting says, for the condition of a machine of namespace refused a slot,
// what it waits for.
func (c *CreationSlots) Waiting(namespace string) string {
	var inFlight, limit, held, share int
	c.with(func(s *slots) {
		inFlight, limit, held, share = len(s.holders), s.max, s.held(namespace), s.share(namespace)
	})
	return fmt.Sprintf("waiting to create the device: %d of %d device creations are in flight (--max-device-creations), %d of them in namespace %s, whose share is %d (the namespaces creating devices share the slots; --max-device-creations-per-namespace)",
		inFlight, limit, held, namespace, share)
}

var (
	creationsInFlightDesc = prometheus.NewDesc("capp_device_creations_in_flight",
		"Devices the manager has created that are not active or failed yet (at most --max-device-creations, more after a restart).", nil, nil)
	oldestCreationDesc = prometheus.NewDesc("capp_oldest_device_creation_age_seconds",
		"Time since the oldest device in creation was created (0 when none is): a device the platform does not finish shows here.", nil, nil)
)

// Describe and Collect make the slots a Prometheus collector.
func (c *CreationSlots) Describe(ch chan<- *prometheus.Desc) {
	ch <- creationsInFlightDesc
	ch <- oldestCreationDesc
}

func (c *CreationSlots) Collect(ch chan<- prometheus.Metric) {
	var inFlight int
	var oldest time.Time
	c.with(func(s *slots) {
		inFlight = len(s.holders)
		for _, h := range s.holders {
			if oldest.IsZero() || h.since.Before(oldest) {
				oldest = h.since
			}
		}
	})
	age := 0.0
	if inFlight > 0 {
		age = max(c.now().Sub(oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(creationsInFlightDesc, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(oldestCreationDesc, prometheus.GaugeValue, age)
}
