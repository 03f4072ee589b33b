package cidr

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"

	"go4.org/netipx"
)

// SpaceConfig describes an address space: what may be handed out, and what
// must not be.
type SpaceConfig struct {
	// Ranges are the addresses that may be handed out. They are unioned, so
	// overlaps and duplicates are harmless here; reject them earlier with
	// Overlap if they indicate a user mistake.
	Ranges []netipx.IPRange
	// Subnets are the subnets the ranges sit in. An address is reported with
	// the most specific (longest prefix) subnet containing it. Prefixes are
	// masked, so 10.0.0.1/24 denotes 10.0.0.0/24. Every gateway is always
	// reserved. Ranges need not lie inside any subnet.
	Subnets []Subnet
	// Excluded addresses are never handed out.
	Excluded []netipx.IPRange
	// Reserved addresses are never handed out (e.g. every Metal Gateway
	// address, including those of other subnets).
	Reserved []netip.Addr
	// Withheld addresses are handed out only when asked for by name
	// (Allocator.Allocate), never by Allocator.Next: addresses set aside
	// for one consumer. Those outside the allocatable set are ignored.
	Withheld []netip.Addr
	// AllocateReserved, when false, keeps the addresses each subnet claims for
	// itself out of the space: the network and broadcast addresses of IPv4
	// subnets and the subnet-router anycast address of IPv6 subnets. IPv4 /31
	// and /32 and IPv6 /127 and /128 subnets claim none (RFC 3021, RFC 6164).
	AllocateReserved bool
}

// Space is a validated, immutable address space: the set of addresses that
// may be handed out, and the subnets they sit in, so that whoever hands out an
// address can also report its prefix length and gateway. It is safe for
// concurrent use.
type Space struct {
	family Family
	// allocatable is ranges minus excluded, reserved and unusable subnet
	// addresses, stored as sorted, merged ranges.
	allocatable *netipx.IPSet
	// withheld are the allocatable addresses of SpaceConfig.Withheld.
	withheld map[netip.Addr]bool
	total    *big.Int
	subnets  []Subnet // see mostSpecificFirst
}

// NewSpace validates cfg and computes its allocatable set. Everything in cfg
// must be of one family, the family of the first range; the error names the
// first value that differs or is invalid, and any gateway outside its subnet.
func NewSpace(cfg SpaceConfig) (*Space, error) {
	family, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	subnets, err := mostSpecificFirst(cfg.Subnets)
	if err != nil {
		return nil, err
	}

	var b netipx.IPSetBuilder
	for _, r := range cfg.Ranges {
		b.AddRange(r)
	}
	for _, r := range cfg.Excluded {
		b.RemoveRange(r)
	}
	for _, a := range cfg.Reserved {
		b.Remove(a)
	}
	for _, s := range subnets {
		for _, a := range s.unusable(cfg.AllocateReserved) {
			b.Remove(a)
		}
	}
	allocatable, err := b.IPSet()
	if err != nil {
		// validate rejects everything IPSetBuilder would complain about.
		return nil, fmt.Errorf("building address space: %w", err)
	}

	total := new(big.Int)
	for _, r := range allocatable.Ranges() {
		total.Add(total, Size(r))
	}
	withheld := map[netip.Addr]bool{}
	for _, a := range cfg.Withheld {
		if allocatable.Contains(a) {
			withheld[a] = true
		}
	}
	return &Space{family: family, allocatable: allocatable, withheld: withheld, total: total, subnets: subnets}, nil
}

// Withheld reports whether a is allocatable but handed out only when asked
// for by name (see SpaceConfig.Withheld).
func (s *Space) Withheld(a netip.Addr) bool { return s.withheld[a] }

// Family returns the address family of every address in the space.
func (s *Space) Family() Family { return s.family }

// Contains reports whether a may be handed out: it is in a range and is not
// excluded or reserved.
func (s *Space) Contains(a netip.Addr) bool { return s.allocatable.Contains(a) }

// Ranges returns the allocatable addresses as sorted, disjoint, non-adjacent
// ranges. The slice is the caller's to modify.
func (s *Space) Ranges() []netipx.IPRange { return s.allocatable.Ranges() }

// Total returns the number of allocatable addresses.
func (s *Space) Total() *big.Int { return new(big.Int).Set(s.total) }

// SubnetOf returns the most specific subnet containing a, whether or not a is
// allocatable (a gateway, say, still belongs to its subnet).
func (s *Space) SubnetOf(a netip.Addr) (Subnet, bool) {
	for _, subnet := range s.subnets {
		if subnet.Prefix.Contains(a) {
			return subnet, true
		}
	}
	return Subnet{}, false
}

// validate checks that every value in cfg is valid and of one family, and
// returns that family.
func (cfg *SpaceConfig) validate() (Family, error) {
	if len(cfg.Ranges) == 0 {
		return 0, errors.New("address space has no ranges")
	}
	var fc familyChecker
	for _, r := range cfg.Ranges {
		if err := fc.checkRange(r); err != nil {
			return 0, fmt.Errorf("range %s: %w", describeRange(r), err)
		}
	}
	for _, r := range cfg.Excluded {
		if err := fc.checkRange(r); err != nil {
			return 0, fmt.Errorf("excluded range %s: %w", describeRange(r), err)
		}
	}
	for _, a := range cfg.Reserved {
		if err := fc.check(a); err != nil {
			return 0, fmt.Errorf("reserved address %s: %w", a, err)
		}
	}
	for _, a := range cfg.Withheld {
		if err := fc.check(a); err != nil {
			return 0, fmt.Errorf("withheld address %s: %w", a, err)
		}
	}
	for _, s := range cfg.Subnets {
		if err := fc.checkSubnet(s); err != nil {
			return 0, fmt.Errorf("subnet %s: %w", s.Prefix, err)
		}
	}
	return fc.family, nil
}

// familyChecker validates addresses one by one, taking the family of the
// first one as the family all others must have.
type familyChecker struct {
	family Family // zero until the first address is checked
}

func (fc *familyChecker) check(a netip.Addr) error {
	if err := checkAddr(a); err != nil {
		return err
	}
	switch f := FamilyOf(a); {
	case fc.family == 0:
		fc.family = f
	case f != fc.family:
		return fmt.Errorf("mixed families: %s address in an %s address space", f, fc.family)
	}
	return nil
}

func (fc *familyChecker) checkRange(r netipx.IPRange) error {
	if err := fc.check(r.From()); err != nil {
		return err
	}
	if err := fc.check(r.To()); err != nil {
		return err
	}
	if r.To().Less(r.From()) {
		return errRangeReversed
	}
	return nil
}

func (fc *familyChecker) checkSubnet(s Subnet) error {
	if !s.Prefix.IsValid() {
		return errors.New("invalid prefix")
	}
	if err := fc.check(s.Prefix.Addr()); err != nil {
		return err
	}
	if !s.Gateway.IsValid() {
		return nil
	}
	if err := fc.check(s.Gateway); err != nil {
		return fmt.Errorf("gateway %s: %w", s.Gateway, err)
	}
	if !s.Prefix.Contains(s.Gateway) {
		return fmt.Errorf("gateway %s is outside the subnet", s.Gateway)
	}
	return nil
}

// describeRange prints a range for an error message. IPRange.String prints
// only "invalid IPRange" for the very ranges an error is about.
func describeRange(r netipx.IPRange) string {
	return fmt.Sprintf("%q", r.From().String()+"-"+r.To().String())
}
