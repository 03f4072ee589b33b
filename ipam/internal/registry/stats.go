package registry

import (
	"context"
	"math/big"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// Stats are a pool's counts as the registry sees them.
type Stats struct {
	Total, Free *big.Int
	// PrefixLength, in a prefix pool, is the length of its prefixes: what
	// Total and Free count. 0 in a pool of addresses.
	PrefixLength     int
	Used, OutOfRange int64
	// Foreign counts the addresses of the space held by other pools of its domain.
	Foreign int64
	// Retired counts the pool's addresses kept out of use by Retire.
	Retired  int64
	SpaceErr error
	// Elsewhere says why the pool hands out nothing in this management
	// cluster (see allocatesHere), or is nil.
	Elsewhere error
}

// Stats returns the pool's counts.
func (r *Registry) Stats(ctx context.Context, pool v1alpha1.Pool) (Stats, error) {
	var s Stats
	err := r.withPool(ctx, pool, func(ps *poolState) error {
		s = ps.stats()
		return nil
	})
	return s, err
}

// stats counts the pool. The caller holds the domain's lock.
func (ps *poolState) stats() Stats {
	s := Stats{Total: new(big.Int), Free: new(big.Int), Used: int64(len(ps.byClaim)), SpaceErr: ps.ready(), Elsewhere: ps.elsewhere}
	for _, h := range ps.domain.held.all() {
		if h.Pool == ps.key && h.Retired {
			s.Retired++
		}
	}
	for _, ip := range ps.byClaim {
		if ps.space == nil || !ps.space.HandsOut(ip) {
			s.OutOfRange++
		}
	}
	if ps.alloc == nil && ps.prefixes == nil {
		return s
	}
	for ip, h := range ps.domain.held.all() {
		if h.Pool != ps.key && ps.space.Contains(ip) {
			s.Foreign++
		}
	}
	if ps.prefixes != nil {
		// Counted in prefixes: a /32 of /64s holds more than an int64
		// of addresses, and the status counts are decimal strings.
		s.Total, s.Free, s.PrefixLength = ps.space.Prefixes.Total(), ps.prefixes.Free(), ps.space.Prefixes.Bits()
		return s
	}
	s.Total = ps.alloc.Space().Total()
	s.Free = ps.alloc.Free()
	return s
}
