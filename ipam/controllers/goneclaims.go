package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// goneClaimTTL is how long a claim is remembered gone. An IPAddress's
// release takes two passes of the address reconciler, usually within a
// second; one held longer (a reuse grace period, another controller's
// finalizer) reads its claim live again.
const goneClaimTTL = 10 * time.Minute

// goneClaims are the UIDs of claims known to be deleted: from their
// deletion events and from live reads that found no claim of their name,
// or one with another UID. A UID is never given again, so a claim known
// gone stays gone, and an IPAddress whose owner reference names it is
// left without its claim whatever claim of that name exists now: the
// address reconciler needs no read of the claim on the release's second
// pass, nor on its first once the deletion event came. Only what proves a
// deletion goes in: a cache read that shows another UID may be stale.
type goneClaims struct {
	mu     sync.Mutex
	uids   map[types.UID]time.Time
	pruned time.Time
	now    func() time.Time
}

func newGoneClaims() *goneClaims {
	return &goneClaims{uids: map[types.UID]time.Time{}, now: time.Now}
}

// add remembers that the claim with uid is gone.
func (g *goneClaims) add(uid types.UID) {
	if uid == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.uids[uid] = now
	if now.Sub(g.pruned) < goneClaimTTL/10 {
		return
	}
	g.pruned = now
	for u, at := range g.uids {
		if now.Sub(at) > goneClaimTTL {
			delete(g.uids, u)
		}
	}
}

// has reports whether the claim with uid is known gone.
func (g *goneClaims) has(uid types.UID) bool {
	if uid == "" {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.uids[uid]
	return ok && g.now().Sub(at) <= goneClaimTTL
}

// forget drops uid once its address is released.
func (g *goneClaims) forget(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.uids, uid)
}
