package controllers

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// vrfReads keeps each pool's last read of its VRF that succeeded. A pool is
// reconciled whenever its counts change (every second while claims come),
// and reading the VRF each time cost a Secret read and two Metal calls.
// A read is used while it is younger than the resync period and the pool's
// generation and annotations are those it was read for: a change of the
// spec, or touching the pool, reads again. A failed read is never kept, so
// a failure is retried at its own pace.
type vrfReads struct {
	mu     sync.Mutex
	byPool map[types.UID]vrfRead
}

// vrfRead is one pool's read, for the pool as readKey saw it.
type vrfRead struct {
	key    string
	result sourceResult
}

// readKey is what a read holds for: the pool's generation and annotations.
func readKey(pool v1alpha1.Pool) string {
	return fmt.Sprint(pool.GetGeneration(), pool.GetAnnotations()) // fmt sorts map keys
}

// fresh returns the pool's read if it was made for the pool as it is now,
// at most maxAge before now.
func (c *vrfReads) fresh(pool v1alpha1.Pool, now time.Time, maxAge time.Duration) (sourceResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	read, ok := c.byPool[pool.GetUID()]
	if !ok || read.key != readKey(pool) || now.Sub(read.result.readAt) >= maxAge {
		return sourceResult{}, false
	}
	return read.result, true
}

// keep stores a read that succeeded, or drops the pool's read when it failed.
func (c *vrfReads) keep(pool v1alpha1.Pool, result sourceResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if result.failure != nil {
		delete(c.byPool, pool.GetUID())
		return
	}
	if c.byPool == nil {
		c.byPool = map[types.UID]vrfRead{}
	}
	c.byPool[pool.GetUID()] = vrfRead{key: readKey(pool), result: result}
}

// forget drops a deleted pool's read.
func (c *vrfReads) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byPool, uid)
}
