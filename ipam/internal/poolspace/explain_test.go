package poolspace_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
)

func TestWhyUnavailable(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{
		Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Gateway: "10.0.0.1",
		ExcludedAddresses: []string{"10.0.0.10-10.0.0.20"},
	}
	resolved := []v1alpha1.ResolvedAddresses{{
		Address: "10.5.0.0/28", Prefix: new(int32(28)), Gateway: "10.5.0.1", Source: "vrf/v/reservation/r",
	}}
	for _, tc := range []struct{ address, field, want string }{
		{"fd00::5", "spec.addresses", "is IPv6 but the pool hands out IPv4 addresses"},
		{"10.9.9.9", "spec.addresses", "lies outside every address the pool hands out"},
		{"10.0.0.15", "spec.excludedAddresses[0]", `is excluded by spec.excludedAddresses[0] ("10.0.0.10-10.0.0.20")`},
		{"10.0.0.1", "spec.gateway", "is the pool's gateway (spec.gateway)"},
		{"10.5.0.1", "status.resolved", "is the gateway of subnet 10.5.0.0/28 (from vrf/v/reservation/r)"},
		{"10.0.0.0", "spec.prefix", "is the network address of subnet 10.0.0.0/24"},
		{"10.5.0.15", "spec.prefix", "is the broadcast address of subnet 10.5.0.0/28"},
	} {
		got, ok := poolspace.WhyUnavailable(&spec, resolved, netip.MustParseAddr(tc.address))
		if !ok || got.Field != tc.field || !strings.Contains(got.Detail, tc.want) {
			t.Errorf("WhyUnavailable(%s) = %+v, %t; want %s: %q", tc.address, got, ok, tc.field, tc.want)
		}
	}
	if got, ok := poolspace.WhyUnavailable(&spec, resolved, netip.MustParseAddr("10.0.0.5")); ok {
		t.Errorf("WhyUnavailable of an address of the pool = %+v, want none", got)
	}

	v6 := v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"fd00::/64"}, Prefix: new(int32(64))}
	if got, _ := poolspace.WhyUnavailable(&v6, nil, netip.MustParseAddr("fd00::")); !strings.Contains(got.Detail, "subnet-router anycast address of subnet fd00::/64") {
		t.Errorf("WhyUnavailable(fd00::) = %+v, want the anycast address named", got)
	}
}

func TestIdleExclusions(t *testing.T) {
	spec := v1alpha1.MetalVRFIPPoolSpec{
		NetworkRef: &v1alpha1.NetworkReference{Name: "c", Network: "nodes"}, Prefix: new(int32(24)),
		ExcludedAddresses: []string{"10.0.0.5", "10.9.9.9"},
	}
	resolved := []v1alpha1.ResolvedAddresses{{Address: "10.0.0.0/24", Prefix: new(int32(24)), Source: "packetcluster/c/nodes"}}
	errs := poolspace.IdleExclusions(&spec, resolved)
	if len(errs) != 1 || errs[0].Field != "spec.excludedAddresses[1]" || errs[0].BadValue != "10.9.9.9" {
		t.Fatalf("IdleExclusions() = %v, want spec.excludedAddresses[1] only", errs)
	}
	if errs := poolspace.IdleExclusions(&spec, nil); len(errs) != 0 {
		t.Errorf("IdleExclusions() before the sources resolved = %v, want none", errs)
	}
}
