package controllers

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

func TestMaskBits(t *testing.T) {
	for mask, want := range map[string]int{"255.255.255.248": 29, "255.255.255.0": 24, "0.0.0.0": 0, "255.255.255.255": 32} {
		if got, err := maskBits(mask); err != nil || got != want {
			t.Errorf("maskBits(%s) = %d, %v; want %d", mask, got, err, want)
		}
	}
	for _, bad := range []string{"255.0.255.0", "255.255.255.1", "ffff::", "24", ""} {
		if _, err := maskBits(bad); err == nil {
			t.Errorf("maskBits(%q) accepted", bad)
		}
	}
}

func TestPrefixLength(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")
	for _, tc := range []struct {
		name    string
		addr    netip.Addr
		prefix  *int32
		netmask string
		want    int
		err     string
	}{
		{"prefix only", v4, ptr.To[int32](24), "", 24, ""},
		{"netmask only", v4, nil, "255.255.255.248", 29, ""},
		{"both agree", v4, ptr.To[int32](29), "255.255.255.248", 29, ""},
		{"both disagree", v4, ptr.To[int32](24), "255.255.255.248", 0, "does not match the network's netmask 255.255.255.248 (/29)"},
		{"neither", v4, nil, "", 0, "has no prefix length"},
		{"IPv4 prefix too long", v4, ptr.To[int32](33), "", 0, "out of range"},
		{"IPv6 prefix", v6, ptr.To[int32](64), "", 64, ""},
		{"netmask on IPv6", v6, ptr.To[int32](64), "255.255.255.0", 0, "address is IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := prefixLength(tc.addr, tc.prefix, tc.netmask)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("prefixLength = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestMachineNetworks(t *testing.T) {
	pm := &infrav1.PacketMachine{}
	pm.Name = "m"
	pm.Spec.Ports = []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{
		{VXLAN: 1000, AddressFromPool: poolReference(), AddressType: infrav1.AddressTypeInternal, Netmask: "255.255.255.0",
			Routes: []infrav1.RouteSpec{{Destination: "192.168.0.0/16"}}},
		{VXLAN: 1001, Address: "10.1.0.5", Netmask: "255.255.255.0", Gateway: "10.1.0.1"},
	}}}
	address := func(ip string, prefix *int32, gateway string) map[string]*ipamv1.IPAddress {
		a := &ipamv1.IPAddress{Spec: ipamv1.IPAddressSpec{Address: ip, Prefix: prefix, Gateway: gateway}}
		a.Name = "m-port-0-network-0"
		return map[string]*ipamv1.IPAddress{"m-port-0-network-0": a}
	}

	got, err := machineNetworks(pm, address("10.0.0.5", nil, "10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.render) != 2 || got.render[0].Address != netip.MustParsePrefix("10.0.0.5/24") ||
		got.render[1].Address != netip.MustParsePrefix("10.1.0.5/24") || got.render[1].Gateway != netip.MustParseAddr("10.1.0.1") {
		t.Errorf("networks = %+v", got.render)
	}
	if !got.render[0].Internal || got.render[1].Internal {
		t.Errorf("Internal marks wrong: %+v", got.render)
	}
	if len(got.addresses) != 1 || got.addresses[0].Address != "10.0.0.5" {
		t.Errorf("addresses = %+v, want only the Internal one", got.addresses)
	}
	if s := got.ports[0].Networks; s[0].ClaimName != "m-port-0-network-0" || s[1].ClaimName != "" || s[0].Prefix != 24 {
		t.Errorf("status = %+v", s)
	}

	for _, tc := range []struct {
		name  string
		bound map[string]*ipamv1.IPAddress
		err   string
	}{
		{"prefix disagreeing with the netmask", address("10.0.0.5", ptr.To[int32](16), ""), "ports[0].networks[0]: IPAddress m-port-0-network-0 10.0.0.5: prefix length /16 does not match"},
		{"not an address", address("10.0.0.500", ptr.To[int32](24), ""), `"10.0.0.500" is not an IP address`},
		{"the static address again", address("10.1.0.5", ptr.To[int32](24), ""), "address 10.1.0.5 is already used by network 0"},
		{"gateway off the subnet", address("10.0.0.5", ptr.To[int32](24), "10.9.0.1"), "gateway 10.9.0.1 is outside the subnet 10.0.0.0/24"},
		{"IPv6 on a network with a netmask", address("fd00::5", ptr.To[int32](64), ""), "netmask 255.255.255.0 is for IPv4"},
		{"unbound", nil, "IPAddressClaim m-port-0-network-0 is not bound"},
		{"the network address", address("10.0.0.0", ptr.To[int32](24), ""),
			"spec.ports[0].networks[0]: IPAddress m-port-0-network-0 10.0.0.0/24 is the network address of its subnet 10.0.0.0/24"},
		{"the broadcast address", address("10.0.0.255", ptr.To[int32](24), ""), "10.0.0.255/24 is the broadcast address of its subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := machineNetworks(pm, tc.bound)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// A port's vxlan is one sub-interface: a second address of one family on it
// is refused naming both networks, while an IPv4 and an IPv6 pair, and the
// same vxlan on another port, are not.
func TestMachineNetworksOneAddressPerFamilyAndVXLAN(t *testing.T) {
	pm := &infrav1.PacketMachine{}
	pm.Name = "m"
	pm.Spec.Ports = []infrav1.Port{
		{Name: "bond0", Networks: []infrav1.Network{
			{VXLAN: 100, Address: "10.0.0.5/24"},
			{VXLAN: 100, Address: "fd00::5/64"},
			{VXLAN: 100, AddressFromPool: poolReference()},
		}},
		{Name: "eth1", Networks: []infrav1.Network{{VXLAN: 100, Address: "10.1.0.5/24"}}},
	}
	bound := map[string]*ipamv1.IPAddress{"m-port-0-network-2": {Spec: ipamv1.IPAddressSpec{Address: "10.0.1.7", Prefix: ptr.To[int32](24)}}}
	_, err := machineNetworks(pm, bound)
	want := "spec.ports[0].networks[2]: address 10.0.1.7/24 is the second IPv4 address on bond0.100, after the one of spec.ports[0].networks[0]: a sub-interface holds one address of each IP family"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q alone", err, want)
	}

	pm.Spec.Ports[0].Networks = pm.Spec.Ports[0].Networks[:2]
	if _, err := machineNetworks(pm, nil); err != nil {
		t.Errorf("a dual-stack pair on one vxlan, and the vxlan again on another port: %v", err)
	}
}

func TestMachineNetworksNameservers(t *testing.T) {
	pm := &infrav1.PacketMachine{}
	pm.Name = "m"
	pm.Spec.Ports = []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{
		{VXLAN: 1000, AddressFromPool: poolReference()},
		{VXLAN: 1001, AddressFromPool: poolReference(), Nameservers: []string{"10.1.0.53"}},
		{VXLAN: 1002, Address: "10.2.0.5/24", Nameservers: []string{"10.2.0.53", "fd00::53"}},
	}}}
	bound := func(annotation string) map[string]*ipamv1.IPAddress {
		m := map[string]*ipamv1.IPAddress{}
		for j, ip := range []string{"10.0.0.5", "10.1.0.5"} {
			a := &ipamv1.IPAddress{Spec: ipamv1.IPAddressSpec{Address: ip, Prefix: ptr.To[int32](24)}}
			a.Name = ClaimName("m", 0, j)
			a.Annotations = map[string]string{infrav1.DNSServersAnnotation: annotation}
			m[a.Name] = a
		}
		return m
	}
	got, err := machineNetworks(pm, bound("10.0.0.53,10.0.0.54"))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]netip.Addr{
		{netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("10.0.0.54")}, // the pool's, from the IPAddress
		{netip.MustParseAddr("10.1.0.53")},                                   // the spec's, over the pool's
		{netip.MustParseAddr("10.2.0.53"), netip.MustParseAddr("fd00::53")},  // a static address's
	}
	for i, n := range got.render {
		if !slices.Equal(n.Nameservers, want[i]) {
			t.Errorf("network %d nameservers = %v, want %v", i, n.Nameservers, want[i])
		}
	}
	_, err = machineNetworks(pm, bound("10.0.0.53,dns"))
	if err == nil || !strings.Contains(err.Error(), `spec.ports[0].networks[0]: IPAddress m-port-0-network-0: annotation metal-vrf.ipam.cluster.x-k8s.io/dns-servers: "dns" is not an IP address`) {
		t.Errorf("a bad annotation gave %v", err)
	}
}
