package sim

import (
	"encoding/binary"
	"net"
	"net/netip"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/uuid"
)

// Layer 3 addresses of devices are /31 (IPv4) and /127 (IPv6) pairs drawn
// from documentation and benchmarking ranges by device creation order, so they
// are stable and never collide with a VRF of the seed.
var (
	publicIPv4Base  = netip.MustParseAddr("198.18.0.0")
	privateIPv4Base = netip.MustParseAddr("10.254.0.0")
	publicIPv6Base  = netip.MustParseAddr("2001:db8::")
)

// gatewayAddress is the address a Metal Gateway takes in a subnet: the first
// after the network address.
func gatewayAddress(p netip.Prefix) netip.Addr {
	return p.Addr().Next()
}

// netmask renders the mask of p the way the API does (255.255.255.248).
func netmask(p netip.Prefix) string {
	return net.IP(net.CIDRMask(p.Bits(), p.Addr().BitLen())).String()
}

// addrAdd returns a + n.
func addrAdd(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	lo := binary.BigEndian.Uint64(b[8:])
	hi := binary.BigEndian.Uint64(b[:8])
	sum := lo + n
	if sum < lo {
		hi++ // carry
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], sum)
	out := netip.AddrFrom16(b)
	if a.Is4() {
		return out.Unmap()
	}
	return out
}

// apiAddresses are the IP addresses of a Layer 3 device: public IPv4,
// private IPv4 and public IPv6, each a point-to-point subnet whose first
// address is the gateway. A Layer 2 device has none.
func (d *device) apiAddresses() []metalv1.IPAssignment {
	if !d.layer3 {
		return []metalv1.IPAssignment{}
	}
	offset := uint64(d.seq%(1<<16)) * 2
	assignment := func(kind string, base netip.Addr, bits int, public bool) metalv1.IPAssignment {
		network := netip.PrefixFrom(addrAdd(base, offset), bits)
		family := int32(4)
		if base.Is6() {
			family = 6
		}
		id := uuid.NewSHA1(uuid.NameSpaceURL, []byte("metal-sim/devices/"+d.id+"/"+kind)).String()
		return metalv1.IPAssignment{
			Id:            &id,
			Href:          metalv1.PtrString(href("ips", id)),
			Address:       metalv1.PtrString(network.Addr().Next().String()),
			Gateway:       metalv1.PtrString(network.Addr().String()),
			Network:       metalv1.PtrString(network.Addr().String()),
			Cidr:          metalv1.PtrInt32(int32(bits)),
			Netmask:       metalv1.PtrString(netmask(network)),
			AddressFamily: &family,
			Public:        &public,
			Management:    metalv1.PtrBool(true),
			Manageable:    metalv1.PtrBool(true),
			Enabled:       metalv1.PtrBool(true),
			AssignedTo:    ref("devices", d.id),
			CreatedAt:     &d.created,
		}
	}
	return []metalv1.IPAssignment{
		assignment("public-ipv4", publicIPv4Base, 31, true),
		assignment("private-ipv4", privateIPv4Base, 31, false),
		assignment("public-ipv6", publicIPv6Base, 127, true),
	}
}
