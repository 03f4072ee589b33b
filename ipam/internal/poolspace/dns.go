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

// validateDNS checks spec.dnsServers, spec.subnets[].dnsServers and
// spec.subnetDNSServers: plain IP addresses, no server twice in a list,
// subnets in CIDR notation without host bits, of the pool's family when it
// is known, no subnet twice, nor one whose spec.subnets entry gives its
// servers already.
func validateDNS(spec *v1alpha1.MetalVRFIPPoolSpec, family cidr.Family, known bool) field.ErrorList {
	errs := validateServers(specPath.Child("dnsServers"), spec.DNSServers)
	// own are the cidrs of spec.subnets that give DNS servers: an entry of
	// spec.subnetDNSServers for the same subnet would leave two answers.
	own := map[netip.Prefix]int{}
	for i, entry := range spec.Subnets {
		errs = append(errs, validateServers(subnetsPath.Index(i).Child("dnsServers"), entry.DNSServers)...)
		if prefix, err := netip.ParsePrefix(entry.CIDR); err == nil && len(entry.DNSServers) > 0 {
			own[prefix.Masked()] = i
		}
	}
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
		if i, ok := own[prefix]; ok {
			errs = append(errs, field.Invalid(path.Child("subnet"), entry.Subnet,
				fmt.Sprintf("is %s, whose DNS servers %s gives already: give them in one place",
					subnetsPath.Index(i).Child("cidr"), subnetsPath.Index(i).Child("dnsServers"))))
		}
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
// the most specific subnet containing it that names some, an entry of
// spec.subnets (its dnsServers) or of spec.subnetDNSServers, else
// spec.dnsServers. Entries that do not parse are skipped (the webhook
// refuses them, and refuses one subnet in both lists).
func DNSServers(spec *v1alpha1.MetalVRFIPPoolSpec, a netip.Addr) []string {
	best := -1
	servers := spec.DNSServers
	for _, entry := range spec.Subnets {
		prefix, err := netip.ParsePrefix(entry.CIDR)
		if err != nil || len(entry.DNSServers) == 0 || !prefix.Contains(a) || prefix.Bits() <= best {
			continue
		}
		best, servers = prefix.Bits(), entry.DNSServers
	}
	for _, entry := range spec.SubnetDNSServers {
		prefix, err := netip.ParsePrefix(entry.Subnet)
		if err != nil || !prefix.Contains(a) || prefix.Bits() <= best {
			continue
		}
		best, servers = prefix.Bits(), entry.DNSServers
	}
	return servers
}
