package cidr

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"go4.org/netipx"
)

// Subnet is a routed subnet that addresses of a pool sit in: its prefix and
// its gateway (the zero netip.Addr when the subnet has no gateway).
type Subnet struct {
	Prefix  netip.Prefix
	Gateway netip.Addr
}

// unusable returns the addresses of the subnet that are never handed out.
//
// The gateway always is: handing it to a machine would black-hole the subnet.
// Unless allocateReserved is set, so are the addresses the subnet itself
// claims: for IPv4 the network and broadcast addresses, for IPv6 the
// subnet-router anycast address (the first one, RFC 4291 section 2.6.1).
// Subnets with fewer than two host bits (IPv4 /31 and /32, IPv6 /127 and /128)
// claim none: on such point-to-point and host subnets every address is a host
// address (RFC 3021, RFC 6164). The RFC 2526 anycast addresses at the top of an
// IPv6 /64 are not reserved; exclude them explicitly if the network uses them.
func (s Subnet) unusable(allocateReserved bool) []netip.Addr {
	var addrs []netip.Addr
	if s.Gateway.IsValid() {
		addrs = append(addrs, s.Gateway)
	}
	if allocateReserved || s.Prefix.Addr().BitLen()-s.Prefix.Bits() < 2 {
		return addrs
	}
	addrs = append(addrs, s.Prefix.Addr())
	if s.Prefix.Addr().Is4() {
		addrs = append(addrs, netipx.PrefixLastIP(s.Prefix))
	}
	return addrs
}

// mostSpecificFirst returns the subnets with their prefixes masked, ordered so
// that the first one containing an address is the most specific one
// containing it. Subnets of equal length are disjoint, so their relative order
// only needs to be deterministic. The same prefix listed with two different
// gateways is rejected: there would be no right answer to SubnetOf.
func mostSpecificFirst(subnets []Subnet) ([]Subnet, error) {
	sorted := make([]Subnet, len(subnets))
	for i, s := range subnets {
		sorted[i] = Subnet{Prefix: s.Prefix.Masked(), Gateway: s.Gateway}
	}
	slices.SortFunc(sorted, func(a, b Subnet) int {
		if c := cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()); c != 0 {
			return c
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	})
	for i := 1; i < len(sorted); i++ {
		if prev, s := sorted[i-1], sorted[i]; prev.Prefix == s.Prefix && prev.Gateway != s.Gateway {
			return nil, fmt.Errorf("subnet %s is listed twice with different gateways (%s and %s)", s.Prefix, prev.Gateway, s.Gateway)
		}
	}
	return sorted, nil
}
