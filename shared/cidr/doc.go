// Package cidr is the address engine of the IPAM provider: it parses pool
// entries, validates and describes the allocatable address space of a pool,
// and hands out addresses from it.
//
// It is deliberately free of Kubernetes types so that the one property the
// provider must never violate — an address is never handed out twice — can be
// tested exhaustively in isolation. Everything is built on net/netip and
// go4.org/netipx and works identically for IPv4 and IPv6: no structure grows
// with the size of a range, only with the number of addresses in use, so an
// IPv6 /64 costs no more than an IPv4 /24.
//
// The flow is:
//
//	r, err := cidr.ParseEntry(entry) // each of pool.Spec.Addresses
//	space, err := cidr.NewSpace(cidr.SpaceConfig{Ranges: []netipx.IPRange{r, ...}, ...})
//	alloc := cidr.NewAllocator(space)
//	outOfRange := alloc.Seed(addressesAlreadyClaimed)
//	addr, err := alloc.Next()
package cidr
