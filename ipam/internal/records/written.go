package records

import (
	"sync"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// writtenRecords are the records this process created or confirmed last,
// by name: the resourceVersion of its write and the claim it wrote it for.
// A claim's release then deletes its record in one request, on that
// resourceVersion (see Store.freeByName), where a list of the claim's
// records would have the API server filter every record of the namespace.
// Any other change of a record changes its resourceVersion and fails that
// delete; what this process changes otherwise (deleted, retired, rewritten
// for another claim) it drops here. A record another process deletes
// leaves its entry until the name is written again: at most one per
// address ever recorded here, about 100 bytes each.
type writtenRecords struct {
	mu sync.Mutex
	m  map[string]written
}

// written is one write of a record.
type written struct {
	resourceVersion string
	claim           registry.Claim
}

func (w *writtenRecords) set(name, resourceVersion string, claim registry.Claim) {
	if resourceVersion == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]written{}
	}
	w.m[name] = written{resourceVersion: resourceVersion, claim: claim}
}

// get returns the resourceVersion this process wrote the record at, if it
// wrote it for claim.
func (w *writtenRecords) get(name string, claim registry.Claim) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[name]
	return e.resourceVersion, ok && e.claim.Same(claim)
}

func (w *writtenRecords) drop(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, name)
}
