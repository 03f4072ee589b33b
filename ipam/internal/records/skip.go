package records

import (
	"errors"
	"fmt"
	"net/netip"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Skip is an object that seeding cannot use as it is. Seeding goes on
// without it rather than fail: a domain that fails to seed serves no claim
// of any of its pools, and one user's object must not stop the others.
type Skip struct {
	// Object is the IPAddress, or the record's Lease.
	Object client.Object
	// Kind is Object's kind: IPAddress or Lease.
	Kind string
	// Reason is one of the reasons below, fit for an event.
	Reason string
	// Message names the field and its value, and what seeding did instead.
	Message string
}

// Why seeding cannot use an object.
const (
	// InvalidAddressReason: an IPAddress whose spec.address is not an IP
	// address. It holds none, and is passed by.
	InvalidAddressReason = "InvalidAddress"
	// UnidentifiedClaimReason: an IPAddress whose spec.claimRef.name is not
	// an object name, so that no claim can hold its address. The address
	// stays held, for the IPAddress itself.
	UnidentifiedClaimReason = "UnidentifiedClaim"
	// InvalidRecordReason: a record (a Lease labelled with a domain) whose
	// annotations do not read as one. It is passed by.
	InvalidRecordReason = "InvalidRecord"
)

// OnSkip makes the store call fn for each object seeding cannot use, once
// per read of the cluster (see snapshot). Set it before the store is used.
// fn is called while a domain seeds, with its lock held: it must not wait
// (an event recorder and a counter do not).
func (s *Store) OnSkip(fn func(Skip)) { s.skipped = fn }

// usableAddress reports an IPAddress seeding cannot use as it is, and says
// whether it holds an address.
func (s *Store) usableAddress(address *ipamv1.IPAddress) bool {
	if _, err := netip.ParseAddr(address.Spec.Address); err != nil {
		// Passing it by hands no address out twice: it holds none, and
		// its consumer cannot read one from it either. Only a write that
		// bypassed CAPI's validation (an older API version, a restore
		// without webhooks) makes one.
		s.skip(Skip{Object: address, Kind: "IPAddress", Reason: InvalidAddressReason, Message: fmt.Sprintf(
			"spec.address %s is not an IP address: the IPAddress holds no address, and seeding passes it by",
			message.Quote(address.Spec.Address))})
		return false
	}
	if !claimNameValid(types.NamespacedName{Namespace: address.Namespace, Name: address.Spec.ClaimRef.Name}) {
		// Its address is kept, not passed by: a consumer may use it
		// whatever its claimRef says (see ownClaim).
		s.skip(Skip{Object: address, Kind: "IPAddress", Reason: UnidentifiedClaimReason, Message: fmt.Sprintf(
			"spec.claimRef.name %s is not a valid object name, so no claim can hold address %s: it stays held, recorded for the IPAddress itself (claim UID %s), while the IPAddress exists",
			message.Quote(address.Spec.ClaimRef.Name), address.Spec.Address, ownUID(address))})
	}
	return true
}

// usableRecord reports a record seeding cannot read, and says whether it
// can.
func (s *Store) usableRecord(obj *coordinationv1.Lease) bool {
	err := readable(obj)
	if err == nil {
		return true
	}
	// Passing it by hands no address out twice: a record's name is its
	// domain and address, so while it exists the API server refuses the
	// record of its address that handing the address out would create
	// (Confirm then says the address is taken).
	s.skip(Skip{Object: obj, Kind: "Lease", Reason: InvalidRecordReason, Message: fmt.Sprintf(
		"not an allocation record: %v; seeding passes it by, and while it exists no other record can take its name, so its address is not handed out", err)})
	return false
}

// readable says why a record cannot be read, or returns nil.
func readable(obj *coordinationv1.Lease) error {
	if obj.Annotations[v1alpha1.AllocationDomainAnnotation] == "" {
		return errors.New("annotation " + v1alpha1.AllocationDomainAnnotation + " is missing")
	}
	_, err := recordOf(obj)
	return err
}

func (s *Store) skip(skip Skip) {
	if s.skipped != nil {
		s.skipped(skip)
	}
}

// claimNameValid reports whether a claim can have this namespace and name.
// The API server gives no object another, and a request for some (empty,
// or holding a "/") fails before it is sent, whatever is retried.
func claimNameValid(claim types.NamespacedName) bool {
	return len(validation.IsDNS1123Label(claim.Namespace)) == 0 && len(validation.IsDNS1123Subdomain(claim.Name)) == 0
}

// ownClaim holds the address of an IPAddress whose claim cannot be
// identified: named after the IPAddress, with a UID of its own that no
// claim's release frees. As for an IPAddress whose claim is gone
// (AddressClaim), seeding takes such a record for an orphan's (Records)
// and records the address again while the IPAddress exists, so the
// address is freed by the first seeding after the IPAddress is deleted.
func ownClaim(address *ipamv1.IPAddress) registry.Claim {
	return registry.Claim{NamespacedName: client.ObjectKeyFromObject(address), UID: ownUID(address)}
}

// ownUID is the UID that holds an IPAddress's address for no claim.
func ownUID(address *ipamv1.IPAddress) types.UID {
	return types.UID("ipaddress-" + string(address.UID))
}
