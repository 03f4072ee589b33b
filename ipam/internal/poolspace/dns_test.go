package poolspace_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
)

func dnsSpec(servers []string, subnets ...v1alpha1.SubnetDNSServers) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Gateway: "10.0.0.1",
		DNSServers: servers, SubnetDNSServers: subnets}
}

func TestResolveRefusesBadDNSServers(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec v1alpha1.MetalVRFIPPoolSpec
		want wantErr
	}{
		{"not an address", dnsSpec([]string{"10.0.0.53", "dns.example.net"}),
			wantErr{field.ErrorTypeInvalid, "spec.dnsServers[1]", "dns.example.net", "not an IP address"}},
		{"a leading space", dnsSpec([]string{" 10.0.0.53"}),
			wantErr{field.ErrorTypeInvalid, "spec.dnsServers[0]", " 10.0.0.53", "not an IP address"}},
		{"with a zone", dnsSpec([]string{"fe80::53%eth0"}),
			wantErr{field.ErrorTypeInvalid, "spec.dnsServers[0]", "fe80::53%eth0", "without zone"}},
		{"unspecified", dnsSpec([]string{"0.0.0.0"}),
			wantErr{field.ErrorTypeInvalid, "spec.dnsServers[0]", "0.0.0.0", "not the address of a DNS server"}},
		{"twice", dnsSpec([]string{"10.0.0.53", "10.0.0.53"}),
			wantErr{field.ErrorTypeDuplicate, "spec.dnsServers[1]", "10.0.0.53", ""}},
		{"four", dnsSpec([]string{"10.0.0.50", "10.0.0.51", "10.0.0.52", "10.0.0.53"}),
			wantErr{field.ErrorTypeTooMany, "spec.dnsServers", 4, "must have at most 3 items"}},
		{"subnet not a CIDR", dnsSpec(nil, v1alpha1.SubnetDNSServers{Subnet: "10.0.0.0", DNSServers: []string{"10.0.0.53"}}),
			wantErr{field.ErrorTypeInvalid, "spec.subnetDNSServers[0].subnet", "10.0.0.0", "not a subnet in CIDR notation"}},
		{"subnet with host bits", dnsSpec(nil, v1alpha1.SubnetDNSServers{Subnet: "10.0.0.5/24", DNSServers: []string{"10.0.0.53"}}),
			wantErr{field.ErrorTypeInvalid, "spec.subnetDNSServers[0].subnet", "10.0.0.5/24", "has host bits set: the subnet is 10.0.0.0/24"}},
		{"subnet of the other family", dnsSpec(nil, v1alpha1.SubnetDNSServers{Subnet: "fd00::/64", DNSServers: []string{"10.0.0.53"}}),
			wantErr{field.ErrorTypeInvalid, "spec.subnetDNSServers[0].subnet", "fd00::/64", "is IPv6 but spec.addresses are IPv4"}},
		{"subnet twice", dnsSpec(nil,
			v1alpha1.SubnetDNSServers{Subnet: "10.0.0.0/24", DNSServers: []string{"10.0.0.53"}},
			v1alpha1.SubnetDNSServers{Subnet: "10.0.0.0/24", DNSServers: []string{"10.0.0.54"}}),
			wantErr{field.ErrorTypeDuplicate, "spec.subnetDNSServers[1].subnet", "10.0.0.0/24", ""}},
		{"subnet server not an address", dnsSpec(nil, v1alpha1.SubnetDNSServers{Subnet: "10.0.0.0/24", DNSServers: []string{"10.0.0.300"}}),
			wantErr{field.ErrorTypeInvalid, "spec.subnetDNSServers[0].dnsServers[0]", "10.0.0.300", "not an IP address"}},
	} {
		t.Run(tt.name, func(t *testing.T) { expectOneError(t, tt.spec, tt.want) })
	}
}

func TestDNSServersOfTheMostSpecificSubnet(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{
		DNSServers: []string{"10.0.0.53"},
		SubnetDNSServers: []v1alpha1.SubnetDNSServers{
			{Subnet: "10.60.0.0/16", DNSServers: []string{"10.60.0.53"}},
			{Subnet: "10.60.1.0/29", DNSServers: []string{"10.60.1.1", "fd00::53"}},
		},
	}
	for addr, want := range map[string][]string{
		"10.60.1.2": {"10.60.1.1", "fd00::53"},
		"10.60.2.2": {"10.60.0.53"},
		"10.70.0.2": {"10.0.0.53"},
	} {
		if got := poolspace.DNSServers(&spec, netip.MustParseAddr(addr)); !reflect.DeepEqual(got, want) {
			t.Errorf("DNSServers(%s) = %v, want %v", addr, got, want)
		}
	}
	if got := poolspace.DNSServers(&v1alpha1.MetalVRFIPPoolSpec{}, netip.MustParseAddr("10.0.0.1")); got != nil {
		t.Errorf("DNSServers of a pool without any = %v, want none", got)
	}
}

// expectOneError checks that spec resolves to no space and the one error want.
func expectOneError(t *testing.T, spec v1alpha1.MetalVRFIPPoolSpec, want wantErr) {
	t.Helper()
	space, errs := poolspace.Resolve(&spec, nil)
	if space != nil || len(errs) != 1 {
		t.Fatalf("Resolve() = %v, %v; want one error", space, errs)
	}
	if e := errs[0]; e.Type != want.typ || e.Field != want.field || !reflect.DeepEqual(e.BadValue, want.bad) || !strings.Contains(e.Detail, want.detail) {
		t.Errorf("error = {%s, %s, %#v, %q}\nwant {%s, %s, %#v, detail containing %q}", e.Type, e.Field, e.BadValue, e.Detail, want.typ, want.field, want.bad, want.detail)
	}
}
