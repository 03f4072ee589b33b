package poolspace

import (
	"fmt"
	"net/netip"

	"go4.org/netipx"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Unavailable says why an address is not one a pool hands out.
type Unavailable struct {
	// Field is the field whose value keeps the address out, e.g.
	// spec.excludedAddresses[2].
	Field string
	// Detail completes "<address> ..." for a message, naming that field or
	// the source of the address.
	Detail string
}

// WhyUnavailable says why a is not in the space of spec and resolved (see
// Resolve). It returns false when a is in the space, or when the spec does
// not resolve.
func WhyUnavailable(spec *v1alpha1.MetalVRFIPPoolSpec, resolved []v1alpha1.ResolvedAddresses, a netip.Addr) (Unavailable, bool) {
	space, errs := Resolve(spec, resolved)
	if len(errs) > 0 || space.Contains(a) {
		return Unavailable{}, false
	}
	if family := cidr.FamilyOf(a); family != space.Family() {
		return Unavailable{FamilyField(spec), fmt.Sprintf("is %s but the pool hands out %s addresses", family, space.Family())}, true
	}
	ranges, _ := parseList(specPath.Child("addresses"), spec.Addresses)
	for _, entry := range resolved {
		if r, err := cidr.ParseEntry(entry.Address); err == nil && !entry.SubnetOnly {
			ranges = append(ranges, r)
		}
	}
	if !anyContains(ranges, a) {
		return Unavailable{"spec.addresses", "lies outside every address the pool hands out (spec.addresses and what spec.vrf and spec.networkRef resolved to)"}, true
	}
	excluded, _ := parseList(specPath.Child("excludedAddresses"), spec.ExcludedAddresses)
	for i, r := range excluded {
		if r.Contains(a) {
			path := specPath.Child("excludedAddresses").Index(i).String()
			return Unavailable{path, fmt.Sprintf("is excluded by %s (%s)", path, message.Quote(spec.ExcludedAddresses[i]))}, true
		}
	}
	if gw, err := netip.ParseAddr(spec.Gateway); err == nil && gw == a {
		return Unavailable{"spec.gateway", "is the pool's gateway (spec.gateway)"}, true
	}
	for _, entry := range resolved {
		if gw, err := netip.ParseAddr(entry.Gateway); err == nil && gw == a {
			return Unavailable{"status.resolved", fmt.Sprintf("is the gateway of subnet %s (from %s)", entry.Address, entry.Source)}, true
		}
	}
	if subnet, ok := space.SubnetOf(a); ok {
		p := subnet.Prefix
		switch {
		case a == p.Addr() && a.Is4():
			return Unavailable{"spec.prefix", fmt.Sprintf("is the network address of subnet %s (set spec.allocateReservedIPAddresses to hand it out)", p)}, true
		case a == p.Addr():
			return Unavailable{"spec.prefix", fmt.Sprintf("is the subnet-router anycast address of subnet %s (set spec.allocateReservedIPAddresses to hand it out)", p)}, true
		case a == netipx.PrefixLastIP(p) && a.Is4():
			return Unavailable{"spec.prefix", fmt.Sprintf("is the broadcast address of subnet %s (set spec.allocateReservedIPAddresses to hand it out)", p)}, true
		}
	}
	return Unavailable{}, false
}

func anyContains(ranges []netipx.IPRange, a netip.Addr) bool {
	for _, r := range ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}
