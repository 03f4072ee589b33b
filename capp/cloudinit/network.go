package cloudinit

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
)

// Network is the address a node has on one VLAN of one of its ports.
type Network struct {
	// Port is the port's name as Equinix Metal knows it: bond0, eth0, eth1.
	Port string
	// VLAN is the 802.1Q tag, the VLAN's vxlan.
	VLAN int
	// Address is the node's address with its subnet's prefix length.
	Address netip.Prefix
	// Gateway is the subnet's gateway; the zero Addr when it has none.
	Gateway netip.Addr
	// Routes reached through the network.
	Routes []Route
	// Internal marks the node's InternalIP: the first one of each family
	// becomes kubelet's --node-ip.
	Internal bool
	// Nameservers are the DNS servers of the network, at most
	// MaxNameservers.
	Nameservers []netip.Addr
}

// MaxNameservers is the number of nameservers resolv.conf uses (glibc's MAXNS).
const MaxNameservers = 3

// Route is a static route through a network.
type Route struct {
	Destination netip.Prefix
	// Gateway is the next hop; the zero Addr means the network's gateway,
	// or an on-link route when the network has none.
	Gateway netip.Addr
}

// maxVLANInterfaceName is Linux's limit on interface names (IFNAMSIZ - 1).
const maxVLANInterfaceName = 15

// portNamePattern keeps port names safe to write into shell scripts and
// ifupdown files unquoted.
var portNamePattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*$`)

// Interface is the name of the network's VLAN sub-interface on device, the
// local name of its port: "<device>.<vlan>", the form ifupdown creates VLANs
// from without further configuration.
func (n Network) Interface(device string) string {
	return device + "." + strconv.Itoa(n.VLAN)
}

// family is "-4" or "-6", the ip(8) option for the network's family.
func family(a netip.Addr) string {
	if a.Is4() {
		return "-4"
	}
	return "-6"
}

// routeGateway is the next hop of r on n, or the zero Addr for on-link.
func (n Network) routeGateway(r Route) netip.Addr {
	if r.Gateway.IsValid() {
		return r.Gateway
	}
	return n.Gateway
}

// Validate reports why the networks cannot be rendered, if they cannot.
func Validate(networks []Network) error {
	var errs []error
	seen := map[netip.Addr]int{}
	for i, n := range networks {
		errs = append(errs, n.validate(fmt.Sprintf("network %d (%s.%d)", i, n.Port, n.VLAN))...)
		if prev, dup := seen[n.Address.Addr()]; dup {
			errs = append(errs, fmt.Errorf("network %d: address %s is already used by network %d", i, n.Address.Addr(), prev))
		}
		seen[n.Address.Addr()] = i
	}
	return errors.Join(errs...)
}

// Check reports why the network alone cannot be rendered, if it cannot,
// naming its sub-interface.
func (n Network) Check() error {
	return errors.Join(n.validate(fmt.Sprintf("%s.%d", n.Port, n.VLAN))...)
}

// validate checks the network; name prefixes each error.
func (n Network) validate(name string) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	if !portNamePattern.MatchString(n.Port) {
		fail("port name %q is not an interface name", n.Port)
	}
	if n.VLAN < 1 || n.VLAN > 4094 {
		fail("VLAN %d is outside 1-4094", n.VLAN)
	}
	if len(n.Interface(n.Port)) > maxVLANInterfaceName {
		fail("interface name %s is longer than %d characters", n.Interface(n.Port), maxVLANInterfaceName)
	}
	if !n.Address.IsValid() {
		fail("no address")
		return errs
	}
	addr := n.Address.Addr()
	subnet := n.Address.Masked()
	if addr.Zone() != "" || addr.Is4In6() {
		fail("address %s must be a plain IPv4 or IPv6 address", addr)
	}
	if n.Gateway.IsValid() {
		switch {
		case n.Gateway.Is4() != addr.Is4():
			fail("gateway %s and address %s are of different IP families", n.Gateway, addr)
		case !subnet.Contains(n.Gateway):
			fail("gateway %s is outside the subnet %s", n.Gateway, subnet)
		case n.Gateway == addr:
			fail("gateway %s is the node's own address", n.Gateway)
		}
	}
	if len(n.Nameservers) > MaxNameservers {
		fail("%d nameservers, more than the %d resolv.conf uses", len(n.Nameservers), MaxNameservers)
	}
	for i, ns := range n.Nameservers {
		switch {
		case !ns.IsValid() || ns.Zone() != "" || ns.Is4In6() || ns.IsUnspecified() || ns.IsMulticast():
			fail("nameserver %s is not the plain address of a DNS server", ns)
		case slices.Contains(n.Nameservers[:i], ns):
			fail("nameserver %s is listed twice", ns)
		}
	}
	for _, r := range n.Routes {
		switch {
		case !r.Destination.IsValid():
			fail("route without a destination")
		case r.Destination.Addr().Is4() != addr.Is4():
			fail("route to %s is not of the address's IP family", r.Destination)
		case r.Destination != r.Destination.Masked():
			fail("route destination %s has host bits set", r.Destination)
		case r.Gateway.IsValid() && r.Gateway.Is4() != addr.Is4():
			fail("route to %s: gateway %s is not of the address's IP family", r.Destination, r.Gateway)
		case r.Gateway.IsValid() && !subnet.Contains(r.Gateway):
			fail("route to %s: gateway %s is not reachable on the subnet %s", r.Destination, r.Gateway, subnet)
		}
	}
	return errs
}

// NodeIPs are kubelet's --node-ip values: the first Internal address of each
// IP family, IPv4 first (kubelet's order for dual stack).
func NodeIPs(networks []Network) []netip.Addr {
	var v4, v6 netip.Addr
	for _, n := range networks {
		if !n.Internal {
			continue
		}
		switch a := n.Address.Addr(); {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	var ips []netip.Addr
	for _, a := range []netip.Addr{v4, v6} {
		if a.IsValid() {
			ips = append(ips, a)
		}
	}
	return ips
}

// ports are the distinct port names of networks, in order of appearance.
func ports(networks []Network) []string {
	var names []string
	seen := map[string]bool{}
	for _, n := range networks {
		if !seen[n.Port] {
			seen[n.Port] = true
			names = append(names, n.Port)
		}
	}
	return names
}

// Nameservers are the nameservers of all networks, each once, in the order
// of the networks: the lines the node's resolv.conf gets.
func Nameservers(networks []Network) []netip.Addr {
	var all []netip.Addr
	for _, n := range networks {
		for _, ns := range n.Nameservers {
			if !slices.Contains(all, ns) {
				all = append(all, ns)
			}
		}
	}
	return all
}
