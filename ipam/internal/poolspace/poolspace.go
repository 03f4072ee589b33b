// Package poolspace turns a pool's spec into the address space it serves.
//
// The validating webhook and the controllers both call Resolve, so what the
// webhook admits is exactly what the controllers can allocate from, and a pool
// created while the webhook was off is reported with the same messages in its
// Ready condition.
package poolspace

import (
	"fmt"
	"net/netip"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

var specPath = field.NewPath("spec")

// Resolve validates spec and returns its address space. Every problem is
// reported as a field error naming the field and the offending value; the
// space is nil whenever the list is not empty.
func Resolve(spec *v1alpha1.MetalVRFIPPoolSpec) (*cidr.Space, field.ErrorList) {
	addrPath := specPath.Child("addresses")
	if len(spec.Addresses) == 0 {
		return nil, field.ErrorList{field.Required(addrPath, "at least one address source is required")}
	}

	ranges, errs := parseList(addrPath, spec.Addresses)
	excluded, exclErrs := parseList(specPath.Child("excludedAddresses"), spec.ExcludedAddresses)
	errs = append(errs, exclErrs...)
	if len(errs) > 0 {
		return nil, errs
	}
	family := rangeFamily(ranges[0])
	if len(excluded) > 0 && rangeFamily(excluded[0]) != family {
		errs = append(errs, field.Invalid(specPath.Child("excludedAddresses").Index(0), spec.ExcludedAddresses[0],
			fmt.Sprintf("is %s but spec.addresses are %s: mixed IP families", rangeFamily(excluded[0]), family)))
	}

	subnet, subnetErrs := subnetOf(spec, ranges[0], family)
	errs = append(errs, subnetErrs...)
	if subnet.Prefix.IsValid() {
		errs = append(errs, checkInsideSubnet(addrPath, spec.Addresses, ranges, subnet.Prefix)...)
	}
	if i, j, ok := cidr.Overlap(ranges); ok {
		errs = append(errs, field.Invalid(addrPath.Index(j), spec.Addresses[j],
			fmt.Sprintf("overlaps spec.addresses[%d] (%q)", i, spec.Addresses[i])))
	}
	if len(errs) > 0 {
		return nil, errs
	}

	space, err := cidr.NewSpace(cidr.SpaceConfig{
		Ranges:           ranges,
		Subnets:          []cidr.Subnet{subnet},
		Excluded:         excluded,
		AllocateReserved: spec.AllocateReservedIPAddresses,
	})
	if err != nil {
		return nil, field.ErrorList{field.Invalid(addrPath, spec.Addresses, err.Error())}
	}
	if space.Total().Sign() == 0 {
		return nil, field.ErrorList{field.Invalid(addrPath, spec.Addresses,
			"leaves no address to hand out once the gateway, reserved and excluded addresses are taken out")}
	}
	return space, nil
}

// parseList parses pool entries, one field error per bad entry, and rejects
// entries whose family differs from the first one.
func parseList(path *field.Path, entries []string) ([]netipx.IPRange, field.ErrorList) {
	var errs field.ErrorList
	ranges := make([]netipx.IPRange, 0, len(entries))
	first := -1 // index of the first entry that parsed: the family the others must match
	for i, entry := range entries {
		r, err := cidr.ParseEntry(entry)
		if err != nil {
			errs = append(errs, field.Invalid(path.Index(i), entry, "not a valid IP, range, nor CIDR: "+err.Error()))
			continue
		}
		if first >= 0 && rangeFamily(r) != rangeFamily(ranges[0]) {
			errs = append(errs, field.Invalid(path.Index(i), entry,
				fmt.Sprintf("is %s but %s is %s: mixed IP families", rangeFamily(r), path.Index(first), rangeFamily(ranges[0]))))
			continue
		}
		if first < 0 {
			first = i
		}
		ranges = append(ranges, r)
	}
	return ranges, errs
}

// subnetOf derives the pool's subnet from its first address and prefix, and
// checks that the gateway is an address of that subnet.
func subnetOf(spec *v1alpha1.MetalVRFIPPoolSpec, first netipx.IPRange, family cidr.Family) (cidr.Subnet, field.ErrorList) {
	prefixPath := specPath.Child("prefix")
	if spec.Prefix == nil {
		return cidr.Subnet{}, field.ErrorList{field.Required(prefixPath, "required when spec.addresses is set")}
	}
	bits := int(*spec.Prefix)
	if maxBits := first.From().BitLen(); bits < 0 || bits > maxBits {
		return cidr.Subnet{}, field.ErrorList{field.Invalid(prefixPath, bits,
			fmt.Sprintf("must be between 0 and %d for %s addresses", maxBits, family))}
	}
	prefix := netip.PrefixFrom(first.From(), bits).Masked()
	subnet := cidr.Subnet{Prefix: prefix}
	if spec.Gateway == "" {
		return subnet, nil
	}

	gwPath := specPath.Child("gateway")
	gw, err := netip.ParseAddr(spec.Gateway)
	switch {
	case err != nil:
		return subnet, field.ErrorList{field.Invalid(gwPath, spec.Gateway, "not a valid IP address")}
	case gw.Zone() != "" || gw.Is4In6():
		return subnet, field.ErrorList{field.Invalid(gwPath, spec.Gateway, "must be a plain IP address, without zone or IPv4-mapped form")}
	case cidr.FamilyOf(gw) != family:
		return subnet, field.ErrorList{field.Invalid(gwPath, spec.Gateway,
			fmt.Sprintf("is %s but spec.addresses are %s: mixed IP families", cidr.FamilyOf(gw), family))}
	case !prefix.Contains(gw):
		return subnet, field.ErrorList{field.Invalid(gwPath, spec.Gateway,
			fmt.Sprintf("lies outside the pool's subnet %s", prefix))}
	}
	subnet.Gateway = gw
	return subnet, nil
}

// checkInsideSubnet rejects entries reaching outside the pool's subnet: every
// address is handed out with that subnet's prefix and gateway, so an address
// outside it would be unreachable as configured.
func checkInsideSubnet(path *field.Path, entries []string, ranges []netipx.IPRange, subnet netip.Prefix) field.ErrorList {
	var errs field.ErrorList
	for i, r := range ranges {
		if !subnet.Contains(r.From()) || !subnet.Contains(r.To()) {
			errs = append(errs, field.Invalid(path.Index(i), entries[i],
				fmt.Sprintf("lies outside the pool's subnet %s (spec.addresses[0] with spec.prefix)", subnet)))
		}
	}
	return errs
}

func rangeFamily(r netipx.IPRange) cidr.Family { return cidr.FamilyOf(r.From()) }
