// Package pacing paces the Metal API calls of the CAPP reconcilers: per
// object, a Gate says whether it may call now (the backoff after a failed
// call, the poll interval of what it waits for), and CreationSlots bounds
// the devices in creation at once.
package pacing

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Gate keeps each object's Metal calls to its pace: after a failed call it
// waits a backoff (first, doubling up to ceiling, reset once a reconcile
// makes its calls without a failure); after a reconcile that read what it
// waits for (a device provisioning, a batch in flight, the node's report),
// the poll interval that reconcile set. A reconcile that an unrelated event
// brings early (a claim's update, the object's own status write) makes no
// call before the wait is over, and the conditions stand.
type Gate struct {
	first, ceiling time.Duration
	now            func() time.Time

	mu sync.Mutex
	// locked holds the objects' waits; it is read and written only
	// through with, which holds mu.
	locked map[types.UID]waits
}

// waits is what holds one object back.
type waits struct {
	// failures counts the failed calls since the last reset; retry is
	// when the backoff after the last one ends.
	failures int
	retry    time.Time
	// poll is when the object's next read is due; pollDeleting says the
	// wait was set by its deletion.
	poll         time.Time
	pollDeleting bool
}

// NewGate returns a gate whose backoff starts at first and doubles up to
// ceiling.
func NewGate(first, ceiling time.Duration) *Gate {
	return &Gate{first: first, ceiling: ceiling, now: time.Now, locked: map[types.UID]waits{}}
}

// with runs fn on obj's waits with the lock held, the one place it is
// taken; fn does nothing but read and write them. An object left with
// nothing to wait for is dropped.
func (g *Gate) with(obj types.UID, fn func(w *waits)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.locked[obj]
	fn(&w)
	if w == (waits{}) {
		delete(g.locked, obj)
		return
	}
	g.locked[obj] = w
}

// Begin starts a reconcile of obj (of its deletion when deleting); End it
// when the reconcile is over.
func (g *Gate) Begin(obj types.UID, deleting bool) *Turn {
	return &Turn{gate: g, obj: obj, deleting: deleting}
}

// Turn is one reconcile of an object at the gate, and what its Metal calls
// did for the backoff.
type Turn struct {
	gate     *Gate
	obj      types.UID
	deleting bool
	// failed: a Metal call failed; heldBack: the reconcile made none
	// because the backoff lasted. The backoff is reset only after a
	// reconcile with neither.
	failed, heldBack bool
}

// Backoff is what is left of the wait after the object's last failed Metal
// call, 0 when it may call again: while it lasts the reconcile makes no
// call, and the condition the failure left stands until the retry.
func (t *Turn) Backoff() time.Duration {
	var wait time.Duration
	t.gate.with(t.obj, func(w *waits) { wait = max(w.retry.Sub(t.gate.now()), 0) })
	if wait > 0 {
		t.heldBack = true
	}
	return wait
}

// RetryAfter records a failed Metal call and returns how long to wait
// before the next: the wait grows until a reconcile makes its calls
// without a failure.
func (t *Turn) RetryAfter() time.Duration {
	t.failed = true
	g := t.gate
	var wait time.Duration
	g.with(t.obj, func(w *waits) {
		// Past 2^20 times first, any ceiling is reached.
		wait = min(g.first<<min(w.failures, 20), g.ceiling)
		w.failures++
		w.retry = g.now().Add(wait)
	})
	return wait
}

// Failed reports whether a Metal call of this reconcile failed.
func (t *Turn) Failed() bool { return t.failed }

// End forgets the object's failures when this reconcile made its Metal
// calls without one and did not hold back. Deferred at the reconcile's
// start, it sees what the whole reconcile did.
func (t *Turn) End() {
	if !t.failed && !t.heldBack {
		t.gate.with(t.obj, func(w *waits) { w.failures, w.retry = 0, time.Time{} })
	}
}

// PollIn makes the object wait d before its next Metal read.
func (t *Turn) PollIn(d time.Duration) {
	t.gate.with(t.obj, func(w *waits) { w.poll, w.pollDeleting = t.gate.now().Add(d), t.deleting })
}

// PollWait is what is left of the object's wait before its next read, 0
// when it may read; a wait set while not deleting never holds up a
// deletion, nor one set by the deletion a reconcile that is not.
func (t *Turn) PollWait() time.Duration {
	var wait time.Duration
	t.gate.with(t.obj, func(w *waits) {
		if w.pollDeleting == t.deleting {
			wait = max(w.poll.Sub(t.gate.now()), 0)
		}
	})
	return wait
}

// Forget drops whatever the object waits for, once it is gone.
func (t *Turn) Forget() {
	t.gate.with(t.obj, func(w *waits) { *w = waits{} })
}
