package poolspace

import (
	"errors"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

var prefixLengthPath = specPath.Child("allocationPrefixLength")

// checkPrefixLength checks spec.allocationPrefixLength against the pool's
// family and subnets, and the fields a prefix pool has no use for. A
// prefix shorter than a subnet of the pool would reach outside it, and
// one longer than the family's addresses is none.
func checkPrefixLength(spec *v1alpha1.MetalVRFIPPoolSpec, subnets []cidr.Subnet) field.ErrorList {
	if spec.AllocationPrefixLength == nil {
		return nil
	}
	bits := int(*spec.AllocationPrefixLength)
	family, known := Family(spec)
	var errs field.ErrorList
	switch {
	case bits < 1 || bits > 128 || (known && bits > family.Bits()):
		maxBits := 128
		if known {
			maxBits = family.Bits()
		}
		return field.ErrorList{field.Invalid(prefixLengthPath, bits, fmt.Sprintf("must be between 1 and %d for %s prefixes", maxBits, familyName(family, known)))}
	case spec.Prefix != nil && bits < int(*spec.Prefix):
		errs = append(errs, field.Invalid(prefixLengthPath, bits,
			fmt.Sprintf("is shorter than spec.prefix (%d): a prefix would reach outside the pool's subnet", *spec.Prefix)))
	}
	for i, s := range spec.Subnets {
		if p, err := parseSubnetCIDR(subnetsPath.Index(i).Child("cidr"), s.CIDR); err == nil && bits < p.Bits() {
			errs = append(errs, field.Invalid(prefixLengthPath, bits,
				fmt.Sprintf("is shorter than %s (%q): a prefix would reach outside the subnet", subnetsPath.Index(i).Child("cidr"), s.CIDR)))
		}
	}
	if len(errs) == 0 {
		// Those of the sources, which the spec cannot know of.
		for _, s := range subnets {
			if bits < s.Prefix.Bits() {
				errs = append(errs, field.Invalid(prefixLengthPath, bits,
					fmt.Sprintf("is shorter than the subnet %s of the pool: a prefix would reach outside it", s.Prefix)))
				break
			}
		}
	}
	if len(spec.PreAllocations) > 0 {
		errs = append(errs, field.Invalid(specPath.Child("preAllocations"), len(spec.PreAllocations),
			"a prefix pool (spec.allocationPrefixLength) pins no addresses: remove spec.preAllocations"))
	}
	return errs
}

// prefixSpace completes the space of a prefix pool with its prefixes.
func prefixSpace(spec *v1alpha1.MetalVRFIPPoolSpec, space *cidr.Space) (*Space, field.ErrorList) {
	bits := int(*spec.AllocationPrefixLength)
	if bits > space.Family().Bits() {
		return nil, field.ErrorList{field.Invalid(prefixLengthPath, bits,
			fmt.Sprintf("must be between 1 and %d for %s prefixes", space.Family().Bits(), space.Family()))}
	}
	prefixes, err := newPrefixes(space, bits)
	switch {
	case errors.Is(err, errNoPrefix):
		ownPath, ownValue := ownField(spec)
		return nil, field.ErrorList{field.Invalid(ownPath, ownValue, fmt.Sprintf(
			"holds no whole /%d (spec.allocationPrefixLength) once the gateway and excluded addresses are taken out", bits))}
	case err != nil:
		return nil, field.ErrorList{field.InternalError(prefixLengthPath, err)}
	}
	s := &Space{Space: space, defaultBits: -1, Prefixes: prefixes}
	if spec.Prefix != nil {
		s.defaultBits = int(*spec.Prefix)
	}
	return s, nil
}

func familyName(f cidr.Family, known bool) string {
	if !known {
		return "IPv4 or IPv6"
	}
	return f.String()
}

// HandsOut reports whether the pool hands out ip: in a pool of addresses,
// an allocatable address; in a prefix pool, the first address of one of
// its prefixes.
func (s *Space) HandsOut(ip netip.Addr) bool {
	if s.Prefixes == nil {
		return s.Contains(ip)
	}
	return ip.IsValid() && s.Prefixes.Contains(netip.PrefixFrom(ip, s.Prefixes.Bits()))
}

// PrefixLength is the length of the prefixes the pool hands out, 0 for a
// pool of addresses: the spec says it, whether or not the pool resolves.
func PrefixLength(spec *v1alpha1.MetalVRFIPPoolSpec) int {
	if spec.AllocationPrefixLength == nil {
		return 0
	}
	return int(*spec.AllocationPrefixLength)
}
