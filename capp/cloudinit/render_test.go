package cloudinit

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// cases are the network layouts every rendering test runs over.
var cases = []struct {
	name     string
	networks []Network
}{
	{
		name: "ipv4-routes",
		networks: []Network{{
			Port: "bond0", VLAN: 1000, Internal: true,
			Address: netip.MustParsePrefix("10.60.0.5/24"), Gateway: netip.MustParseAddr("10.60.0.1"),
			Routes: []Route{
				{Destination: netip.MustParsePrefix("192.168.0.0/16")},
				{Destination: netip.MustParsePrefix("172.16.0.0/12"), Gateway: netip.MustParseAddr("10.60.0.254")},
			},
		}},
	},
	{
		name: "dual-stack-two-ports",
		networks: []Network{
			{
				Port: "bond0", VLAN: 1000, Internal: true,
				Address: netip.MustParsePrefix("10.60.0.5/24"), Gateway: netip.MustParseAddr("10.60.0.1"),
				Routes:      []Route{{Destination: netip.MustParsePrefix("192.168.0.0/16")}},
				Nameservers: []netip.Addr{netip.MustParseAddr("10.60.0.53"), netip.MustParseAddr("fd00:60::53")},
			},
			{
				Port: "bond0", VLAN: 1000, Internal: true,
				Address: netip.MustParsePrefix("fd00:60::5/64"), Gateway: netip.MustParseAddr("fd00:60::1"),
				Routes:      []Route{{Destination: netip.MustParsePrefix("fd00:100::/56")}},
				Nameservers: []netip.Addr{netip.MustParseAddr("fd00:60::53")},
			},
			{
				Port: "eth1", VLAN: 2000,
				Address: netip.MustParsePrefix("10.70.0.9/27"),
				Routes:  []Route{{Destination: netip.MustParsePrefix("10.80.0.0/16")}},
			},
		},
	},
	{
		// Hybrid unbonded: bond0 keeps eth0 and the device's Layer 3
		// addresses; eth1, out of the bond, carries two VLANs.
		name: "hybrid-unbonded",
		networks: []Network{
			{
				Port: "bond0", VLAN: 1000, Internal: true,
				Address: netip.MustParsePrefix("10.60.0.5/24"), Gateway: netip.MustParseAddr("10.60.0.1"),
			},
			{
				Port: "eth1", VLAN: 2000,
				Address: netip.MustParsePrefix("10.70.0.9/27"), Gateway: netip.MustParseAddr("10.70.0.1"),
				Routes: []Route{{Destination: netip.MustParsePrefix("10.80.0.0/16")}},
			},
			{
				Port: "eth1", VLAN: 2001,
				Address: netip.MustParsePrefix("fd00:71::9/64"),
			},
		},
	},
}

func identity(port string) string { return port }

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", name, path, got)
	}
}

func bootstrap(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "bootstrap-kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestGolden(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, tc.name+".interfaces", stanzasOf(tc.networks, identity))
			userData, err := UserData(bootstrap(t), tc.networks, Options{MetadataURL: "http://169.254.169.254/metadata"}, Extra{})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".user-data", string(userData))
		})
	}
}

func TestStanzasCarryEveryAddressGatewayAndRoute(t *testing.T) {
	stanzas := stanzasOf(cases[1].networks, identity)
	for _, want := range []string{
		"auto bond0.1000\niface bond0.1000 inet static\n    address 10.60.0.5/24\n    gateway 10.60.0.1\n    metric 1000\n",
		"    up ip -4 route replace 192.168.0.0/16 via 10.60.0.1 dev bond0.1000\n",
		"iface bond0.1000 inet6 static\n    address fd00:60::5/64\n    gateway fd00:60::1\n    metric 1001\n",
		"    up ip -6 route replace fd00:100::/56 via fd00:60::1 dev bond0.1000\n",
		"auto eth1.2000\niface eth1.2000 inet static\n    address 10.70.0.9/27\n",
		// No gateway on the network: an on-link route.
		"    up ip -4 route replace 10.80.0.0/16 dev eth1.2000\n",
	} {
		if !strings.Contains(stanzas, want) {
			t.Errorf("stanzas lack %q:\n%s", want, stanzas)
		}
	}
	if n := strings.Count(stanzas, "auto bond0.1000\n"); n != 1 {
		t.Errorf("bond0.1000 has %d auto lines, want 1", n)
	}
}

func TestScriptNamesPortsByTheirResolvedDevice(t *testing.T) {
	script, err := Script(cases[1].networks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`metadata_url='` + DefaultMetadataURL + `'`,
		`port_0="$(device_of bond0)"`,
		`port_1="$(device_of eth1)"`,
		"iface ${port_0}.1000 inet static",
		"auto ${port_1}.2000",
		`ifup "${port_0}.1000"`,
		`ifup "${port_1}.2000"`,
		`check_address "${port_1}.2000" 10.70.0.9/27`,
		`check_route -4 default '10.60.0.1' "${port_0}.1000"`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	if n := strings.Count(script, `ifup "${port_0}.1000"`); n != 1 {
		t.Errorf("bond0.1000 is brought up %d times, want once", n)
	}
}

func TestNodeIPs(t *testing.T) {
	v4 := Network{Internal: true, Address: netip.MustParsePrefix("10.0.0.5/24")}
	v4b := Network{Internal: true, Address: netip.MustParsePrefix("10.0.1.5/24")}
	v6 := Network{Internal: true, Address: netip.MustParsePrefix("fd00::5/64")}
	external := Network{Address: netip.MustParsePrefix("10.0.2.5/24")}
	for _, tc := range []struct {
		name     string
		networks []Network
		want     string
	}{
		{"none internal", []Network{external}, ""},
		{"first internal of a family", []Network{external, v4, v4b}, "10.0.0.5"},
		{"dual stack, IPv4 first", []Network{v6, v4}, "10.0.0.5,fd00::5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := joinAddrs(NodeIPs(tc.networks), ","); got != tc.want {
				t.Errorf("NodeIPs = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	good := func() Network {
		return Network{
			Port: "bond0", VLAN: 1000,
			Address: netip.MustParsePrefix("10.60.0.5/24"), Gateway: netip.MustParseAddr("10.60.0.1"),
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*Network)
		want   string
	}{
		{"port name with a space", func(n *Network) { n.Port = "bond 0" }, "is not an interface name"},
		{"port name that could inject shell", func(n *Network) { n.Port = "a$(reboot)" }, "is not an interface name"},
		{"interface name too long", func(n *Network) { n.Port = "enp1s0f0np0" }, "longer than 15 characters"},
		{"VLAN out of range", func(n *Network) { n.VLAN = 4095 }, "outside 1-4094"},
		{"no address", func(n *Network) { n.Address = netip.Prefix{} }, "no address"},
		{"gateway of another family", func(n *Network) { n.Gateway = netip.MustParseAddr("fd00::1") }, "different IP families"},
		{"gateway outside the subnet", func(n *Network) { n.Gateway = netip.MustParseAddr("10.61.0.1") }, "outside the subnet 10.60.0.0/24"},
		{"gateway is the address", func(n *Network) { n.Gateway = netip.MustParseAddr("10.60.0.5") }, "node's own address"},
		{"route of another family", func(n *Network) {
			n.Routes = []Route{{Destination: netip.MustParsePrefix("fd01::/64")}}
		}, "not of the address's IP family"},
		{"route with host bits", func(n *Network) {
			n.Routes = []Route{{Destination: netip.MustParsePrefix("192.168.1.0/16")}}
		}, "host bits set"},
		{"route gateway off the subnet", func(n *Network) {
			n.Routes = []Route{{Destination: netip.MustParsePrefix("192.168.0.0/16"), Gateway: netip.MustParseAddr("10.9.9.9")}}
		}, "not reachable on the subnet"},
		{"four nameservers", func(n *Network) {
			for i := range 4 {
				n.Nameservers = append(n.Nameservers, netip.AddrFrom4([4]byte{10, 60, 0, byte(50 + i)}))
			}
		}, "4 nameservers, more than the 3 resolv.conf uses"},
		{"nameserver twice", func(n *Network) {
			n.Nameservers = []netip.Addr{netip.MustParseAddr("10.60.0.53"), netip.MustParseAddr("10.60.0.53")}
		}, "nameserver 10.60.0.53 is listed twice"},
		{"unspecified nameserver", func(n *Network) { n.Nameservers = []netip.Addr{netip.MustParseAddr("0.0.0.0")} }, "not the plain address of a DNS server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := good()
			tc.change(&n)
			err := Validate([]Network{n})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
			if _, err := Script([]Network{n}, Options{}); err == nil {
				t.Error("Script rendered an invalid network")
			}
		})
	}
	if err := Validate([]Network{good()}); err != nil {
		t.Fatalf("valid network rejected: %v", err)
	}
	dup := good()
	dup.VLAN = 1001
	if err := Validate([]Network{good(), dup}); err == nil || !strings.Contains(err.Error(), "already used by network 0") {
		t.Errorf("an address used twice was not rejected: %v", err)
	}
}

func TestScriptRejectsAMetadataURLThatBreaksQuoting(t *testing.T) {
	if _, err := Script(cases[0].networks, Options{MetadataURL: "http://x/'; reboot; '"}); err == nil {
		t.Fatal("a quote in the metadata URL was accepted")
	}
}

func TestScriptTakesNICsOutOfTheBondBeforeUsingThem(t *testing.T) {
	script, err := Script(cases[2].networks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// In this order: the ports are found, eth1 leaves the bond in the
	// ifupdown configuration, the stanzas are written, eth1 leaves the bond
	// at once, then eth1 and the VLAN sub-interfaces come up.
	steps := []string{
		`port_1="$(device_of eth1)"`,
		`remove_from_bond_config "${port_1}" /etc/network/interfaces /etc/network/interfaces.d/* ||`,
		`mv "$stanzas.new" "$stanzas"`,
		`release_from_bond "${port_1}" || fail "eth1 (${port_1}): cannot take it out of its bond"`,
		`ifup "${port_1}" || fail "ifup ${port_1}"`,
		`ifup "${port_0}.1000"`,
		`ifup "${port_1}.2000"`,
		`ifup "${port_1}.2001"`,
	}
	at := 0
	for _, step := range steps {
		i := strings.Index(script[at:], step)
		if i < 0 {
			t.Fatalf("script lacks %q after what precedes it in %q", step, steps)
		}
		at += i + len(step)
	}
	for _, unwanted := range []string{`remove_from_bond_config "${port_0}"`, `release_from_bond "${port_0}"`, `ifup "${port_0}" `} {
		if strings.Contains(script, unwanted) {
			t.Errorf("bond0 is treated as a NIC: the script has %q", unwanted)
		}
	}
	if n := strings.Count(script, "\nauto ${port_1}\niface ${port_1} inet manual\n"); n != 1 {
		t.Errorf("eth1 has %d stanzas of its own, want 1", n)
	}

	// A machine on bonds only leaves them alone.
	bonded, err := Script(cases[0].networks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, unwanted := range []string{"remove_from_bond_config", "release_from_bond", "inet manual"} {
		if strings.Contains(bonded, unwanted) {
			t.Errorf("a bonded-only script has %q", unwanted)
		}
	}
}

func TestIsNIC(t *testing.T) {
	for port, want := range map[string]bool{
		"bond0": false, "bond1": false, "bond12": false,
		"eth0": true, "eth1": true, "bond": true, "bond0a": true, "bondx": true,
	} {
		if got := isNIC(port); got != want {
			t.Errorf("isNIC(%q) = %v, want %v", port, got, want)
		}
	}
}

// stanzasOf renders the ifupdown stanzas of networks (the content of
// StanzasPath): one bringing up each port that is a NIC on its own, then
// the VLAN sub-interfaces. It names each port's local device with
// device(port).
func stanzasOf(networks []Network, device func(port string) string) string {
	return execute("stanzas", newView(networks, device))
}

// verifyScriptOf renders a standalone bash script that exits non-zero unless
// every address and route of networks is in place, naming each port's local
// device with device(port). The network script runs the same checks.
func verifyScriptOf(networks []Network, device func(port string) string) string {
	return execute("verify-script", newView(networks, device))
}
