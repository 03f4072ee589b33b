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
	// Reserved is set for an address its subnet claims for itself (network,
	// broadcast, subnet-router anycast): spec.allocateReservedIPAddresses
	// would hand it out.
	Reserved bool
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
		return Unavailable{Field: FamilyField(spec), Detail: fmt.Sprintf("is %s but the pool hands out %s addresses", family, space.Family())}, true
	}
	own, _ := parseSubnets(spec, 0, false, netip.Prefix{}) // all valid: the spec resolved
	ranges, _ := parseList(specPath.Child("addresses"), spec.Addresses)
	for _, s := range own {
		ranges = append(ranges, s.ranges...)
	}
	for _, entry := range resolved {
		if r, err := cidr.ParseEntry(entry.Address); err == nil && !entry.SubnetOnly {
			ranges = append(ranges, r)
		}
	}
	// An entry's gateway need not be among its addresses: say what it is
	// rather than that it lies outside them.
	for _, s := range own {
		if s.subnet.Gateway == a {
			return Unavailable{Field: s.field("gateway"), Detail: fmt.Sprintf("is the gateway of subnet %s (%s)", s.subnet.Prefix, s.field("gateway"))}, true
		}
	}
	if !anyContains(ranges, a) {
		for _, s := range own {
			if s.subnet.Prefix.Contains(a) {
				return Unavailable{Field: s.field("addresses"), Detail: fmt.Sprintf("lies in %s (%s) but outside its addresses", s.field("cidr"), s.subnet.Prefix)}, true
			}
		}
		path, _ := ownField(spec)
		return Unavailable{Field: path.String(), Detail: "lies outside every address the pool hands out (spec.addresses, spec.subnets and what spec.vrf and spec.networkRef resolved to)"}, true
	}
	excluded, _ := parseList(specPath.Child("excludedAddresses"), spec.ExcludedAddresses)
	for i, r := range excluded {
		if r.Contains(a) {
			path := specPath.Child("excludedAddresses").Index(i).String()
			return Unavailable{Field: path, Detail: fmt.Sprintf("is excluded by %s (%s)", path, message.Quote(spec.ExcludedAddresses[i]))}, true
		}
	}
	if gw, err := netip.ParseAddr(spec.Gateway); err == nil && gw == a {
		return Unavailable{Field: "spec.gateway", Detail: "is the pool's gateway (spec.gateway)"}, true
	}
	for _, entry := range resolved {
		if gw, err := netip.ParseAddr(entry.Gateway); err == nil && gw == a {
			return Unavailable{Field: "status.resolved", Detail: fmt.Sprintf("is the gateway of subnet %s (from %s)", entry.Address, entry.Source)}, true
		}
	}
	if subnet, ok := space.SubnetOf(a); ok {
		p := subnet.Prefix
		// The field that makes the subnet: an entry's cidr, or spec.prefix.
		path := "spec.prefix"
		for _, s := range own {
			if s.subnet.Prefix == p {
				path = s.field("cidr")
			}
		}
		var what string
		switch {
		case a == p.Addr() && a.Is4():
			what = "network address"
		case a == p.Addr():
			what = "subnet-router anycast address"
		case a == netipx.PrefixLastIP(p) && a.Is4():
			what = "broadcast address"
		default:
			return Unavailable{}, false
		}
		return Unavailable{Field: path, Reserved: true,
			Detail: fmt.Sprintf("is the %s of subnet %s (set spec.allocateReservedIPAddresses to hand it out)", what, p)}, true
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
