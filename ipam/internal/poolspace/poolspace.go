// Package poolspace turns a pool into the address space it serves.
//
// The space is built from the pool's spec (explicit addresses, prefix,
// gateway, subnets, exclusions) and from what its sources (spec.vrf, spec.networkRef)
// resolved to, as kept in status.resolved. The validating webhook and the
// controllers both call Resolve, so what the webhook admits is exactly what
// the controllers can allocate from, and a pool created while the webhook was
// off is reported with the same messages in its Ready condition.
package poolspace

import (
	"fmt"
	"net/netip"
	"slices"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

var specPath = field.NewPath("spec")

// Space is a pool's address space, and the prefix handed out with addresses
// that lie in no subnet: spec.prefix, applied to a VRF range's addresses
// outside every Metal Gateway subnet.
type Space struct {
	*cidr.Space
	// defaultBits is spec.prefix, -1 when unset.
	defaultBits int
	// Prefixes, in a prefix pool (spec.allocationPrefixLength), are what
	// it hands out; nil in a pool of addresses.
	Prefixes *Prefixes
}

// SubnetOf returns the subnet an address is handed out with: the most
// specific subnet of the spec or a source containing it, or else the
// /spec.prefix around it, without a gateway. ok is false only for an address
// in no subnet of a pool without spec.prefix, which Resolve never admits into
// the space.
func (s *Space) SubnetOf(a netip.Addr) (cidr.Subnet, bool) {
	if subnet, ok := s.Space.SubnetOf(a); ok {
		return subnet, true
	}
	if s.defaultBits < 0 {
		return cidr.Subnet{}, false
	}
	return cidr.Subnet{Prefix: netip.PrefixFrom(a, s.defaultBits).Masked()}, true
}

// Resolve validates spec and returns the address space of spec and resolved
// together (resolved is status.resolved; nil for a pool with only explicit
// addresses). Every problem is reported as a field error naming the field
// and the offending value; the space is nil whenever the list is not empty.
func Resolve(spec *v1alpha1.MetalVRFIPPoolSpec, resolved []v1alpha1.ResolvedAddresses) (*Space, field.ErrorList) {
	return resolve(spec, resolved, true)
}

// Validate checks what can be checked before the pool's sources resolve:
// every spec field, the credentials Secret's namespace, and for a pool with
// only explicit addresses, its whole space. The webhook admits what passes.
func Validate(pool v1alpha1.Pool) field.ErrorList {
	var errs field.ErrorList
	if pool.PoolSpec().VRF != nil {
		if _, err := CredentialsSecret(pool); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, validatePreAllocationNamespaces(pool)...)
	_, specErrs := resolve(pool.PoolSpec(), nil, false)
	return append(errs, specErrs...)
}

// resolve is Resolve; without requireAddresses, a pool whose sources have
// given nothing yet is not an error (and has no space).
func resolve(spec *v1alpha1.MetalVRFIPPoolSpec, resolved []v1alpha1.ResolvedAddresses, requireAddresses bool) (*Space, field.ErrorList) {
	addrPath := specPath.Child("addresses")
	hasSources := spec.VRF != nil || spec.NetworkRef != nil
	if len(spec.Addresses) == 0 && len(spec.Subnets) == 0 && !hasSources {
		return nil, field.ErrorList{field.Required(addrPath, "at least one address source is required (spec.addresses, spec.subnets, spec.vrf or spec.networkRef)")}
	}

	own, errs := parseOwn(spec)
	if len(errs) > 0 {
		return nil, errs
	}
	ranges, subnets := own.ranges, own.subnets
	sourced, sourceSubnets, reserved, errs := fromResolved(resolved, own.subnet.Gateway)
	if len(errs) > 0 {
		return nil, errs
	}
	ranges = append(ranges, sourced...)
	subnets = append(subnets, sourceSubnets...)
	if errs := checkPrefixLength(spec, subnets); len(errs) > 0 {
		return nil, errs
	}
	if len(ranges) == 0 && !requireAddresses {
		return nil, nil
	}
	if len(ranges) == 0 {
		return nil, field.ErrorList{field.Invalid(addrPath, spec.Addresses,
			"no address to hand out yet: spec.vrf and spec.networkRef have not resolved to any (see the SourcesResolved condition)")}
	}

	space, err := cidr.NewSpace(cidr.SpaceConfig{
		Ranges:   ranges,
		Subnets:  subnets,
		Excluded: own.excluded,
		Reserved: reserved,
		Withheld: own.preAllocated,
		// A prefix is a network of its own: the network, broadcast and
		// anycast addresses of the subnet it is carved from are its
		// hosts' business, so they do not keep a prefix out.
		AllocateReserved: spec.AllocateReservedIPAddresses || spec.AllocationPrefixLength != nil,
	})
	ownPath, ownValue := ownField(spec)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(ownPath, ownValue, err.Error())}
	}
	if spec.AllocationPrefixLength != nil {
		return prefixSpace(spec, space)
	}
	if space.Total().Sign() == 0 {
		return nil, field.ErrorList{field.Invalid(ownPath, ownValue,
			"leaves no address to hand out once the gateway, reserved and excluded addresses are taken out")}
	}
	s := &Space{Space: space, defaultBits: -1}
	if spec.Prefix != nil {
		s.defaultBits = int(*spec.Prefix)
	}
	if outside := outsideSubnets(space, subnets); outside.IsValid() && s.defaultBits < 0 {
		return nil, field.ErrorList{field.Required(specPath.Child("prefix"), fmt.Sprintf(
			"required: addresses %s from spec.vrf lie outside every Metal Gateway subnet and need a prefix to be handed out with",
			describe(outside)))}
	}
	// A pool with sources may grow into a pre-allocated address: that is
	// said in its Ready condition (IdlePreAllocations), not refused.
	if !hasSources {
		if errs := checkPreAllocations(spec, resolved, s); len(errs) > 0 {
			return nil, errs
		}
	}
	return s, nil
}

// ownField is the field a space's own addresses are blamed on, with its
// value: spec.addresses, or spec.subnets in a pool without them.
func ownField(spec *v1alpha1.MetalVRFIPPoolSpec) (*field.Path, any) {
	if len(spec.Addresses) == 0 && len(spec.Subnets) > 0 {
		return subnetsPath, spec.Subnets
	}
	return specPath.Child("addresses"), spec.Addresses
}

// ownAddresses are what a pool's spec gives itself, without its sources:
// spec.addresses and spec.subnets (ranges), spec.excludedAddresses, the
// pre-allocated addresses, and the subnets: the one spec.prefix and
// spec.gateway make (subnet, also in subnets when valid) and those of
// spec.subnets.
type ownAddresses struct {
	ranges, excluded []netipx.IPRange
	preAllocated     []netip.Addr
	subnet           cidr.Subnet
	subnets          []cidr.Subnet
}

// parseOwn parses and checks what the pool's spec gives itself.
func parseOwn(spec *v1alpha1.MetalVRFIPPoolSpec) (ownAddresses, field.ErrorList) {
	addrPath := specPath.Child("addresses")
	hasSources := spec.VRF != nil || spec.NetworkRef != nil
	ranges, errs := parseList(addrPath, spec.Addresses)
	excluded, exclErrs := parseList(specPath.Child("excludedAddresses"), spec.ExcludedAddresses)
	errs = append(errs, exclErrs...)
	if len(errs) > 0 {
		return ownAddresses{}, errs
	}
	family, known := specFamily(spec, ranges)
	if len(excluded) > 0 && known && rangeFamily(excluded[0]) != family {
		errs = append(errs, field.Invalid(specPath.Child("excludedAddresses").Index(0), spec.ExcludedAddresses[0],
			fmt.Sprintf("is %s but %s: mixed IP families", rangeFamily(excluded[0]), familySource(spec, family))))
	}
	errs = append(errs, validateDNS(spec, family, known)...)
	preAllocated, preErrs := parsePreAllocations(spec)
	errs = append(errs, preErrs...)
	if _, fromSubnets := firstSubnet(spec); spec.VRF != nil && (len(ranges) > 0 || fromSubnets) && vrfFamily(spec.VRF) != family {
		errs = append(errs, field.Invalid(specPath.Child("vrf", "ipFamily"), string(spec.VRF.IPFamily),
			fmt.Sprintf("but %s: a pool holds one IP family", familySource(spec, family))))
	}

	// spec.subnets' own ranges count here, so an exclusion inside one of
	// them is not idle.
	if !hasSources {
		errs = append(errs, idleExclusions(spec, slices.Concat(ranges, subnetRangesOf(spec)), excluded)...)
	}

	var subnets []cidr.Subnet
	subnet, subnetErrs := specSubnet(spec, ranges, family, known)
	errs = append(errs, subnetErrs...)
	if subnet.Prefix.IsValid() {
		subnets = append(subnets, subnet)
		if len(ranges) > 0 {
			errs = append(errs, checkInsideSubnet(addrPath, spec.Addresses, ranges, subnet.Prefix)...)
		}
	}
	if i, j, ok := cidr.Overlap(ranges); ok {
		errs = append(errs, field.Invalid(addrPath.Index(j), spec.Addresses[j],
			fmt.Sprintf("overlaps spec.addresses[%d] (%q)", i, spec.Addresses[i])))
	}

	own, ownErrs := parseSubnets(spec, family, known, subnet.Prefix)
	errs = append(errs, ownErrs...)
	for _, s := range own {
		ranges = append(ranges, s.ranges...)
		subnets = append(subnets, s.subnet)
	}
	return ownAddresses{ranges: ranges, excluded: excluded, preAllocated: preAllocated, subnet: subnet, subnets: subnets}, errs
}

// IdleExclusions reports the entries of spec.excludedAddresses that hold no
// address of spec.addresses nor of what the sources resolved to: they
// exclude nothing, most likely by a typo.
func IdleExclusions(spec *v1alpha1.MetalVRFIPPoolSpec, resolved []v1alpha1.ResolvedAddresses) field.ErrorList {
	ranges, errs := parseList(specPath.Child("addresses"), spec.Addresses)
	excluded, exclErrs := parseList(specPath.Child("excludedAddresses"), spec.ExcludedAddresses)
	if len(errs) > 0 || len(exclErrs) > 0 {
		return nil
	}
	ranges = append(ranges, subnetRangesOf(spec)...)
	for _, entry := range resolved {
		if r, err := cidr.ParseEntry(entry.Address); err == nil && !entry.SubnetOnly {
			ranges = append(ranges, r)
		}
	}
	if len(ranges) == 0 {
		return nil
	}
	return idleExclusions(spec, ranges, excluded)
}

func idleExclusions(spec *v1alpha1.MetalVRFIPPoolSpec, ranges, excluded []netipx.IPRange) field.ErrorList {
	var errs field.ErrorList
	for i, x := range excluded {
		// One of the other family is reported as mixing families.
		if len(ranges) > 0 && rangeFamily(x) == rangeFamily(ranges[0]) && !slices.ContainsFunc(ranges, x.Overlaps) {
			errs = append(errs, field.Invalid(specPath.Child("excludedAddresses").Index(i), spec.ExcludedAddresses[i],
				"lies outside the pool's addresses: it excludes nothing"))
		}
	}
	return errs
}

// CredentialsSecret returns the Secret holding the Metal credentials of the
// pool's spec.vrf. A MetalVRFIPPool may only read Secrets of its own
// namespace, so that a pool cannot borrow another tenant's credentials; a
// GlobalMetalVRFIPPool has no namespace and must name one.
func CredentialsSecret(pool v1alpha1.Pool) (types.NamespacedName, *field.Error) {
	vrf := pool.PoolSpec().VRF
	path := specPath.Child("vrf", "credentialsRef", "namespace")
	ref := vrf.CredentialsRef
	switch {
	case pool.GetNamespace() == "" && ref.Namespace == "":
		return types.NamespacedName{}, field.Required(path, "required for a GlobalMetalVRFIPPool, which has no namespace of its own")
	case pool.GetNamespace() != "" && ref.Namespace != "" && ref.Namespace != pool.GetNamespace():
		return types.NamespacedName{}, field.Invalid(path, ref.Namespace,
			fmt.Sprintf("a MetalVRFIPPool reads Secrets of its own namespace %q only", pool.GetNamespace()))
	case pool.GetNamespace() != "":
		return types.NamespacedName{Namespace: pool.GetNamespace(), Name: ref.Name}, nil
	}
	return types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, nil
}

// Family returns the pool's IP family as the spec fixes it: the family of
// spec.addresses, else of spec.subnets, else of spec.vrf.ipFamily, else of
// spec.gateway; ok is false when only a PacketCluster network will tell.
func Family(spec *v1alpha1.MetalVRFIPPoolSpec) (cidr.Family, bool) {
	ranges, _ := parseList(specPath.Child("addresses"), spec.Addresses)
	return specFamily(spec, ranges)
}

// FamilyField names the field that fixes the pool's IP family (see Family):
// spec.addresses, spec.subnets[i].cidr, spec.vrf.ipFamily or spec.gateway;
// empty when none does.
func FamilyField(spec *v1alpha1.MetalVRFIPPoolSpec) string {
	ranges, _ := parseList(specPath.Child("addresses"), spec.Addresses)
	i, fromSubnets := firstSubnet(spec)
	switch _, known := specFamily(spec, ranges); {
	case !known:
		return ""
	case len(ranges) > 0:
		return "spec.addresses"
	case fromSubnets:
		return subnetsPath.Index(i).Child("cidr").String()
	case spec.VRF != nil:
		return "spec.vrf.ipFamily"
	}
	return "spec.gateway"
}

func specFamily(spec *v1alpha1.MetalVRFIPPoolSpec, ranges []netipx.IPRange) (cidr.Family, bool) {
	if len(ranges) > 0 {
		return rangeFamily(ranges[0]), true
	}
	if i, ok := firstSubnet(spec); ok {
		return cidr.FamilyOf(netip.MustParsePrefix(spec.Subnets[i].CIDR).Addr()), true
	}
	if spec.VRF != nil {
		return vrfFamily(spec.VRF), true
	}
	if gw, err := netip.ParseAddr(spec.Gateway); err == nil {
		return cidr.FamilyOf(gw), true
	}
	return 0, false
}

func vrfFamily(vrf *v1alpha1.VRFSource) cidr.Family {
	if vrf.IPFamily == v1alpha1.IPv6Family {
		return cidr.IPv6
	}
	return cidr.IPv4
}

// familySource names the field the pool's family comes from, for messages.
func familySource(spec *v1alpha1.MetalVRFIPPoolSpec, family cidr.Family) string {
	i, fromSubnets := firstSubnet(spec)
	switch {
	case len(spec.Addresses) > 0:
		return fmt.Sprintf("spec.addresses are %s", family)
	case fromSubnets:
		return fmt.Sprintf("%s is %s", subnetsPath.Index(i).Child("cidr"), family)
	case spec.VRF != nil:
		return fmt.Sprintf("spec.vrf.ipFamily is %s", family)
	}
	return fmt.Sprintf("spec.gateway is %s", family)
}

// fromResolved turns status.resolved into ranges to hand out, the subnets
// the sources define and the gateways to reserve. A source subnet without a
// gateway of its own (a PacketCluster network CIDR) takes the spec's gateway
// when it lies inside.
func fromResolved(resolved []v1alpha1.ResolvedAddresses, specGateway netip.Addr) ([]netipx.IPRange, []cidr.Subnet, []netip.Addr, field.ErrorList) {
	path := field.NewPath("status", "resolved")
	var (
		ranges   []netipx.IPRange
		subnets  []cidr.Subnet
		reserved []netip.Addr
		errs     field.ErrorList
	)
	for i, entry := range resolved {
		r, err := cidr.ParseEntry(entry.Address)
		if err != nil {
			errs = append(errs, field.Invalid(path.Index(i).Child("address"), entry.Address, err.Error()))
			continue
		}
		if !entry.SubnetOnly {
			ranges = append(ranges, r)
		}
		if entry.Prefix == nil {
			continue
		}
		subnet := cidr.Subnet{Prefix: netip.PrefixFrom(r.From(), int(*entry.Prefix)).Masked()}
		switch gw, err := netip.ParseAddr(entry.Gateway); {
		case entry.Gateway == "":
			if specGateway.IsValid() && subnet.Prefix.Contains(specGateway) {
				subnet.Gateway = specGateway
			}
		case err != nil:
			errs = append(errs, field.Invalid(path.Index(i).Child("gateway"), entry.Gateway, "not a valid IP address"))
			continue
		default:
			subnet.Gateway = gw
			reserved = append(reserved, gw)
		}
		subnets = append(subnets, subnet)
	}
	return ranges, subnets, reserved, errs
}

// outsideSubnets returns the first allocatable addresses that lie in no
// subnet, or an invalid range when every address has a subnet.
func outsideSubnets(space *cidr.Space, subnets []cidr.Subnet) netipx.IPRange {
	var b netipx.IPSetBuilder
	for _, r := range space.Ranges() {
		b.AddRange(r)
	}
	for _, s := range subnets {
		b.RemovePrefix(s.Prefix)
	}
	rest, _ := b.IPSet() // built from valid ranges only
	if ranges := rest.Ranges(); len(ranges) > 0 {
		return ranges[0]
	}
	return netipx.IPRange{}
}

func describe(r netipx.IPRange) string {
	if p, ok := r.Prefix(); ok {
		return p.String()
	}
	return r.From().String() + "-" + r.To().String()
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

// specSubnet derives the pool's own subnet: spec.prefix around
// spec.addresses[0], or around spec.gateway when there are no explicit
// addresses; none without spec.prefix. It checks that the gateway is an
// address of that subnet.
func specSubnet(spec *v1alpha1.MetalVRFIPPoolSpec, ranges []netipx.IPRange, family cidr.Family, known bool) (cidr.Subnet, field.ErrorList) {
	prefixPath := specPath.Child("prefix")
	gwPath := specPath.Child("gateway")
	if spec.Prefix == nil {
		switch {
		case len(ranges) > 0:
			return cidr.Subnet{}, field.ErrorList{field.Required(prefixPath, "required when spec.addresses is set")}
		case spec.Gateway != "":
			return cidr.Subnet{}, field.ErrorList{field.Required(prefixPath, "required when spec.gateway is set")}
		}
		return cidr.Subnet{}, nil
	}
	bits := int(*spec.Prefix)
	maxBits := 128 // a network's CIDRs alone will tell the family
	if known && family == cidr.IPv4 {
		maxBits = 32
	}
	if bits < 0 || bits > maxBits {
		return cidr.Subnet{}, field.ErrorList{field.Invalid(prefixPath, bits,
			fmt.Sprintf("must be between 0 and %d for %s addresses", maxBits, family))}
	}

	var gw netip.Addr
	if spec.Gateway != "" {
		var err error
		gw, err = netip.ParseAddr(spec.Gateway)
		switch {
		case err != nil:
			return cidr.Subnet{}, field.ErrorList{field.Invalid(gwPath, spec.Gateway, "not a valid IP address")}
		case gw.Zone() != "" || gw.Is4In6():
			return cidr.Subnet{}, field.ErrorList{field.Invalid(gwPath, spec.Gateway, "must be a plain IP address, without zone or IPv4-mapped form")}
		case known && cidr.FamilyOf(gw) != family:
			return cidr.Subnet{}, field.ErrorList{field.Invalid(gwPath, spec.Gateway,
				fmt.Sprintf("is %s but %s: mixed IP families", cidr.FamilyOf(gw), familySource(spec, family)))}
		}
	}
	var anchor netip.Addr
	switch {
	case len(ranges) > 0:
		anchor = ranges[0].From()
	case gw.IsValid():
		anchor = gw
	default:
		return cidr.Subnet{}, nil // only spec.prefix: the prefix of addresses outside every source subnet
	}
	prefix := netip.PrefixFrom(anchor, bits).Masked()
	subnet := cidr.Subnet{Prefix: prefix}
	if !gw.IsValid() {
		return subnet, nil
	}
	if !prefix.Contains(gw) {
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
