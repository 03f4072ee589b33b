// Package invariant checks what must hold of a namespace's claims and
// IPAddresses once the IPAM managers have settled, whatever was done to
// them before: killed, frozen, or run side by side. It works on objects read
// from the API server, so it judges the outcome, never the managers' own
// view of it.
package invariant

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
)

// Pool is what the checks know of one pool: the addresses it may hand out,
// worked out by the test from the pool's spec independently of the manager.
// Each pool here has no spec.vrf, so it is an allocation domain of its own.
type Pool struct {
	Kind, Name string
	// Usable are the addresses the pool may hand out.
	Usable *netipx.IPSet
	// Reserved are addresses of the pool's subnet it must never hand out:
	// the gateway, spec.excludedAddresses, network and broadcast.
	Reserved *netipx.IPSet
}

// SubnetPool is a pool whose spec.addresses is the whole of subnet, with
// the gateway and excluded addresses taken out, and the subnet's network and
// broadcast addresses skipped (IPv4).
func SubnetPool(kind, name string, subnet netip.Prefix, gateway netip.Addr, excluded ...netip.Addr) Pool {
	var reserved netipx.IPSetBuilder
	reserved.Add(subnet.Addr())
	reserved.Add(netipx.PrefixLastIP(subnet))
	reserved.Add(gateway)
	for _, a := range excluded {
		reserved.Add(a)
	}
	r, _ := reserved.IPSet()
	var usable netipx.IPSetBuilder
	usable.AddPrefix(subnet)
	usable.RemoveSet(r)
	u, _ := usable.IPSet()
	return Pool{Kind: kind, Name: name, Usable: u, Reserved: r}
}

// size is the number of addresses the pool may hand out.
func (p Pool) size() int {
	n := 0
	for _, r := range p.Usable.Ranges() {
		for a := r.From(); ; a = a.Next() {
			n++
			if a == r.To() {
				break
			}
		}
	}
	return n
}

// Kind names one invariant.
type Kind string

const (
	// Duplicate: two IPAddresses of one pool hold the same address.
	Duplicate Kind = "duplicate address"
	// ReservedAddress: an IPAddress holds the gateway, an excluded, network or
	// broadcast address of its pool.
	ReservedAddress Kind = "reserved address handed out"
	// OutsidePool: an IPAddress holds an address its pool does not have.
	OutsidePool Kind = "address outside its pool"
	// Orphan: an IPAddress whose claim is gone, or was deleted and
	// recreated under the same name (another UID).
	Orphan Kind = "IPAddress without its claim"
	// Dangling: a bound claim whose IPAddress does not exist.
	Dangling Kind = "claim bound to a missing IPAddress"
	// Unbound: claims waiting while their pool has free addresses.
	Unbound Kind = "claims unbound while their pool has free addresses"
	// Stuck: a deleted claim still waiting for its release.
	Stuck Kind = "claim deletion not finished"
)

// Violation is one broken invariant, with the objects that break it.
type Violation struct {
	Kind   Kind
	Detail string
}

func (v Violation) Error() string { return string(v.Kind) + ": " + v.Detail }

// Check returns every violation among claims and addresses (all of one
// namespace) of pools, in a stable order.
func Check(pools []Pool, claims []ipamv1.IPAddressClaim, addresses []ipamv1.IPAddress) []Violation {
	var out []Violation
	claimByName := map[string]*ipamv1.IPAddressClaim{}
	for i := range claims {
		claimByName[claims[i].Name] = &claims[i]
	}
	addressByName := map[string]*ipamv1.IPAddress{}
	for i := range addresses {
		addressByName[addresses[i].Name] = &addresses[i]
	}

	for _, pool := range pools {
		holders := map[netip.Addr][]string{}
		for i := range addresses {
			a := &addresses[i]
			if a.Spec.PoolRef.Kind != pool.Kind || a.Spec.PoolRef.Name != pool.Name {
				continue
			}
			addr, err := netip.ParseAddr(a.Spec.Address)
			switch {
			case err != nil:
				out = append(out, Violation{OutsidePool, fmt.Sprintf("%s %s: %s holds %q, not an address", pool.Kind, pool.Name, a.Name, a.Spec.Address)})
				continue
			case pool.Reserved.Contains(addr):
				out = append(out, Violation{ReservedAddress, fmt.Sprintf("%s %s: %s holds %s", pool.Kind, pool.Name, a.Name, addr)})
			case !pool.Usable.Contains(addr):
				out = append(out, Violation{OutsidePool, fmt.Sprintf("%s %s: %s holds %s", pool.Kind, pool.Name, a.Name, addr)})
			}
			holders[addr] = append(holders[addr], a.Name+" "+describe(a, claimByName))
		}
		for _, addr := range sortedKeys(holders) {
			if names := holders[addr]; len(names) > 1 {
				out = append(out, Violation{Duplicate, fmt.Sprintf("%s %s: %s is held by %d IPAddresses: %s",
					pool.Kind, pool.Name, addr, len(names), strings.Join(names, "; "))})
			}
		}

		var unbound []string
		for i := range claims {
			c := &claims[i]
			if c.Spec.PoolRef.Kind != pool.Kind || c.Spec.PoolRef.Name != pool.Name {
				continue
			}
			switch {
			case !c.DeletionTimestamp.IsZero():
				out = append(out, Violation{Stuck, fmt.Sprintf("%s (uid %s) finalizers %v", c.Name, c.UID, c.Finalizers)})
			case c.Status.AddressRef.Name == "":
				unbound = append(unbound, c.Name)
			case addressByName[c.Status.AddressRef.Name] == nil:
				out = append(out, Violation{Dangling, fmt.Sprintf("%s (uid %s) names IPAddress %s", c.Name, c.UID, c.Status.AddressRef.Name)})
			}
		}
		inUse := 0
		for addr := range holders {
			if pool.Usable.Contains(addr) {
				inUse++
			}
		}
		if free := pool.size() - inUse; len(unbound) > 0 && free > 0 {
			out = append(out, Violation{Unbound, fmt.Sprintf("%s %s has %d free addresses; unbound: %s",
				pool.Kind, pool.Name, free, strings.Join(unbound, ", "))})
		}
	}

	for i := range addresses {
		a := &addresses[i]
		if claimOf(a, claimByName) == nil {
			out = append(out, Violation{Orphan, fmt.Sprintf("%s holds %s of %s %s; %s",
				a.Name, a.Spec.Address, a.Spec.PoolRef.Kind, a.Spec.PoolRef.Name, describe(a, claimByName))})
		}
	}
	return out
}

// claimOf is the claim an IPAddress belongs to: the one its claimRef names,
// if it is the very claim its owner reference points at.
func claimOf(a *ipamv1.IPAddress, claims map[string]*ipamv1.IPAddressClaim) *ipamv1.IPAddressClaim {
	c := claims[a.Spec.ClaimRef.Name]
	if c == nil {
		return nil
	}
	for _, ref := range a.OwnerReferences {
		if ref.Kind == "IPAddressClaim" && ref.UID == c.UID {
			return c
		}
	}
	return nil
}

// describe says which claim an IPAddress names and whether that claim is
// still the one it was made for.
func describe(a *ipamv1.IPAddress, claims map[string]*ipamv1.IPAddressClaim) string {
	var owner string
	for _, ref := range a.OwnerReferences {
		if ref.Kind == "IPAddressClaim" {
			owner = string(ref.UID)
		}
	}
	c := claims[a.Spec.ClaimRef.Name]
	switch {
	case c == nil:
		return fmt.Sprintf("(claim %s, uid %s: gone)", a.Spec.ClaimRef.Name, owner)
	case string(c.UID) != owner:
		return fmt.Sprintf("(claim %s, uid %s: gone, recreated as uid %s)", a.Spec.ClaimRef.Name, owner, c.UID)
	default:
		return fmt.Sprintf("(claim %s, uid %s)", c.Name, c.UID)
	}
}

func sortedKeys(m map[netip.Addr][]string) []netip.Addr {
	keys := make([]netip.Addr, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b netip.Addr) int { return a.Compare(b) })
	return keys
}
