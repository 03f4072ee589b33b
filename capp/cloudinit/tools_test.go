package cloudinit

// Tests that hand the rendered pieces to the real programs that consume
// them on a node (see test/nodetools).

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodetools"
)

// TestUserDataPassesCloudInitSchema renders each user-data the way cloud-init
// does on the node (Jinja with instance data, for the kubeadm bootstrap's
// "## template: jinja") and validates the result against cloud-init's schema.
// The network files must come out of Jinja byte for byte as rendered.
func TestUserDataPassesCloudInitSchema(t *testing.T) {
	nodetools.Require(t, false, "cloud-init")
	for _, tc := range cases {
		for name, bootstrapData := range map[string][]byte{
			"kubeadm-jinja": bootstrap(t),
			"plain":         []byte("#cloud-config\nruncmd:\n  - echo bootstrap\n"),
		} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				userData, err := UserData(bootstrapData, tc.networks, Options{}, Extra{})
				if err != nil {
					t.Fatal(err)
				}
				rendered := nodetools.CloudInitSchema(t, userData)

				files, err := Files(tc.networks, Options{})
				if err != nil {
					t.Fatal(err)
				}
				var cfg struct {
					WriteFiles []File `yaml:"write_files"`
				}
				if err := yaml.Unmarshal([]byte(rendered), &cfg); err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, f := range cfg.WriteFiles {
					got[f.Path] = f.Content
				}
				for _, f := range files {
					if got[f.Path] != f.Content {
						t.Errorf("%s after Jinja differs from what was rendered:\n%s", f.Path, got[f.Path])
					}
				}
			})
		}
	}
}

// TestScriptsPassBashAndShellcheck parses every script with bash and lints it
// with shellcheck; a warning fails the test.
func TestScriptsPassBashAndShellcheck(t *testing.T) {
	nodetools.Require(t, false, "bash", "shellcheck")
	for _, tc := range cases {
		script, err := Script(tc.networks, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]string{"network": script, "verify": verifyScriptOf(tc.networks, identity)} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				nodetools.Run(t, s, "bash", "-n")
				nodetools.Run(t, s, "shellcheck", "--shell=bash", "--severity=style", "-")
			})
		}
	}
}

// TestStanzasParseWithIfupdown reads the stanzas with Debian's ifupdown and
// checks what ifup would do, without doing it.
func TestStanzasParseWithIfupdown(t *testing.T) {
	nodetools.Require(t, false, "ifquery", "ifup")
	networks := cases[1].networks
	file := nodetools.WriteTemp(t, "interfaces", stanzasOf(networks, identity))
	list := nodetools.Run(t, "", "ifquery", "--interfaces", file, "--list", "--allow", "auto")
	if got := strings.Fields(list); strings.Join(got, " ") != "lo eth1 bond0.1000 eth1.2000" {
		t.Errorf("ifquery --list = %q, want eth1 and the two VLAN sub-interfaces (and lo, always listed)", got)
	}
	query := nodetools.Run(t, "", "ifquery", "--interfaces", file, "bond0.1000")
	for _, want := range []string{"address: 10.60.0.5", "gateway: 10.60.0.1", "netmask: 255.255.255.0", "address: fd00:60::5", "gateway: fd00:60::1",
		"dns-nameservers: 10.60.0.53 fd00:60::53", "dns-nameservers: fd00:60::53"} {
		if !strings.Contains(query, want) {
			t.Errorf("ifquery bond0.1000 lacks %q:\n%s", want, query)
		}
	}
	plan := nodetools.Run(t, "", "ifup", "--no-act", "--interfaces", file, "--state-dir", t.TempDir(), "eth1", "bond0.1000", "eth1.2000")
	for _, want := range []string{
		"ip link set dev eth1 up",
		"ip link add link bond0 name bond0.1000 type vlan id 1000",
		"ip addr add 10.60.0.5/255.255.255.0",
		"ip route add default via 10.60.0.1 metric 1000 dev bond0.1000",
		"ip -4 route replace 192.168.0.0/16 via 10.60.0.1 dev bond0.1000",
		"ip -6 addr add fd00:60::5/64",
		"ip -6 route replace default via fd00:60::1 metric 1001 dev bond0.1000",
		"ip link add link eth1 name eth1.2000 type vlan id 2000",
		"ip -4 route replace 10.80.0.0/16 dev eth1.2000",
	} {
		if !strings.Contains(strings.Join(strings.Fields(plan), " "), want) {
			t.Errorf("ifup --no-act would not run %q:\n%s", want, plan)
		}
	}
}

// netns is a network namespace the test creates, holding a veth pair per
// VLAN sub-interface, each end named like the sub-interface: the kernel
// here cannot create 802.1Q devices, but everything above the link works.
func netns(t *testing.T, interfaces ...string) string {
	t.Helper()
	name := fmt.Sprintf("capp-test-%d-%s", os.Getpid(), strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"))
	name = name[:min(len(name), 60)]
	nodetools.Run(t, "", "ip", "netns", "add", name)
	t.Cleanup(func() { _, _ = nodetools.RunErr("", "ip", "netns", "delete", name) })
	for i, iface := range interfaces {
		peer := fmt.Sprintf("peer%d", i)
		nodetools.Run(t, "", "ip", "-n", name, "link", "add", iface, "type", "veth", "peer", "name", peer)
		nodetools.Run(t, "", "ip", "-n", name, "link", "set", peer, "up")
	}
	nodetools.Run(t, "", "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// TestStanzasApplyInANetworkNamespace brings the VLAN sub-interfaces up with
// the real ifup from the rendered stanzas, in a network namespace, and checks
// the addresses and routes with the rendered verification; a second ifup
// changes nothing.
func TestStanzasApplyInANetworkNamespace(t *testing.T) {
	nodetools.Require(t, true, "ip", "ifup", "bash")
	networks := cases[1].networks
	ns := netns(t, "bond0.1000", "eth1.2000")
	file := nodetools.WriteTemp(t, "interfaces", stanzasOf(networks, identity))
	verify := verifyScriptOf(networks, identity)

	// Before anything is configured, verification fails: it can tell.
	if out, err := nodetools.RunErr(verify, "ip", "netns", "exec", ns, "bash"); err == nil {
		t.Fatalf("verification passed on unconfigured interfaces:\n%s", out)
	}

	state := t.TempDir()
	ifup := func() {
		nodetools.Run(t, "", "ip", "netns", "exec", ns, "ifup", "--no-scripts", "--interfaces", file, "--state-dir", state, "bond0.1000", "eth1.2000")
	}
	ifup()
	out := nodetools.Run(t, verify, "ip", "netns", "exec", ns, "bash")
	if n := strings.Count(out, "ok: "); n != 8 {
		t.Errorf("%d checks passed, want 8 (3 addresses, 2 gateways, 3 routes):\n%s", n, out)
	}
	snapshot := func() string {
		return nodetools.Run(t, "", "ip", "-n", ns, "-o", "addr", "show", "scope", "global") +
			nodetools.Run(t, "", "ip", "-n", ns, "-4", "route", "show") +
			nodetools.Run(t, "", "ip", "-n", ns, "-6", "route", "show")
	}
	before := snapshot()
	for _, want := range []string{
		"inet 10.60.0.5/24", "inet6 fd00:60::5/64", "inet 10.70.0.9/27",
		"default via 10.60.0.1 dev bond0.1000 metric 1000",
		"192.168.0.0/16 via 10.60.0.1 dev bond0.1000",
		"10.80.0.0/16 dev eth1.2000",
		"fd00:100::/56 via fd00:60::1 dev bond0.1000",
		"default via fd00:60::1 dev bond0.1000 metric 1001",
	} {
		if !strings.Contains(before, want) {
			t.Errorf("namespace lacks %q:\n%s", want, before)
		}
	}

	ifup()
	if after := snapshot(); after != before {
		t.Errorf("a second ifup changed the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Removing a route makes verification fail again.
	nodetools.Run(t, "", "ip", "-n", ns, "route", "del", "192.168.0.0/16")
	if out, err := nodetools.RunErr(verify, "ip", "netns", "exec", ns, "bash"); err == nil || !strings.Contains(out, "missing: route to 192.168.0.0/16 via 10.60.0.1") {
		t.Errorf("verification did not notice the missing route (err %v):\n%s", err, out)
	}
}

// TestResolvConfPutsNameserversFirstOnce runs the script's resolv.conf
// writer twice on a file like Debian's: the networks' nameservers come
// first, the file's other lines and nameservers stay after them, each once,
// and a second run writes the same file.
func TestResolvConfPutsNameserversFirstOnce(t *testing.T) {
	nodetools.Require(t, false, "bash", "awk")
	file := nodetools.WriteTemp(t, "resolv.conf", "search example.net\nnameserver 147.75.207.207\nnameserver 10.60.0.53\n")
	script := execute("resolv-conf-functions", view{}) + "\nwrite_resolv_conf \"$1\" 10.60.0.53 fd00:60::53\n"
	want := "# Nameservers of the VLAN networks, written by the network script of the Cluster API Equinix Metal provider.\n" +
		"nameserver 10.60.0.53\nnameserver fd00:60::53\nsearch example.net\nnameserver 147.75.207.207\n"
	for run := 1; run <= 2; run++ {
		nodetools.Run(t, "", "bash", "-c", script, "write", file)
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("run %d wrote\n%s\nwant\n%s", run, got, want)
		}
	}
}

// TestNodeSoftwareScriptPassesBashAndShellcheck parses and lints the node
// software script as it is written onto the node.
func TestNodeSoftwareScriptPassesBashAndShellcheck(t *testing.T) {
	nodetools.Require(t, false, "bash", "shellcheck")
	extra, err := NodeSoftwareInstall(NodeSoftware{KubernetesVersion: "v1.33.1"})
	if err != nil {
		t.Fatal(err)
	}
	script := extra.Files[0].Content
	nodetools.Run(t, script, "bash", "-n")
	nodetools.Run(t, script, "shellcheck", "--shell=bash", "--severity=style", "-")
}

// TestUserDataWithBindingAndSoftwarePassesCloudInitSchema validates the
// kubeadm bootstrap with everything a CPEM control-plane node with
// nodeSoftware Install adds, after cloud-init's Jinja pass: the added files
// come out byte for byte.
func TestUserDataWithBindingAndSoftwarePassesCloudInitSchema(t *testing.T) {
	nodetools.Require(t, false, "cloud-init")
	binding, err := EndpointBinding(netip.MustParseAddr("147.75.1.2"), true)
	if err != nil {
		t.Fatal(err)
	}
	software, err := NodeSoftwareInstall(NodeSoftware{KubernetesVersion: "v1.33.1"})
	if err != nil {
		t.Fatal(err)
	}
	extra := binding.Join(software)
	userData, err := UserData(bootstrap(t), cases[0].networks, Options{}, extra)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		WriteFiles []File `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(nodetools.CloudInitSchema(t, userData)), &cfg); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range cfg.WriteFiles {
		got[f.Path] = f.Content
	}
	for _, f := range extra.Files {
		if got[f.Path] != f.Content {
			t.Errorf("%s after Jinja differs from what was rendered:\n%s", f.Path, got[f.Path])
		}
	}
}

// TestEndpointBindingInANetworkNamespace runs the binding's command in a
// fresh network namespace, twice (cloud-init may run it again), and then
// ifup of its stanza after the address is gone, as at a reboot: each time
// the endpoint, and only it, is on lo. The namespace is gone afterwards.
func TestEndpointBindingInANetworkNamespace(t *testing.T) {
	nodetools.Require(t, true, "ip", "ifup", "bash")
	for _, tc := range []struct{ addr, want string }{
		{"147.75.1.2", "inet 147.75.1.2/32 "},
		{"2604:1380::5", "inet6 2604:1380::5/128 "},
	} {
		var ns string
		t.Run(tc.addr, func(t *testing.T) {
			ns = netns(t)
			extra, err := EndpointBinding(netip.MustParseAddr(tc.addr), true)
			if err != nil {
				t.Fatal(err)
			}
			global := func() string {
				return nodetools.Run(t, "", "ip", "-n", ns, "-o", "addr", "show", "dev", "lo", "scope", "global")
			}
			if got := global(); got != "" {
				t.Fatalf("a fresh namespace has global addresses on lo:\n%s", got)
			}
			for run := 1; run <= 2; run++ {
				for _, c := range extra.First {
					nodetools.Run(t, "", "ip", append([]string{"netns", "exec", ns}, c...)...)
				}
				if got := global(); strings.Count(got, "\n") != 1 || !strings.Contains(got, tc.want) {
					t.Fatalf("run %d: lo has\n%s\nwant only %q", run, got, tc.want)
				}
			}

			nodetools.Run(t, "", "ip", "-n", ns, "addr", "del", netip.PrefixFrom(netip.MustParseAddr(tc.addr), netip.MustParseAddr(tc.addr).BitLen()).String(), "dev", "lo")
			file := nodetools.WriteTemp(t, "interfaces", "auto lo\niface lo inet loopback\n\n"+extra.Files[0].Content)
			ifaces := strings.Fields(nodetools.Run(t, "", "ifquery", "--interfaces", file, "--list", "--allow", "auto"))
			nodetools.Run(t, "", "ip", append([]string{"netns", "exec", ns, "ifup", "--no-scripts", "--interfaces", file, "--state-dir", t.TempDir()}, ifaces...)...)
			if got := global(); strings.Count(got, "\n") != 1 || !strings.Contains(got, tc.want) {
				t.Fatalf("after ifup %v, lo has\n%s\nwant only %q", ifaces, got, tc.want)
			}
		})
		if out := nodetools.Run(t, "", "ip", "netns", "list"); ns == "" || strings.Contains(out, ns) {
			t.Errorf("namespace %q is left behind:\n%s", ns, out)
		}
	}
}
