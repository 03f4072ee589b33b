package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// admitRecord confirms the record of an IPAddress another writer is
// creating, which any replica may write (see Record.ByAdmission), under
// the rule of the marker (see written, d and domain there); one
// overlapping another claim's is kept, pending, for Reap: the IPAddress is
// refused, and the record may be one the claim had. err is then an
// *overlapError.
func (r *Registry) admitRecord(ctx context.Context, d *domain, domain string, ip netip.Addr, holder Holder) (owner Holder, mine bool, err error) {
	return outcome(holder, r.written(ctx, d, domain, Record{Address: ip, Holder: holder, ByAdmission: true}, true))
}

// unreserve deletes the record of ip if holder's claim holds it: a door
// undoing its own write, or the claim's address it no longer holds. It
// calls the store: the caller holds no lock.
func (r *Registry) unreserve(ctx context.Context, domain string, ip netip.Addr, holder Holder) error {
	_, err := r.store.Unreserve(ctx, domain, Record{Address: ip, Holder: holder})
	return err
}

// outcome reads what the store answered to a write of holder's record.
func outcome(holder Holder, err error) (owner Holder, mine bool, _ error) {
	var taken *TakenError
	switch {
	case err == nil:
		return holder, true, nil
	case errors.As(err, &taken):
		return taken.Holder, taken.Holder.Claim.Same(holder.Claim), nil
	}
	return Holder{}, false, err
}

// Same reports whether c and o are one claim: the same UID, in the same
// namespace under the same name. The UID alone is not enough: an
// IPAddress's owner reference, where it is read from, is written by users.
func (c Claim) Same(o Claim) bool { return c.UID == o.UID && c.NamespacedName == o.NamespacedName }

// unavailable says that requested, an address of pool, is held by h,
// naming only what the claim's namespace may see.
func unavailable(pool poolref.Key, requested netip.Addr, h Holder, claim Claim) error {
	return fmt.Errorf("%w: requested address %s is held by %s", ErrRequestedUnavailable, requested, describe(pool, h, claim))
}

// conflict says that ip, which the claim's IPAddress of pool names, is h's.
func conflict(pool poolref.Key, ip netip.Addr, h Holder, claim Claim) error {
	return fmt.Errorf("%w: address %s of claim %s is also held by %s", ErrConflict, ip, claim.Name, describe(pool, h, claim))
}

// describe names a holder of an address of pool as seen from the claim's
// namespace: a claim of the same namespace by name, anything else without
// naming it.
func describe(pool poolref.Key, h Holder, claim Claim) string {
	switch {
	case h.Pool != pool:
		return "another pool of its VRF"
	case h.Retired && h.Claim.Namespace == claim.Namespace:
		return "claim " + h.Claim.String() + ", whose IPAddress was left without it (moved to another management cluster)"
	case h.Retired:
		return "an address moved to another management cluster"
	case h.Claim.Namespace == claim.Namespace:
		return "claim " + h.Claim.String()
	}
	return "a claim in another namespace"
}
