package cidr

import (
	"fmt"
	"net/netip"
)

// Family is an IP address family. A pool, and therefore a Space, holds
// addresses of exactly one family.
type Family int

// The address families. The zero Family is deliberately not a valid family so
// that a forgotten assignment cannot silently mean IPv4.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String returns "IPv4" or "IPv6".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	default:
		return fmt.Sprintf("Family(%d)", int(f))
	}
}

// Bits is the length of an address of the family: 32 or 128.
func (f Family) Bits() int {
	if f == IPv4 {
		return 32
	}
	return 128
}

// FamilyOf returns the family of a valid address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// checkAddr rejects the addresses that net/netip parses but a pool must not
// contain. Zones only make sense for link-local addresses on one host, and an
// IPv4-mapped IPv6 address would let the same IPv4 address enter a pool twice
// under two spellings, defeating the never-twice guarantee.
func checkAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("invalid (zero) address")
	case a.Zone() != "":
		return fmt.Errorf("address %s has an IPv6 zone; zones are not allowed", a)
	case a.Is4In6():
		return fmt.Errorf("address %s is IPv4-mapped IPv6; write it as the plain IPv4 address %s", a, a.Unmap())
	}
	return nil
}
