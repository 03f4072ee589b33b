package poolspace_test

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// subnet is an entry of spec.subnets.
func subnet(cidr, gateway string, addresses ...string) v1alpha1.Subnet {
	return v1alpha1.Subnet{CIDR: cidr, Gateway: gateway, Addresses: addresses}
}

// withDNS gives an entry of spec.subnets DNS servers.
func withDNS(s v1alpha1.Subnet, servers ...string) v1alpha1.Subnet {
	s.DNSServers = servers
	return s
}

// handedOut is one address as a claim gets it.
type handedOut struct {
	address, subnet, gateway string
	dns                      []string
}

// drain hands out every address of the space, lowest first, with what goes
// with each.
func drain(t *testing.T, spec *v1alpha1.MetalVRFIPPoolSpec, space *poolspace.Space) []handedOut {
	t.Helper()
	alloc := cidr.NewAllocator(space.Space)
	var out []handedOut
	for {
		ip, err := alloc.Next()
		if errors.Is(err, cidr.ErrExhausted) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		s, ok := space.SubnetOf(ip)
		if !ok {
			t.Fatalf("SubnetOf(%s): none", ip)
		}
		h := handedOut{address: ip.String(), subnet: s.Prefix.String(), dns: poolspace.DNSServers(spec, ip)}
		if s.Gateway.IsValid() {
			h.gateway = s.Gateway.String()
		}
		out = append(out, h)
	}
}

// TestSubnetsHandOutEachAddressWithItsOwnSubnet: every address comes with
// the prefix, gateway and DNS servers of its own entry of spec.subnets
// (spec.dnsServers for an entry without any), no gateway, network or
// broadcast address is handed out, and the total is exactly the sum of the
// subnets' usable addresses.
func TestSubnetsHandOutEachAddressWithItsOwnSubnet(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{
		DNSServers: []string{"10.0.0.53"},
		Subnets: []v1alpha1.Subnet{
			withDNS(subnet("10.60.1.0/28", "10.60.1.1", "10.60.1.12-10.60.1.15"), "10.60.1.53", "10.60.1.54"),
			withDNS(subnet("10.60.0.0/29", "10.60.0.1"), "10.60.0.53"), // the whole subnet; listed second, lower addresses
			subnet("10.60.2.0/30", ""),
		},
	}
	space, errs := poolspace.Resolve(&spec, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// 10.60.0.0/29: 8 less network, gateway and broadcast; 10.60.1.12-15: 4
	// less the broadcast 10.60.1.15; 10.60.2.0/30: 4 less network and broadcast.
	if got := space.Total().String(); got != "10" {
		t.Errorf("Total() = %s, want 5 + 3 + 2 = 10", got)
	}
	zero, one, two := []string{"10.60.0.53"}, []string{"10.60.1.53", "10.60.1.54"}, []string{"10.0.0.53"}
	want := []handedOut{
		{"10.60.0.2", "10.60.0.0/29", "10.60.0.1", zero},
		{"10.60.0.3", "10.60.0.0/29", "10.60.0.1", zero},
		{"10.60.0.4", "10.60.0.0/29", "10.60.0.1", zero},
		{"10.60.0.5", "10.60.0.0/29", "10.60.0.1", zero},
		{"10.60.0.6", "10.60.0.0/29", "10.60.0.1", zero},
		{"10.60.1.12", "10.60.1.0/28", "10.60.1.1", one},
		{"10.60.1.13", "10.60.1.0/28", "10.60.1.1", one},
		{"10.60.1.14", "10.60.1.0/28", "10.60.1.1", one},
		{"10.60.2.1", "10.60.2.0/30", "", two},
		{"10.60.2.2", "10.60.2.0/30", "", two},
	}
	if got := drain(t, &spec, space); !reflect.DeepEqual(got, want) {
		t.Errorf("handed out\n%v\nwant\n%v", got, want)
	}

	spec.AllocateReservedIPAddresses = true
	space, errs = poolspace.Resolve(&spec, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := space.Total().String(); got != "15" {
		t.Errorf("Total() with reserved addresses = %s, want 7 + 4 + 4 = 15: the gateways still never", got)
	}
	for _, gw := range []string{"10.60.0.1", "10.60.1.1"} {
		if space.Contains(netip.MustParseAddr(gw)) {
			t.Errorf("the gateway %s is allocatable", gw)
		}
	}
}

// TestAddressesArePoolSubnetShortForm: spec.addresses with spec.prefix and
// spec.gateway is the same as one entry of spec.subnets, and both forms
// mix in one pool.
func TestAddressesArePoolSubnetShortForm(t *testing.T) {
	short := v1alpha1.MetalVRFIPPoolSpec{
		Addresses: []string{"10.0.0.10-10.0.0.20", "10.0.0.200/29"}, Prefix: new(int32(24)), Gateway: "10.0.0.1",
		ExcludedAddresses: []string{"10.0.0.12"},
	}
	long := v1alpha1.MetalVRFIPPoolSpec{
		Subnets:           []v1alpha1.Subnet{subnet("10.0.0.0/24", "10.0.0.1", "10.0.0.10-10.0.0.20", "10.0.0.200/29")},
		ExcludedAddresses: []string{"10.0.0.12"},
	}
	both := short
	both.Subnets = []v1alpha1.Subnet{subnet("10.0.1.0/24", "10.0.1.1", "10.0.1.5")}

	var got [][]handedOut
	for _, spec := range []v1alpha1.MetalVRFIPPoolSpec{short, long, both} {
		space, errs := poolspace.Resolve(&spec, nil)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		got = append(got, drain(t, &spec, space))
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("spec.addresses hands out\n%v\nspec.subnets\n%v", got[0], got[1])
	}
	if want := append(got[0], handedOut{"10.0.1.5", "10.0.1.0/24", "10.0.1.1", nil}); !reflect.DeepEqual(got[2], want) {
		t.Errorf("both forms hand out\n%v\nwant\n%v", got[2], want)
	}
}

// TestSubnetsKeepExclusionsPinsAndRequests: exclusions, pre-allocations
// and requested addresses work across subnets, and say which entry keeps an
// address out.
func TestSubnetsKeepExclusionsPinsAndRequests(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{
		Subnets: []v1alpha1.Subnet{
			subnet("10.60.0.0/29", "10.60.0.1"),
			subnet("10.60.1.0/28", "10.60.1.1", "10.60.1.8-10.60.1.12"),
		},
		ExcludedAddresses: []string{"10.60.0.3", "10.60.1.9"},
		PreAllocations:    []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.60.1.10"}},
	}
	space, errs := poolspace.Resolve(&spec, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, h := range drain(t, &spec, space) {
		got = append(got, h.address)
	}
	if want := []string{"10.60.0.2", "10.60.0.4", "10.60.0.5", "10.60.0.6", "10.60.1.8", "10.60.1.11", "10.60.1.12"}; !reflect.DeepEqual(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
	if !space.Contains(netip.MustParseAddr("10.60.1.10")) || !space.Withheld(netip.MustParseAddr("10.60.1.10")) {
		t.Error("the pre-allocated 10.60.1.10 is not withheld for its owner")
	}

	for _, tc := range []struct{ address, field, want string }{
		{"10.60.1.9", "spec.excludedAddresses[1]", `is excluded by spec.excludedAddresses[1] ("10.60.1.9")`},
		{"10.60.1.1", "spec.subnets[1].gateway", "is the gateway of subnet 10.60.1.0/28 (spec.subnets[1].gateway)"},
		{"10.60.1.4", "spec.subnets[1].addresses", "lies in spec.subnets[1].cidr (10.60.1.0/28) but outside its addresses"},
		{"10.60.0.7", "spec.subnets[0].cidr", "is the broadcast address of subnet 10.60.0.0/29"},
		{"10.60.9.9", "spec.subnets", "lies outside every address the pool hands out"},
	} {
		got, ok := poolspace.WhyUnavailable(&spec, nil, netip.MustParseAddr(tc.address))
		if !ok || got.Field != tc.field || !strings.Contains(got.Detail, tc.want) {
			t.Errorf("WhyUnavailable(%s) = %+v, %t; want %s: %q", tc.address, got, ok, tc.field, tc.want)
		}
	}
	if got, _ := poolspace.WhyUnavailable(&spec, nil, netip.MustParseAddr("10.60.0.0")); !got.Reserved {
		t.Errorf("WhyUnavailable(10.60.0.0) = %+v, want it marked reserved", got)
	}

	spec.PreAllocations = []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.60.1.1"}}
	expectOneError(t, spec, wantErr{field.ErrorTypeInvalid, "spec.preAllocations[0].address", "10.60.1.1", "is the gateway of subnet 10.60.1.0/28 (spec.subnets[1].gateway)"})
	spec.PreAllocations = nil
	spec.ExcludedAddresses = []string{"10.60.1.4"}
	expectOneError(t, spec, wantErr{field.ErrorTypeInvalid, "spec.excludedAddresses[0]", "10.60.1.4", "lies outside the pool's addresses: it excludes nothing"})
}

// TestSubnetDNSServersInteraction: spec.subnets[].dnsServers are entries
// of spec.subnetDNSServers for their cidr: a more specific entry still wins
// inside it, and one naming the same subnet is refused.
func TestSubnetDNSServersInteraction(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{
		DNSServers: []string{"10.0.0.53"},
		Subnets:    []v1alpha1.Subnet{withDNS(subnet("10.60.0.0/24", ""), "10.60.0.53"), subnet("10.60.1.0/24", "")},
		SubnetDNSServers: []v1alpha1.SubnetDNSServers{
			{Subnet: "10.60.0.0/16", DNSServers: []string{"10.60.255.53"}},
			{Subnet: "10.60.0.0/28", DNSServers: []string{"10.60.0.1"}},
		},
	}
	if _, errs := poolspace.Resolve(&spec, nil); len(errs) > 0 {
		t.Fatal(errs)
	}
	for addr, want := range map[string][]string{
		"10.60.0.5":  {"10.60.0.1"},    // the /28 entry, inside spec.subnets[0]
		"10.60.0.50": {"10.60.0.53"},   // spec.subnets[0] over the /16 entry
		"10.60.1.5":  {"10.60.255.53"}, // spec.subnets[1] names none: the /16 entry
	} {
		if got := poolspace.DNSServers(&spec, netip.MustParseAddr(addr)); !reflect.DeepEqual(got, want) {
			t.Errorf("DNSServers(%s) = %v, want %v", addr, got, want)
		}
	}

	spec.SubnetDNSServers = append(spec.SubnetDNSServers, v1alpha1.SubnetDNSServers{Subnet: "10.60.0.0/24", DNSServers: []string{"10.60.0.54"}})
	expectOneError(t, spec, wantErr{field.ErrorTypeInvalid, "spec.subnetDNSServers[2].subnet", "10.60.0.0/24",
		"is spec.subnets[0].cidr, whose DNS servers spec.subnets[0].dnsServers gives already"})
	spec.Subnets[0].DNSServers = nil
	if _, errs := poolspace.Resolve(&spec, nil); len(errs) > 0 {
		t.Errorf("a subnet named once, in spec.subnetDNSServers: %v", errs)
	}
}

func TestFamilyOfASubnetsPool(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("bogus", ""), subnet("fd00:1::/64", "")}}
	if f, ok := poolspace.Family(&spec); !ok || f != cidr.IPv6 {
		t.Errorf("Family() = %s, %t; want IPv6 from spec.subnets[1]", f, ok)
	}
	if got := poolspace.FamilyField(&spec); got != "spec.subnets[1].cidr" {
		t.Errorf("FamilyField() = %q, want spec.subnets[1].cidr", got)
	}
}

// invalidSubnetSpecs are rejected with exactly the errors in want, in order.
var invalidSubnetSpecs = []struct {
	name string
	spec v1alpha1.MetalVRFIPPoolSpec
	want []wantErr
}{
	{
		name: "overlapping subnets",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.0.0/24", ""), subnet("10.60.0.0/23", "")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[1].cidr", "10.60.0.0/23", `overlaps spec.subnets[0].cidr ("10.60.0.0/24")`}},
	},
	{
		name: "the same subnet twice",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.0.0/24", ""), subnet("10.61.0.0/24", ""), subnet("10.60.0.0/24", "10.60.0.1")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[2].cidr", "10.60.0.0/24", `overlaps spec.subnets[0].cidr ("10.60.0.0/24")`}},
	},
	{
		name: "host bits in a cidr",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.5/24", "")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].cidr", "10.60.1.5/24", "has host bits set: the subnet is 10.60.1.0/24"}},
	},
	{
		name: "a cidr that is an address",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0", "")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].cidr", "10.60.1.0", "not a subnet in CIDR notation"}},
	},
	{
		name: "a cidr in IPv4-mapped form",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("::ffff:10.60.1.0/120", "")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].cidr", "::ffff:10.60.1.0/120", "without IPv4-mapped form"}},
	},
	{
		name: "an address outside its subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "", "10.60.1.10-10.60.1.20", "10.60.2.5")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].addresses[1]", "10.60.2.5", "lies outside spec.subnets[0].cidr (10.60.1.0/24)"}},
	},
	{
		name: "an address of the other family than its subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "", "fd00::5")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].addresses[0]", "fd00::5", "lies outside spec.subnets[0].cidr (10.60.1.0/24): it is IPv6, the subnet IPv4"}},
	},
	{
		name: "overlapping addresses of a subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "", "10.60.1.0/28", "10.60.1.8-10.60.1.20")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].addresses[1]", "10.60.1.8-10.60.1.20", `overlaps spec.subnets[0].addresses[0] ("10.60.1.0/28")`}},
	},
	{
		name: "an address that does not parse",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "", "10.60.1.300")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].addresses[0]", "10.60.1.300", "not a valid IP, range, nor CIDR"}},
	},
	{
		name: "a gateway outside its subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.0.0/24", "10.60.0.1"), subnet("10.60.1.0/24", "10.60.2.1")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[1].gateway", "10.60.2.1", "lies outside spec.subnets[1].cidr (10.60.1.0/24)"}},
	},
	{
		name: "a gateway that is not an address",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "10.60.1.x")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].gateway", "10.60.1.x", "not a valid IP address"}},
	},
	{
		name: "subnets of mixed families",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", ""), subnet("fd00::/64", "")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[1].cidr", "fd00::/64", "is IPv6 but spec.subnets[0].cidr is IPv4: mixed IP families"}},
	},
	{
		name: "a subnet of the other family than spec.addresses",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Subnets: []v1alpha1.Subnet{subnet("fd00::/64", "")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].cidr", "fd00::/64", "is IPv6 but spec.addresses are IPv4: mixed IP families"}},
	},
	{
		name: "subnets of the other family than spec.vrf.ipFamily",
		spec: v1alpha1.MetalVRFIPPoolSpec{
			VRF:     &v1alpha1.VRFSource{ID: "vrf", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}, IPFamily: v1alpha1.IPv6Family},
			Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "")},
		},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.vrf.ipFamily", "IPv6", "but spec.subnets[0].cidr is IPv4: a pool holds one IP family"}},
	},
	{
		name: "a subnet overlapping the subnet of spec.addresses",
		spec: v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.60.0.10-10.60.0.20"}, Prefix: new(int32(23)),
			Subnets: []v1alpha1.Subnet{subnet("10.60.1.0/24", "")},
		},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].cidr", "10.60.1.0/24",
			"overlaps the subnet of spec.addresses (10.60.0.0/23, spec.prefix around spec.addresses[0])"}},
	},
	{
		name: "a bad DNS server of a subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{withDNS(subnet("10.60.1.0/24", ""), "10.60.1.53", "dns.example.net")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets[0].dnsServers[1]", "dns.example.net", "not an IP address"}},
	},
	{
		name: "a DNS server of a subnet twice",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.0.0/24", ""), withDNS(subnet("10.60.1.0/24", ""), "10.60.1.53", "10.60.1.53")}},
		want: []wantErr{{field.ErrorTypeDuplicate, "spec.subnets[1].dnsServers[1]", "10.60.1.53", ""}},
	},
	{
		name: "four DNS servers of a subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{withDNS(subnet("10.60.1.0/24", ""), "10.60.1.50", "10.60.1.51", "10.60.1.52", "10.60.1.53")}},
		want: []wantErr{{field.ErrorTypeTooMany, "spec.subnets[0].dnsServers", 4, "must have at most 3 items"}},
	},
	{
		name: "subnets that leave nothing to hand out",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{subnet("10.60.1.1/32", "10.60.1.1")}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.subnets", []v1alpha1.Subnet{subnet("10.60.1.1/32", "10.60.1.1")}, "leaves no address to hand out"}},
	},
	{
		name: "errors of several entries together",
		spec: v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			subnet("10.60.0.0/24", "10.61.0.1", "10.62.0.1"), subnet("10.60.0.128/25", ""), subnet("10.60.2.0/24", "10.60.2.1"),
		}},
		want: []wantErr{
			{field.ErrorTypeInvalid, "spec.subnets[0].gateway", "10.61.0.1", "lies outside spec.subnets[0].cidr (10.60.0.0/24)"},
			{field.ErrorTypeInvalid, "spec.subnets[0].addresses[0]", "10.62.0.1", "lies outside spec.subnets[0].cidr (10.60.0.0/24)"},
			{field.ErrorTypeInvalid, "spec.subnets[1].cidr", "10.60.0.128/25", `overlaps spec.subnets[0].cidr ("10.60.0.0/24")`},
		},
	},
}

func TestResolveInvalidSubnets(t *testing.T) {
	for _, tt := range invalidSubnetSpecs {
		t.Run(tt.name, func(t *testing.T) { expectErrors(t, tt.spec, tt.want) })
	}
}

// expectErrors checks that spec resolves to no space and exactly the errors
// want, in order.
func expectErrors(t *testing.T, spec v1alpha1.MetalVRFIPPoolSpec, want []wantErr) {
	t.Helper()
	space, errs := poolspace.Resolve(&spec, nil)
	if space != nil {
		t.Errorf("Resolve() returned a space along with errors %v", errs)
	}
	if len(errs) != len(want) {
		t.Fatalf("Resolve() = %d errors, want %d:\n%v", len(errs), len(want), errs.ToAggregate())
	}
	for i, w := range want {
		if e := errs[i]; e.Type != w.typ || e.Field != w.field || !reflect.DeepEqual(e.BadValue, w.bad) || !strings.Contains(e.Detail, w.detail) {
			t.Errorf("error %d = {%s, %s, %#v, %q}\nwant {%s, %s, %#v, detail containing %q}",
				i, e.Type, e.Field, e.BadValue, e.Detail, w.typ, w.field, w.bad, w.detail)
		}
	}
}
