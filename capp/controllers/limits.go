package controllers

import (
	"sync"
	"time"

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
// device is active or failed. After a restart, machines whose devices are
// still provisioning take their slots back as they are reconciled. A machine
// refused a slot is woken as soon as one frees.
type CreationSlots struct {
	mu      sync.Mutex
	max     int
	holders map[types.UID]struct{}
	// waiting are the machines refused a slot, woken through wake when one
	// frees rather than at their next poll.
	waiting map[types.UID]types.NamespacedName
	wake    chan event.GenericEvent
}

// NewCreationSlots returns a limit of limit creations in flight (at least 1).
func NewCreationSlots(limit int) *CreationSlots {
	return &CreationSlots{
		max:     max(limit, 1),
		holders: map[types.UID]struct{}{},
		waiting: map[types.UID]types.NamespacedName{},
		wake:    make(chan event.GenericEvent, wakeBuffer),
	}
}

// wakeBuffer bounds the wake-ups not yet taken by the controller; a machine
// whose wake-up does not fit still looks again at its next poll.
const wakeBuffer = 1024

// Acquire takes a slot for the machine, or reports that it already holds
// one; false means every slot is taken, and the machine is woken (through
// Wakeups) when one frees.
func (c *CreationSlots) Acquire(machine types.UID, key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.holders[machine]; ok {
		return true
	}
	if len(c.holders) >= c.max {
		c.waiting[machine] = key
		return false
	}
	delete(c.waiting, machine)
	c.holders[machine] = struct{}{}
	deviceCreationsInFlight.Set(float64(len(c.holders)))
	return true
}

// Hold records a machine whose device is already in creation, over the
// limit if need be: the creation happened, so it counts.
func (c *CreationSlots) Hold(machine types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holders[machine] = struct{}{}
	deviceCreationsInFlight.Set(float64(len(c.holders)))
}

// Release frees the machine's slot, if it holds one, and wakes the machines
// waiting for one.
func (c *CreationSlots) Release(machine types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, machine)
	if _, ok := c.holders[machine]; !ok {
		return
	}
	delete(c.holders, machine)
	deviceCreationsInFlight.Set(float64(len(c.holders)))
	for uid, key := range c.waiting {
		select {
		case c.wake <- event.GenericEvent{Object: &infrav1.PacketMachine{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
			delete(c.waiting, uid)
		default:
			return
		}
	}
}

// Wakeups is where the machines waiting for a slot are woken: a source for
// the controller.
func (c *CreationSlots) Wakeups() <-chan event.GenericEvent { return c.wake }

// InFlight is how many creations hold a slot, and the limit.
func (c *CreationSlots) InFlight() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.holders), c.max
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
