package poolspace

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// Owner is who a claim is for, as its annotations say (see
// v1alpha1.MachineAnnotation): what spec.preAllocations match.
type Owner struct {
	Namespace           string
	Machine             string
	HardwareReservation string
}

// OwnerOf reads a claim's owner from its namespace and annotations.
func OwnerOf(namespace string, annotations map[string]string) Owner {
	return Owner{
		Namespace:           namespace,
		Machine:             annotations[v1alpha1.MachineAnnotation],
		HardwareReservation: annotations[v1alpha1.HardwareReservationAnnotation],
	}
}

// PreAllocated is an entry of spec.preAllocations that applies.
type PreAllocated struct {
	// Index of the entry in spec.preAllocations.
	Index   int
	Address netip.Addr
}

// Field names the entry, for messages.
func (p PreAllocated) Field() string {
	return specPath.Child("preAllocations").Index(p.Index).String()
}

// PreAllocationFor returns the address spec.preAllocations pins to the
// owner of a claim in a pool of namespace poolNamespace ("" for a
// GlobalMetalVRFIPPool): the first entry naming its Machine or its hardware
// reservation, in the claim's namespace.
func PreAllocationFor(spec *v1alpha1.MetalVRFIPPoolSpec, poolNamespace string, owner Owner) (PreAllocated, bool) {
	for i, entry := range spec.PreAllocations {
		if ip, err := netip.ParseAddr(entry.Address); pins(entry, poolNamespace, owner) && err == nil {
			return PreAllocated{Index: i, Address: ip}, true
		}
	}
	return PreAllocated{}, false
}

// pins reports whether entry pins its address to owner's claims.
func pins(entry v1alpha1.PreAllocation, poolNamespace string, owner Owner) bool {
	return entryNamespace(entry, poolNamespace) == owner.Namespace &&
		(entry.Machine != "" && entry.Machine == owner.Machine ||
			entry.HardwareReservation != "" && entry.HardwareReservation == owner.HardwareReservation)
}

// PinnedElsewhere says why a claim of owner may not hold a, an address of
// the pool named pool: spec.preAllocations pins it to another owner. Every
// door through which an address comes to a claim (allocation, an IPAddress
// written or adopted) keeps to the pins.
func PinnedElsewhere(spec *v1alpha1.MetalVRFIPPoolSpec, pool string, poolNamespace string, a netip.Addr, owner Owner) error {
	pinned, ok := PreAllocatedTo(spec, a)
	if !ok || pins(spec.PreAllocations[pinned.Index], poolNamespace, owner) {
		return nil
	}
	return fmt.Errorf("address %s is pre-allocated to %s (%s) in %s", a, DescribeOwner(spec, pinned.Index), pinned.Field(), pool)
}

// PreAllocatedTo returns the entry of spec.preAllocations that pins a, if any.
func PreAllocatedTo(spec *v1alpha1.MetalVRFIPPoolSpec, a netip.Addr) (PreAllocated, bool) {
	for i, entry := range spec.PreAllocations {
		if ip, err := netip.ParseAddr(entry.Address); err == nil && ip == a {
			return PreAllocated{Index: i, Address: ip}, true
		}
	}
	return PreAllocated{}, false
}

// DescribeOwner names the owner of entry i for messages.
func DescribeOwner(spec *v1alpha1.MetalVRFIPPoolSpec, i int) string {
	entry := spec.PreAllocations[i]
	if entry.Machine != "" {
		return fmt.Sprintf("Machine %s", entry.Machine)
	}
	return fmt.Sprintf("hardware reservation %s", entry.HardwareReservation)
}

func entryNamespace(entry v1alpha1.PreAllocation, poolNamespace string) string {
	if poolNamespace != "" {
		return poolNamespace
	}
	return entry.Namespace
}

// parsePreAllocations checks the entries on their own: an address each, no
// address and no owner twice. It returns the addresses that parsed.
func parsePreAllocations(spec *v1alpha1.MetalVRFIPPoolSpec) ([]netip.Addr, field.ErrorList) {
	var (
		errs      field.ErrorList
		addresses []netip.Addr
	)
	seenAddress := map[netip.Addr]bool{}
	seenOwner := map[string]bool{}
	for i, entry := range spec.PreAllocations {
		path := specPath.Child("preAllocations").Index(i)
		ip, err := netip.ParseAddr(entry.Address)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Child("address"), entry.Address, "not an IP address"))
		case ip.Zone() != "" || ip.Is4In6():
			errs = append(errs, field.Invalid(path.Child("address"), entry.Address, "must be a plain IP address, without zone or IPv4-mapped form"))
		case seenAddress[ip]:
			errs = append(errs, field.Duplicate(path.Child("address"), entry.Address))
		default:
			seenAddress[ip] = true
			addresses = append(addresses, ip)
		}
		owner, ownerPath := "machine/"+entry.Machine, path.Child("machine")
		value := entry.Machine
		if entry.Machine == "" {
			owner, ownerPath, value = "reservation/"+entry.HardwareReservation, path.Child("hardwareReservation"), entry.HardwareReservation
		}
		owner = entry.Namespace + "/" + owner
		if seenOwner[owner] {
			errs = append(errs, field.Duplicate(ownerPath, value))
		}
		seenOwner[owner] = true
	}
	return addresses, errs
}

// checkPreAllocations reports the pre-allocated addresses the space does
// not hand out, naming the rule that keeps each out (see WhyUnavailable).
func checkPreAllocations(spec *v1alpha1.MetalVRFIPPoolSpec, resolved []v1alpha1.ResolvedAddresses, space *Space) field.ErrorList {
	var errs field.ErrorList
	plain := *spec
	plain.PreAllocations = nil
	for i, entry := range spec.PreAllocations {
		ip, err := netip.ParseAddr(entry.Address)
		if err != nil || space.Contains(ip) {
			continue
		}
		detail := "is not an address the pool hands out"
		if why, ok := WhyUnavailable(&plain, resolved, ip); ok {
			detail = why.Detail
		}
		errs = append(errs, field.Invalid(specPath.Child("preAllocations").Index(i).Child("address"), entry.Address, detail))
	}
	return errs
}

// IdlePreAllocations reports the entries of spec.preAllocations whose
// address is not one the pool hands out now, for a pool with sources: they
// may grow into it, so it is said rather than refused.
func IdlePreAllocations(spec *v1alpha1.MetalVRFIPPoolSpec, resolved []v1alpha1.ResolvedAddresses) field.ErrorList {
	space, errs := Resolve(spec, resolved)
	if len(errs) > 0 {
		return nil
	}
	return checkPreAllocations(spec, resolved, space)
}

// validatePreAllocationNamespaces checks each entry's namespace: required
// in a GlobalMetalVRFIPPool, the pool's own (or empty) in a MetalVRFIPPool.
func validatePreAllocationNamespaces(pool v1alpha1.Pool) field.ErrorList {
	var errs field.ErrorList
	for i, entry := range pool.PoolSpec().PreAllocations {
		path := specPath.Child("preAllocations").Index(i).Child("namespace")
		switch {
		case pool.GetNamespace() == "" && entry.Namespace == "":
			errs = append(errs, field.Required(path, "required for a GlobalMetalVRFIPPool: the namespace of the claims the address is pinned to"))
		case pool.GetNamespace() != "" && entry.Namespace != "" && entry.Namespace != pool.GetNamespace():
			errs = append(errs, field.Invalid(path, entry.Namespace,
				fmt.Sprintf("a MetalVRFIPPool serves claims of its own namespace %q only", pool.GetNamespace())))
		}
	}
	return errs
}
