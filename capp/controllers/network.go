package controllers

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go4.org/netipx"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// resolvedNetworks are a machine's networks with their addresses known.
type resolvedNetworks struct {
	// render is what the node configuration is rendered from.
	render []cloudinit.Network
	// ports and addresses go to the machine's status.
	ports     []infrav1.PortStatus
	addresses []clusterv1.MachineAddress
}

// machineNetworks combines the spec's networks with the addresses bound to
// their claims (by claim name) and checks that the node can use them: each
// address with a prefix, its gateway and route gateways inside its subnet and
// of its family, no address twice on the machine.
func machineNetworks(pm *infrav1.PacketMachine, bound map[string]*ipamv1.IPAddress) (resolvedNetworks, error) {
	var out resolvedNetworks
	var errs []error
	// One sub-interface per port and vxlan holds one address per family:
	// the first network to claim each, by its field path.
	type slot struct {
		port string
		vlan int32
		is4  bool
	}
	taken := map[slot]string{}
	for i, port := range pm.Spec.Ports {
		ps := infrav1.PortStatus{Name: port.Name}
		for j, network := range port.Networks {
			path := fmt.Sprintf("spec.ports[%d].networks[%d]", i, j)
			n, claimName, err := resolveNetwork(pm.Name, i, j, port.Name, network, bound)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				continue
			}
			key := slot{port.Name, network.VXLAN, n.Address.Addr().Is4()}
			if first, dup := taken[key]; dup {
				errs = append(errs, fmt.Errorf("%s: address %s is the second %s address on %s, after the one of %s: a sub-interface holds one address of each IP family",
					path, n.Address, familyName(n.Address.Addr()), n.Interface(port.Name), first))
				continue
			}
			taken[key] = path
			if err := n.Check(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				continue
			}
			out.render = append(out.render, n)
			ns := infrav1.NetworkStatus{
				VXLAN:     network.VXLAN,
				ClaimName: claimName,
				Address:   n.Address.Addr().String(),
				Prefix:    int32(n.Address.Bits()),
			}
			if n.Gateway.IsValid() {
				ns.Gateway = n.Gateway.String()
			}
			ps.Networks = append(ps.Networks, ns)
			switch network.AddressType {
			case infrav1.AddressTypeInternal:
				out.addresses = append(out.addresses, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: ns.Address})
			case infrav1.AddressTypeExternal:
				out.addresses = append(out.addresses, clusterv1.MachineAddress{Type: clusterv1.MachineExternalIP, Address: ns.Address})
			}
		}
		out.ports = append(out.ports, ps)
	}
	if len(errs) == 0 {
		errs = append(errs, cloudinit.Validate(out.render))
	}
	return out, errors.Join(errs...)
}

// resolveNetwork is ports[i].networks[j] with its address: the one bound to
// its claim, or its static one.
func resolveNetwork(machine string, i, j int, port string, network infrav1.Network, bound map[string]*ipamv1.IPAddress) (cloudinit.Network, string, error) {
	n := cloudinit.Network{Port: port, VLAN: int(network.VXLAN), Internal: network.AddressType == infrav1.AddressTypeInternal}
	var (
		address, gateway, source string
		prefix                   *int32
		claimName                string
	)
	if network.AddressFromPool != nil {
		claimName = ClaimName(machine, i, j)
		ip := bound[claimName]
		if ip == nil {
			return n, "", fmt.Errorf("IPAddressClaim %s is not bound", claimName)
		}
		address, prefix, gateway = ip.Spec.Address, ip.Spec.Prefix, ip.Spec.Gateway
		source = "IPAddress " + ip.Name
		if len(network.Nameservers) == 0 {
			servers, err := annotatedNameservers(ip)
			if err != nil {
				return n, "", err
			}
			n.Nameservers = servers
		}
	} else {
		address, gateway, source = network.Address, network.Gateway, "address"
		if p, err := netip.ParsePrefix(address); err == nil {
			address, prefix = p.Addr().String(), ptr.To(int32(p.Bits()))
		}
	}

	for i, server := range network.Nameservers {
		ns, err := netip.ParseAddr(server)
		if err != nil {
			return n, "", fmt.Errorf("nameservers[%d]: %q is not an IP address", i, server)
		}
		n.Nameservers = append(n.Nameservers, ns)
	}
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return n, "", fmt.Errorf("%s: %q is not an IP address", source, address)
	}
	bits, err := prefixLength(addr, prefix, network.Netmask)
	if err != nil {
		return n, "", fmt.Errorf("%s %s: %w", source, addr, err)
	}
	n.Address = netip.PrefixFrom(addr, bits)
	if reserved := subnetReserved(n.Address); reserved != "" {
		return n, "", fmt.Errorf("%s %s is the %s address of its subnet %s, which no host can have", source, n.Address, reserved, n.Address.Masked())
	}
	if gateway != "" {
		if n.Gateway, err = netip.ParseAddr(gateway); err != nil {
			return n, "", fmt.Errorf("%s: gateway %q is not an IP address", source, gateway)
		}
	}
	for _, route := range network.Routes {
		dst, err := netip.ParsePrefix(route.Destination)
		if err != nil {
			return n, "", fmt.Errorf("route destination %q is not a CIDR", route.Destination)
		}
		r := cloudinit.Route{Destination: dst}
		if route.Gateway != "" {
			if r.Gateway, err = netip.ParseAddr(route.Gateway); err != nil {
				return n, "", fmt.Errorf("route gateway %q is not an IP address", route.Gateway)
			}
		}
		n.Routes = append(n.Routes, r)
	}
	return n, claimName, nil
}

// annotatedNameservers reads the DNS servers an IPAM provider put on the
// IPAddress (infrav1.DNSServersAnnotation).
func annotatedNameservers(ip *ipamv1.IPAddress) ([]netip.Addr, error) {
	value := ip.Annotations[infrav1.DNSServersAnnotation]
	if value == "" {
		return nil, nil
	}
	var servers []netip.Addr
	for _, server := range strings.Split(value, ",") {
		ns, err := netip.ParseAddr(server)
		if err != nil {
			return nil, fmt.Errorf("IPAddress %s: annotation %s: %q is not an IP address", ip.Name, infrav1.DNSServersAnnotation, server)
		}
		servers = append(servers, ns)
	}
	return servers, nil
}

// subnetReserved names the address of its own subnet that a is ("network",
// "broadcast"), or returns "" for a host address. Point-to-point and host
// subnets (/31, /32, /127, /128) have no such address.
func subnetReserved(a netip.Prefix) string {
	if a.Addr().BitLen()-a.Bits() < 2 {
		return ""
	}
	switch a.Addr() {
	case a.Masked().Addr():
		return "network"
	case netipx.PrefixLastIP(a.Masked()):
		if a.Addr().Is4() {
			return "broadcast"
		}
	}
	return ""
}

func familyName(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// prefixLength is the address's prefix length, from the address itself or
// from the network's netmask; when both are given they must agree.
func prefixLength(addr netip.Addr, prefix *int32, netmask string) (int, error) {
	fromMask := -1
	if netmask != "" {
		bits, err := maskBits(netmask)
		if err != nil {
			return 0, err
		}
		if !addr.Is4() {
			return 0, fmt.Errorf("netmask %s is for IPv4 but the address is IPv6", netmask)
		}
		fromMask = bits
	}
	switch {
	case prefix == nil && fromMask < 0:
		return 0, errors.New("has no prefix length and the network has no netmask")
	case prefix == nil:
		return fromMask, nil
	case int(*prefix) < 0 || int(*prefix) > addr.BitLen():
		return 0, fmt.Errorf("prefix length %d is out of range", *prefix)
	case fromMask >= 0 && fromMask != int(*prefix):
		return 0, fmt.Errorf("prefix length /%d does not match the network's netmask %s (/%d)", *prefix, netmask, fromMask)
	}
	return int(*prefix), nil
}

// maskBits is the prefix length of a dotted IPv4 netmask like 255.255.255.248.
func maskBits(netmask string) (int, error) {
	mask, err := netip.ParseAddr(netmask)
	if err != nil || !mask.Is4() {
		return 0, fmt.Errorf("netmask %q is not a dotted IPv4 netmask", netmask)
	}
	b := mask.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	bits := 0
	for v&(1<<31) != 0 {
		bits++
		v <<= 1
	}
	if v != 0 {
		return 0, fmt.Errorf("netmask %s is not contiguous", netmask)
	}
	return bits, nil
}
