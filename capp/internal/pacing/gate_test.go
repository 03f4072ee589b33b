package pacing

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

const first, ceiling = 5 * time.Second, 5 * time.Minute

// newTestGate returns a gate on a clock the test moves.
func newTestGate() (*Gate, *time.Time) {
	now := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	g := NewGate(first, ceiling)
	g.now = func() time.Time { return now }
	return g, &now
}

// backoff is what is left of obj's backoff, asked by a reconcile that
// ends without a word about it.
func backoff(g *Gate, obj types.UID) time.Duration { return g.Begin(obj, false).Backoff() }

func TestBackoff(t *testing.T) {
	g, _ := newTestGate()
	if w := backoff(g, "m"); w != 0 {
		t.Fatalf("waiting before any failure = %s", w)
	}
	firstWait := g.Begin("m", false).RetryAfter()
	if w := backoff(g, "m"); w <= 0 || w > firstWait {
		t.Errorf("waiting after a failure = %s, want (0, %s]", w, firstWait)
	}
	if second := g.Begin("m", false).RetryAfter(); second <= firstWait {
		t.Errorf("the second wait %s does not grow from %s", second, firstWait)
	}
	if w := backoff(g, "other"); w != 0 {
		t.Errorf("another object waits %s", w)
	}
	g.Begin("m", false).End()
	if w := backoff(g, "m"); w != 0 {
		t.Errorf("waiting after a reset = %s", w)
	}
	if again := g.Begin("m", false).RetryAfter(); again != firstWait {
		t.Errorf("the wait after a reset = %s, want %s again", again, firstWait)
	}
	turn := g.Begin("n", false)
	for range 20 {
		turn.RetryAfter()
	}
	if w := turn.RetryAfter(); w != ceiling {
		t.Errorf("the wait after many failures = %s, want the ceiling %s", w, ceiling)
	}
}

// A reconcile defers End at its start: the backoff a failed call began
// must outlive the reconcile, hold back the next one, and grow until a
// reconcile's calls all succeed.
func TestBackoffSettlesWhatTheReconcileDid(t *testing.T) {
	g, now := newTestGate()
	reconcile := func(fail bool) (held bool) {
		turn := g.Begin("m", false)
		defer turn.End()
		if turn.Backoff() > 0 {
			return true
		}
		if fail {
			turn.RetryAfter()
		}
		return false
	}
	waitOver := func() { *now = now.Add(ceiling) }
	reconcile(true)
	firstWait := backoff(g, "m")
	if firstWait <= 0 {
		t.Fatalf("waiting after a reconcile whose call failed = %s, want the backoff", firstWait)
	}
	if !reconcile(false) || backoff(g, "m") <= 0 {
		t.Fatal("the next reconcile was not held back, or the backoff did not stand")
	}
	waitOver()
	reconcile(true)
	if second := backoff(g, "m"); second <= firstWait {
		t.Errorf("waiting after a second failure = %s, want more than %s", second, firstWait)
	}
	waitOver()
	if reconcile(false) || backoff(g, "m") != 0 {
		t.Fatal("a reconcile whose calls succeeded left a wait")
	}
	reconcile(true)
	if again := backoff(g, "m"); again > first {
		t.Errorf("waiting after a failure that follows a success = %s, want the first wait, %s, again", again, first)
	}
}

// A poll wait holds back the reconciles of the kind that set it (deleting
// or not) until it is over, and nothing once the object is forgotten.
func TestPollWait(t *testing.T) {
	for _, tt := range []struct {
		name               string
		setDeleting, asked bool
		after              time.Duration
		forget             bool
		want               time.Duration
	}{
		{name: "while the wait lasts", after: 10 * time.Second, want: 20 * time.Second},
		{name: "once it is over", after: 40 * time.Second, want: 0},
		{name: "a deletion's wait, deleting", setDeleting: true, asked: true, want: 30 * time.Second},
		{name: "a wait set while not deleting holds up no deletion", asked: true, want: 0},
		{name: "a deletion's wait holds up no other reconcile", setDeleting: true, want: 0},
		{name: "forgotten", forget: true, want: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, now := newTestGate()
			g.Begin("m", tt.setDeleting).PollIn(30 * time.Second)
			*now = now.Add(tt.after)
			if tt.forget {
				g.Begin("m", false).Forget()
			}
			if got := g.Begin("m", tt.asked).PollWait(); got != tt.want {
				t.Errorf("PollWait = %s, want %s", got, tt.want)
			}
			if got := g.Begin("other", tt.asked).PollWait(); got != 0 {
				t.Errorf("another object waits %s", got)
			}
			if got := backoff(g, "m"); got != 0 {
				t.Errorf("a poll wait is a backoff of %s", got)
			}
		})
	}
}
