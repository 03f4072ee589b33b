package poolspace

import (
	"fmt"
	"net/netip"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// ownSubnet is an entry of spec.subnets that parsed: its subnet (prefix and
// gateway) and the ranges it hands out. spec.addresses with spec.prefix and
// spec.gateway is the same thing written the short way; both end up as
// ranges and a cidr.Subnet of one space.
type ownSubnet struct {
	index  int
	subnet cidr.Subnet
	ranges []netipx.IPRange
}

// field names the entry's field child, e.g. spec.subnets[1].gateway.
func (s ownSubnet) field(child string) string {
	return subnetsPath.Index(s.index).Child(child).String()
}

var subnetsPath = specPath.Child("subnets")

// parseSubnets parses and checks spec.subnets: each cidr without host bits,
// of the pool's family (when known), overlapping neither another entry nor
// specSubnet (the subnet of spec.addresses, when valid); each entry's
// addresses and gateway inside its cidr. It returns the entries whose cidr
// and addresses passed, which is all of them when there is no error.
func parseSubnets(spec *v1alpha1.MetalVRFIPPoolSpec, family cidr.Family, known bool, specSubnet netip.Prefix) ([]ownSubnet, field.ErrorList) {
	var (
		errs   field.ErrorList
		parsed []ownSubnet
		// earlier are the cidrs checked so far, by index (invalid when one did not parse).
		earlier = make([]netip.Prefix, len(spec.Subnets))
	)
	for i, entry := range spec.Subnets {
		path := subnetsPath.Index(i)
		prefix, err := parseSubnetCIDR(path.Child("cidr"), entry.CIDR)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkSubnetPlace(spec, path.Child("cidr"), entry.CIDR, prefix, family, known, specSubnet, earlier); err != nil {
			errs = append(errs, err)
			continue
		}
		earlier[i] = prefix

		own := ownSubnet{index: i, subnet: cidr.Subnet{Prefix: prefix}}
		if entry.Gateway != "" {
			gw, err := parseGateway(path.Child("gateway"), entry.Gateway, path.Child("cidr"), prefix)
			if err != nil {
				errs = append(errs, err)
			}
			own.subnet.Gateway = gw
		}
		ranges, rangeErrs := subnetRanges(path.Child("addresses"), entry.Addresses, path.Child("cidr"), prefix)
		errs = append(errs, rangeErrs...)
		if len(rangeErrs) == 0 {
			own.ranges = ranges
			parsed = append(parsed, own)
		}
	}
	return parsed, errs
}

// parseSubnetCIDR parses an entry's cidr: a subnet in CIDR notation without
// host bits, whose length every address of it is handed out with.
func parseSubnetCIDR(path *field.Path, value string) (netip.Prefix, *field.Error) {
	prefix, err := netip.ParsePrefix(value)
	switch {
	case err != nil:
		return netip.Prefix{}, field.Invalid(path, value, "not a subnet in CIDR notation, e.g. 10.60.1.0/24")
	case prefix.Addr().Is4In6():
		return netip.Prefix{}, field.Invalid(path, value, "must be a plain subnet, without IPv4-mapped form")
	case prefix != prefix.Masked():
		return netip.Prefix{}, field.Invalid(path, value, fmt.Sprintf("has host bits set: the subnet is %s", prefix.Masked()))
	}
	return prefix, nil
}

// checkSubnetPlace checks a cidr against the rest of the pool: its family,
// and no overlap with the subnet of spec.addresses or an earlier entry. An
// address in two subnets would have no one prefix and gateway to go with.
func checkSubnetPlace(spec *v1alpha1.MetalVRFIPPoolSpec, path *field.Path, value string, prefix netip.Prefix,
	family cidr.Family, known bool, specSubnet netip.Prefix, earlier []netip.Prefix) *field.Error {
	if f := cidr.FamilyOf(prefix.Addr()); known && f != family {
		return field.Invalid(path, value, fmt.Sprintf("is %s but %s: mixed IP families", f, familySource(spec, family)))
	}
	if specSubnet.IsValid() && specSubnet.Overlaps(prefix) {
		return field.Invalid(path, value, fmt.Sprintf("overlaps the subnet of spec.addresses (%s, spec.prefix around %s)", specSubnet, specSubnetAnchor(spec)))
	}
	for j, other := range earlier {
		if other.IsValid() && other.Overlaps(prefix) {
			return field.Invalid(path, value, fmt.Sprintf("overlaps %s (%q)", subnetsPath.Index(j).Child("cidr"), spec.Subnets[j].CIDR))
		}
	}
	return nil
}

// specSubnetAnchor names what spec.prefix is taken around (see specSubnet).
func specSubnetAnchor(spec *v1alpha1.MetalVRFIPPoolSpec) string {
	if len(spec.Addresses) > 0 {
		return "spec.addresses[0]"
	}
	return "spec.gateway"
}

// parseGateway parses the gateway of the subnet at cidrPath: a plain
// address inside it.
func parseGateway(path *field.Path, value string, cidrPath *field.Path, subnet netip.Prefix) (netip.Addr, *field.Error) {
	gw, err := netip.ParseAddr(value)
	switch {
	case err != nil:
		return netip.Addr{}, field.Invalid(path, value, "not a valid IP address")
	case gw.Zone() != "" || gw.Is4In6():
		return netip.Addr{}, field.Invalid(path, value, "must be a plain IP address, without zone or IPv4-mapped form")
	case !subnet.Contains(gw):
		return netip.Addr{}, field.Invalid(path, value, fmt.Sprintf("lies outside %s (%s)%s", cidrPath, subnet, otherFamily(gw, subnet)))
	}
	return gw, nil
}

// subnetRanges parses an entry's addresses, each inside the subnet and not
// overlapping another; none means the whole subnet.
func subnetRanges(path *field.Path, entries []string, cidrPath *field.Path, subnet netip.Prefix) ([]netipx.IPRange, field.ErrorList) {
	if len(entries) == 0 {
		return []netipx.IPRange{netipx.RangeOfPrefix(subnet)}, nil
	}
	ranges, errs := parseList(path, entries)
	if len(errs) > 0 {
		return nil, errs
	}
	for i, r := range ranges {
		if !subnet.Contains(r.From()) || !subnet.Contains(r.To()) {
			errs = append(errs, field.Invalid(path.Index(i), entries[i],
				fmt.Sprintf("lies outside %s (%s)%s", cidrPath, subnet, otherFamily(r.From(), subnet))))
		}
	}
	if i, j, ok := cidr.Overlap(ranges); ok {
		errs = append(errs, field.Invalid(path.Index(j), entries[j], fmt.Sprintf("overlaps %s (%q)", path.Index(i), entries[i])))
	}
	return ranges, errs
}

// otherFamily completes "lies outside <subnet>" when the address is not even
// of the subnet's family.
func otherFamily(a netip.Addr, subnet netip.Prefix) string {
	if f, want := cidr.FamilyOf(a), cidr.FamilyOf(subnet.Addr()); f != want {
		return fmt.Sprintf(": it is %s, the subnet %s", f, want)
	}
	return ""
}

// firstSubnet returns the index of the first entry of spec.subnets whose
// cidr parses, which fixes the pool's family when spec.addresses does not.
func firstSubnet(spec *v1alpha1.MetalVRFIPPoolSpec) (int, bool) {
	for i, entry := range spec.Subnets {
		if _, err := netip.ParsePrefix(entry.CIDR); err == nil {
			return i, true
		}
	}
	return 0, false
}

// subnetRangesOf returns the ranges of the entries of spec.subnets that
// are valid, for callers that look at a spec the webhook may not have seen.
func subnetRangesOf(spec *v1alpha1.MetalVRFIPPoolSpec) []netipx.IPRange {
	own, _ := parseSubnets(spec, 0, false, netip.Prefix{})
	var ranges []netipx.IPRange
	for _, s := range own {
		ranges = append(ranges, s.ranges...)
	}
	return ranges
}
