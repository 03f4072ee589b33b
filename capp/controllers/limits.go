package controllers

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
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
	mu           sync.Mutex
	max          int
	perNamespace int
	holders      map[types.UID]holder
	// waiting are the machines refused a slot, woken through wake when one
	// frees rather than at their next poll.
	waiting map[types.UID]types.NamespacedName
	wake    chan event.GenericEvent
	now     func() time.Time
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
		max:          max(limit, 1),
		perNamespace: max(perNamespace, 0),
		holders:      map[types.UID]holder{},
		waiting:      map[types.UID]types.NamespacedName{},
		wake:         make(chan event.GenericEvent, wakeBuffer),
		now:          time.Now,
	}
}

// wakeBuffer bounds the wake-ups not yet taken by the controller; a machine
// whose wake-up does not fit still looks again at its next poll.
const wakeBuffer = 1024

// Acquire takes a slot for the machine, or reports that it already holds
// one; false means the slots are taken or its namespace has its share, and
// the machine is woken (through Wakeups) when one frees.
func (c *CreationSlots) Acquire(machine types.UID, key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.holders[machine]; ok {
		return true
	}
	c.dropStale(machine, key)
	if len(c.holders) >= c.max || c.held(key.Namespace) >= c.share(key.Namespace) {
		c.waiting[machine] = key
		return false
	}
	delete(c.waiting, machine)
	c.holders[machine] = holder{key: key, since: c.now()}
	return true
}

// Hold records a machine whose device is already in creation, over the
// limits if need be: the creation happened, so it counts. created is when
// the platform created the device (zero when unknown): it dates the
// creation from then on, also after a restart.
func (c *CreationSlots) Hold(machine types.UID, key types.NamespacedName, created time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropStale(machine, key)
	delete(c.waiting, machine)
	h, held := c.holders[machine]
	switch {
	case !created.IsZero():
		h.since = created
	case !held:
		h.since = c.now()
	}
	h.key = key
	c.holders[machine] = h
}

// Release frees the machine's slot, if it holds one, and wakes the machines
// waiting for one.
func (c *CreationSlots) Release(machine types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.release(machine)
}

// Forget frees whatever the machine of that name held or waited for: it is
// gone, by its delete path or any other (its finalizer removed by hand, its
// namespace deleted), and its slot must not stay taken.
func (c *CreationSlots) Forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, h := range c.holders {
		if h.key == key {
			c.release(uid)
		}
	}
	for uid, k := range c.waiting {
		if k == key {
			delete(c.waiting, uid)
		}
	}
}

// dropStale forgets a machine of the same name but another UID: a name
// names one object at a time, so that one is gone. Called with mu held.
func (c *CreationSlots) dropStale(machine types.UID, key types.NamespacedName) {
	for uid, h := range c.holders {
		if h.key == key && uid != machine {
			c.release(uid)
		}
	}
	for uid, k := range c.waiting {
		if k == key && uid != machine {
			delete(c.waiting, uid)
		}
	}
}

// release frees a slot and wakes the waiting machines whose namespace may
// take one now. Called with mu held.
func (c *CreationSlots) release(machine types.UID) {
	delete(c.waiting, machine)
	if _, ok := c.holders[machine]; !ok {
		return
	}
	delete(c.holders, machine)
	if len(c.holders) >= c.max {
		return
	}
	// The woken stay waiting, and so count in the shares, until they take
	// a slot or are gone.
	for _, key := range c.waiting {
		if c.held(key.Namespace) >= c.share(key.Namespace) {
			continue
		}
		select {
		case c.wake <- event.GenericEvent{Object: &infrav1.PacketMachine{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
		default:
			return
		}
	}
}

// held is how many slots the namespace holds. Called with mu held.
func (c *CreationSlots) held(namespace string) int {
	n := 0
	for _, h := range c.holders {
		if h.key.Namespace == namespace {
			n++
		}
	}
	return n
}

// share is how many slots the namespace may hold: the limit divided among
// the namespaces holding or waiting for one, itself included, rounded up,
// and at most perNamespace. Called with mu held.
func (c *CreationSlots) share(namespace string) int {
	active := map[string]bool{namespace: true}
	for _, h := range c.holders {
		active[h.key.Namespace] = true
	}
	for _, k := range c.waiting {
		active[k.Namespace] = true
	}
	s := (c.max + len(active) - 1) / len(active)
	if c.perNamespace > 0 {
		s = min(s, c.perNamespace)
	}
	return max(s, 1)
}

// Wakeups is where the machines waiting for a slot are woken: a source for
// the controller.
func (c *CreationSlots) Wakeups() <-chan event.GenericEvent { return c.wake }

// Waiting says, for the condition of a machine of namespace refused a slot,
// what it waits for.
func (c *CreationSlots) Waiting(namespace string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("waiting to create the device: %d of %d device creations are in flight (--max-device-creations), %d of them in namespace %s, whose share is %d (the namespaces creating devices share the slots; --max-device-creations-per-namespace)",
		len(c.holders), c.max, c.held(namespace), namespace, c.share(namespace))
}

// Describe and Collect make the slots a Prometheus collector.
func (c *CreationSlots) Describe(ch chan<- *prometheus.Desc) {
	ch <- creationsInFlightDesc
	ch <- oldestCreationDesc
}

func (c *CreationSlots) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	inFlight := len(c.holders)
	var oldest time.Time
	for _, h := range c.holders {
		if oldest.IsZero() || h.since.Before(oldest) {
			oldest = h.since
		}
	}
	c.mu.Unlock()
	age := 0.0
	if inFlight > 0 {
		age = max(c.now().Sub(oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(creationsInFlightDesc, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(oldestCreationDesc, prometheus.GaugeValue, age)
}

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

// backoff spaces the retries of an object's failed Metal calls: minPoll,
// doubling up to retryMax, reset once a call succeeds. A reconcile that an
// unrelated event brings early (a claim's update, the object's own status
// write) makes no Metal call before the wait is over: waiting tells how much
// of it is left.
type backoff struct {
	limiter workqueue.TypedRateLimiter[types.UID]

	mu    sync.Mutex
	until map[types.UID]time.Time
}

func newBackoff() *backoff {
	return &backoff{
		limiter: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](minPoll, retryMax),
		until:   map[types.UID]time.Time{},
	}
}

// next records a failure and returns how long to wait before the next try.
func (b *backoff) next(obj types.UID) time.Duration {
	d := b.limiter.When(obj)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.until[obj] = time.Now().Add(d)
	return d
}

// reset forgets the failures after a success.
func (b *backoff) reset(obj types.UID) {
	b.limiter.Forget(obj)
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.until, obj)
}

// waiting is what is left of the wait after the last failure, 0 when the
// object may call the Metal API again.
func (b *backoff) waiting(obj types.UID) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(time.Until(b.until[obj]), 0)
}

// gate reports how much is left of the wait after the object's last failed
// Metal call: while it lasts a phase makes no call, and the condition the
// failure left stands until the retry. retry records that the reconcile
// held back.
func (b *backoff) gate(obj types.UID, retry *retryState) (time.Duration, bool) {
	wait := b.waiting(obj)
	if wait > 0 {
		retry.backingOff = true
	}
	return wait, wait > 0
}

// failed records a failed Metal call of the object and returns how long to
// wait before the next: the wait grows until a reconcile makes its calls
// without a failure.
func (b *backoff) failed(obj types.UID, retry *retryState) time.Duration {
	retry.failed = true
	return b.next(obj)
}

// settle forgets the object's failures once a reconcile made its Metal
// calls without one (and did not hold back). It reads retry when it runs,
// so that a reconcile defers it at its start and it sees what the whole
// reconcile did.
func (b *backoff) settle(obj types.UID, retry *retryState) {
	if !retry.failed && !retry.backingOff {
		b.reset(obj)
	}
}
