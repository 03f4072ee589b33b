package poolspace

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// maxDNSServers is the number of nameservers resolv.conf uses (glibc's MAXNS).
const maxDNSServers = 3

// validateDNS checks spec.dnsServers and spec.subnetDNSServers: plain IP
// addresses, no server twice in a list, subnets in CIDR notation without
// host bits, of the pool's family when it is known, no subnet twice.
func validateDNS(spec *v1alpha1.MetalVRFIPPoolSpec, family cidr.Family, known bool) field.ErrorList {
	errs := validateServers(specPath.Child("dnsServers"), spec.DNSServers)
	seen := map[netip.Prefix]bool{}
	for i, entry := range spec.SubnetDNSServers {
		path := specPath.Child("subnetDNSServers").Index(i)
		errs = append(errs, validateServers(path.Child("dnsServers"), entry.DNSServers)...)
		prefix, err := netip.ParsePrefix(entry.Subnet)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Child("subnet"), entry.Subnet, "not a subnet in CIDR notation, e.g. 10.60.1.0/29"))
			continue
		case prefix != prefix.Masked():
			errs = append(errs, field.Invalid(path.Child("subnet"), entry.Subnet,
				fmt.Sprintf("has host bits set: the subnet is %s", prefix.Masked())))
			continue
		case known && cidr.FamilyOf(prefix.Addr()) != family:
			errs = append(errs, field.Invalid(path.Child("subnet"), entry.Subnet,
				fmt.Sprintf("is %s but %s: it holds no address of the pool", cidr.FamilyOf(prefix.Addr()), familySource(spec, family))))
			continue
		case seen[prefix]:
			errs = append(errs, field.Duplicate(path.Child("subnet"), entry.Subnet))
			continue
		}
		seen[prefix] = true
	}
	return errs
}

// validateServers checks one list of DNS servers.
func validateServers(path *field.Path, servers []string) field.ErrorList {
	var errs field.ErrorList
	if len(servers) > maxDNSServers {
		errs = append(errs, field.TooMany(path, len(servers), maxDNSServers))
	}
	seen := map[netip.Addr]bool{}
	for i, server := range servers {
		ip, err := netip.ParseAddr(server)
		switch {
		case err != nil || strings.TrimSpace(server) != server:
			errs = append(errs, field.Invalid(path.Index(i), server, "not an IP address"))
		case ip.Zone() != "" || ip.Is4In6():
			errs = append(errs, field.Invalid(path.Index(i), server, "must be a plain IP address, without zone or IPv4-mapped form"))
		case ip.IsUnspecified() || ip.IsMulticast():
			errs = append(errs, field.Invalid(path.Index(i), server, "is not the address of a DNS server"))
		case seen[ip]:
			errs = append(errs, field.Duplicate(path.Index(i), server))
		}
		seen[ip] = true
	}
	return errs
}

// DNSServers returns the DNS servers handed out with address a: those of
// the most specific spec.subnetDNSServers entry containing it, else
// spec.dnsServers. Entries that do not parse are skipped (the webhook
// refuses them).
func DNSServers(spec *v1alpha1.MetalVRFIPPoolSpec, a netip.Addr) []string {
	best := -1
	servers := spec.DNSServers
	for _, entry := range spec.SubnetDNSServers {
		prefix, err := netip.ParsePrefix(entry.Subnet)
		if err != nil || !prefix.Contains(a) || prefix.Bits() <= best {
			continue
		}
		best, servers = prefix.Bits(), entry.DNSServers
	}
	return servers
}
