package cidr

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go4.org/netipx"
)

// ParseEntry parses one pool entry: a CIDR ("10.0.0.0/24", "fd00::/120"), an
// inclusive range "a-b" (both ends of one family, a <= b, whitespace around
// the '-' tolerated), or a single IP address.
//
// Errors quote the entry and say what is wrong with it, because they end up in
// the status of the pool the user wrote. A CIDR with host bits set
// ("10.0.0.5/24") is rejected rather than silently masked: the user may have
// meant the single address or the whole subnet, and guessing wrong would hand
// out addresses they never intended to pool. IPv4-mapped IPv6 addresses and
// IPv6 zones are rejected too (see checkAddr).
func ParseEntry(s string) (netipx.IPRange, error) {
	r, err := parseEntry(strings.TrimSpace(s))
	if err != nil {
		return netipx.IPRange{}, fmt.Errorf("%q: %w", s, err)
	}
	return r, nil
}

// parseEntry tells the three entry forms apart. No IP address contains '-' or
// '/', so the separator alone decides.
func parseEntry(s string) (netipx.IPRange, error) {
	switch {
	case s == "":
		return netipx.IPRange{}, errors.New("empty entry")
	case strings.Contains(s, "-"):
		return parseRange(s)
	case strings.Contains(s, "/"):
		return parsePrefix(s)
	default:
		a, err := parseAddr(s)
		return netipx.IPRangeFrom(a, a), err
	}
}

// errRangeReversed rejects a range whose start is after its end, whether
// parsed by ParseEntry or passed to NewSpace.
var errRangeReversed = errors.New("range start is after its end")

func parseRange(s string) (netipx.IPRange, error) {
	startText, endText, _ := strings.Cut(s, "-")
	start, err := parseAddr(strings.TrimSpace(startText))
	if err != nil {
		return netipx.IPRange{}, fmt.Errorf("range start: %w", err)
	}
	end, err := parseAddr(strings.TrimSpace(endText))
	if err != nil {
		return netipx.IPRange{}, fmt.Errorf("range end: %w", err)
	}
	if startFamily, endFamily := FamilyOf(start), FamilyOf(end); startFamily != endFamily {
		return netipx.IPRange{}, fmt.Errorf("range start is %s but its end is %s", startFamily, endFamily)
	}
	if end.Less(start) {
		return netipx.IPRange{}, errRangeReversed
	}
	return netipx.IPRangeFrom(start, end), nil
}

func parsePrefix(s string) (netipx.IPRange, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netipx.IPRange{}, err
	}
	if err := checkAddr(p.Addr()); err != nil {
		return netipx.IPRange{}, err
	}
	if masked := p.Masked(); p != masked {
		return netipx.IPRange{}, fmt.Errorf("CIDR has host bits set (did you mean %s?)", masked)
	}
	return netipx.RangeOfPrefix(p), nil
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := checkAddr(a); err != nil {
		return netip.Addr{}, err
	}
	return a, nil
}
