package cloudinit

// Tests of the parts of the network script that take a NIC out of its bond
// and report a failure's reason, run with bash and the tools a node has. The
// kernel here has no bonding module: the bond itself cannot be built, so the
// ifupdown configuration is checked on files and the NIC in a namespace.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodetools"
)

// equinixInterfaces is /etc/network/interfaces as an Equinix Metal Debian or
// Ubuntu image has it: both NICs in bond0, named from the bond and from
// their own stanzas, and the device's Layer 3 addresses on bond0.
const equinixInterfaces = `auto lo
iface lo inet loopback

auto eth0
iface eth0 inet manual
    bond-master bond0

auto eth1
iface eth1 inet manual
    pre-up sleep 4
    bond-master bond0

auto bond0
iface bond0 inet static
    address 147.75.80.3/31
    gateway 147.75.80.2
    bond-downdelay 200
    bond-miimon 100
    bond-mode 4
    bond-slaves eth0 eth1
    dns-nameservers 147.75.207.207

iface bond0 inet6 static
    address 2604:1380:1:2::3/127
    gateway 2604:1380:1:2::2

auto bond0:0
iface bond0:0 inet static
    address 10.99.0.3/31
    post-up route add -net 10.0.0.0/8 gw 10.99.0.2
`

// equinixInterfacesWithoutEth1 is equinixInterfaces once eth1 is out of the
// bond: only the bond-slaves word and eth1's bond-master line are gone.
var equinixInterfacesWithoutEth1 = strings.Replace(strings.Replace(equinixInterfaces,
	"    pre-up sleep 4\n    bond-master bond0\n", "    pre-up sleep 4\n", 1),
	"bond-slaves eth0 eth1\n", "bond-slaves eth0\n", 1)

// removeFromBondConfig runs the script's remove_from_bond_config on files
// and returns its output.
func removeFromBondConfig(t *testing.T, device string, files ...string) string {
	t.Helper()
	functions := nodetools.WriteTemp(t, "functions.sh", execute("unbond-functions", view{}))
	args := append([]string{"-euo", "pipefail", "-c", `source "$0"; remove_from_bond_config "$@"`, functions, device}, files...)
	return nodetools.Run(t, "", "bash", args...)
}

func TestRemoveFromBondConfig(t *testing.T) {
	nodetools.Require(t, false, "bash", "awk", "cmp")
	for _, tc := range []struct {
		name, device, in, want string
	}{
		{"an Equinix Metal image", "eth1", equinixInterfaces, equinixInterfacesWithoutEth1},
		{"slaves named by the bond only", "eth1",
			"auto bond0\niface bond0 inet static\n\taddress 147.75.80.3/31\n\tbond-slaves eth0 eth1\n",
			"auto bond0\niface bond0 inet static\n\taddress 147.75.80.3/31\n\tbond-slaves eth0\n"},
		{"the first slave, by its own name", "enp1s0f0",
			"iface bond0 inet manual\n  bond-slaves enp1s0f0 enp1s0f1\n",
			"iface bond0 inet manual\n  bond-slaves enp1s0f1\n"},
		{"slaves named by their stanzas only", "eth1",
			"auto eth1\niface eth1 inet manual\n    bond-master bond0\n    bond-primary eth1\nauto bond0\niface bond0 inet manual\n    bond-slaves none\n    bond-mode 4\n",
			"auto eth1\niface eth1 inet manual\nauto bond0\niface bond0 inet manual\n    bond-slaves none\n    bond-mode 4\n"},
		{"the last slave", "eth1",
			"iface bond0 inet manual\n    bond-slaves eth1\n",
			"iface bond0 inet manual\n    bond-slaves none\n"},
		{"names that only start alike", "eth1",
			"auto eth10\niface eth10 inet manual\n    bond-master bond0\niface bond0 inet manual\n    bond-slaves eth10 eth11\n",
			"auto eth10\niface eth10 inet manual\n    bond-master bond0\niface bond0 inet manual\n    bond-slaves eth10 eth11\n"},
		{"an option after another stanza keyword", "eth1",
			"iface eth1 inet manual\nauto bond0\n    bond-mode 4\n",
			"iface eth1 inet manual\nauto bond0\n    bond-mode 4\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "interfaces")
			if err := os.WriteFile(file, []byte(tc.in), 0o600); err != nil {
				t.Fatal(err)
			}
			removeFromBondConfig(t, tc.device, file, filepath.Join(dir, "absent"))
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			info, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != 0o600 {
				t.Errorf("permissions %v, want the file's own 0600", info.Mode().Perm())
			}

			// Again: nothing to do, nothing written, nothing left behind.
			past := time.Now().Add(-time.Hour).Truncate(time.Second)
			if err := os.Chtimes(file, past, past); err != nil {
				t.Fatal(err)
			}
			if out := removeFromBondConfig(t, tc.device, file); out != "" {
				t.Errorf("the second run reported a change: %s", out)
			}
			again, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if info, err := os.Stat(file); err != nil || !info.ModTime().Equal(past) || string(again) != tc.want {
				t.Errorf("the second run rewrote the file (err %v)", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("files left in %s: %v", dir, entries)
			}
		})
	}
}

// TestUnbondedConfigurationParsesWithIfupdown applies remove_from_bond_config
// to an Equinix Metal image's interfaces file that sources the rendered
// stanzas, and asks ifupdown what the node brings up at its next boot: bond0
// on eth0 alone with its addresses, eth1 plain, and the VLANs on both.
func TestUnbondedConfigurationParsesWithIfupdown(t *testing.T) {
	nodetools.Require(t, false, "bash", "awk", "cmp", "ifquery", "ifup")
	networks := cases[2].networks
	dir := t.TempDir()
	stanzas := filepath.Join(dir, "interfaces.d", "capp-vlans")
	if err := os.Mkdir(filepath.Dir(stanzas), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stanzas, []byte(stanzasOf(networks, identity)), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "interfaces")
	if err := os.WriteFile(file, []byte(equinixInterfaces+"\nsource "+filepath.Dir(stanzas)+"/*\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The stanzas file is among the files the script hands over.
	removeFromBondConfig(t, "eth1", file, stanzas)

	list := nodetools.Run(t, "", "ifquery", "--interfaces", file, "--list", "--allow", "auto")
	if got := strings.Join(strings.Fields(list), " "); got != "lo eth0 eth1 bond0 bond0:0 bond0.1000 eth1.2000 eth1.2001" {
		t.Errorf("ifquery --list = %q", got)
	}
	bond := nodetools.Run(t, "", "ifquery", "--interfaces", file, "bond0")
	for _, want := range []string{"bond-slaves: eth0\n", "address: 147.75.80.3", "address: 2604:1380:1:2::3"} {
		if !strings.Contains(bond, want) {
			t.Errorf("ifquery bond0 lacks %q:\n%s", want, bond)
		}
	}
	if nic := nodetools.Run(t, "", "ifquery", "--interfaces", file, "eth1"); strings.Contains(nic, "bond") {
		t.Errorf("eth1 is still configured as a bond member:\n%s", nic)
	}
	plan := strings.Join(strings.Fields(nodetools.Run(t, "", "ifup", "--no-act", "--interfaces", file, "--state-dir", t.TempDir(), "-a")), " ")
	for _, want := range []string{
		"ip link set dev eth1 up",
		"ip link add link bond0 name bond0.1000 type vlan id 1000",
		"ip link add link eth1 name eth1.2000 type vlan id 2000",
		"ip route add default via 10.70.0.1 metric 1001 dev eth1.2000",
		"ip -4 route replace 10.80.0.0/16 via 10.70.0.1 dev eth1.2000",
		"ip link add link eth1 name eth1.2001 type vlan id 2001",
		"ip -6 addr add fd00:71::9/64",
	} {
		if !strings.Contains(plan, want) {
			t.Errorf("ifup -a --no-act would not run %q:\n%s", want, plan)
		}
	}
}

// TestReleaseFromBondInANetworkNamespace runs release_from_bond on a NIC that
// is down and in no bond (the kernel here cannot build one): it comes up,
// and a second run changes nothing.
func TestReleaseFromBondInANetworkNamespace(t *testing.T) {
	nodetools.Require(t, true, "ip", "bash")
	ns := netns(t, "eth1")
	nodetools.Run(t, "", "ip", "-n", ns, "link", "set", "eth1", "down")
	functions := nodetools.WriteTemp(t, "functions.sh", execute("unbond-functions", view{}))
	link := func() string {
		return nodetools.Run(t, "", "ip", "-n", ns, "-o", "link", "show", "eth1")
	}
	for run := 1; run <= 2; run++ {
		out := nodetools.Run(t, "", "ip", "netns", "exec", ns, "bash", "-euo", "pipefail", "-c", `source "$0"; release_from_bond eth1`, functions)
		if out != "" {
			t.Errorf("run %d: eth1 was in no bond, yet: %s", run, out)
		}
		if l := link(); !strings.Contains(l, ",UP") || strings.Contains(l, " master ") {
			t.Errorf("run %d: eth1 is not up on its own: %s", run, l)
		}
	}
}

// stateBody runs the script's state_body and decodes the event.
func stateBody(t *testing.T, state, code, message string) map[string]any {
	t.Helper()
	functions := nodetools.WriteTemp(t, "functions.sh", execute("state-body", view{MaxMessage: maxStateMessage}))
	out := nodetools.Run(t, "", "bash", "-euo", "pipefail", "-c", `source "$0"; state_body "$@"`, functions, state, code, message)
	var event map[string]any
	if err := json.Unmarshal([]byte(out), &event); err != nil {
		t.Fatalf("state_body wrote no JSON object: %v\n%s", err, out)
	}
	return event
}

func TestStateBodyCarriesABoundedMessage(t *testing.T) {
	nodetools.Require(t, false, "bash", "jq")
	event := stateBody(t, "failed", "1002", "network_configuration_failed: ifup bond0.1000")
	if event["state"] != "failed" || event["code"] != 1002.0 || event["message"] != "network_configuration_failed: ifup bond0.1000" {
		t.Errorf("event = %v", event)
	}

	long := "network_configuration_failed: missing \"quoted\"\n\tné\\" + strings.Repeat("x", 300)
	message := stateBody(t, "failed", "1002", long)["message"].(string)
	if n := utf8.RuneCountInString(message); n != maxStateMessage {
		t.Errorf("message of %d characters, want it cut to %d", n, maxStateMessage)
	}
	if want := `network_configuration_failed: missing "quoted" né\xxx`; !strings.HasPrefix(message, want) {
		t.Errorf("message = %q, want it to start with %q", message, want)
	}
}

// TestScriptReportsWhyItFailed runs the whole network script against a
// metadata service listing a port the host does not have: it stops before
// changing anything, and posts the reason with the failure.
func TestScriptReportsWhyItFailed(t *testing.T) {
	nodetools.Require(t, false, "bash", "curl", "jq")
	const port = "capptest9"
	if _, err := os.Stat("/sys/class/net/" + port); err == nil {
		t.Skipf("this host has an interface named %s", port)
	}
	var (
		mu     sync.Mutex
		events []map[string]any
	)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(map[string]any{
				"user_state_url": srv.URL + "/events",
				"network":        map[string]any{"interfaces": []map[string]string{{"name": port, "mac": "02:00:00:00:00:99"}}},
			})
			return
		}
		body, _ := io.ReadAll(r.Body)
		var event map[string]any
		if err := json.Unmarshal(body, &event); err != nil {
			t.Errorf("posted an event that is not JSON: %s", body)
		}
		mu.Lock()
		events = append(events, event)
		mu.Unlock()
	}))
	defer srv.Close()

	networks := []Network{{Port: port, VLAN: 2000, Address: netip.MustParsePrefix("10.70.0.9/27")}}
	script, err := Script(networks, Options{MetadataURL: srv.URL + "/metadata"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := nodetools.RunErr(script, "bash")
	if err == nil {
		t.Fatalf("the script succeeded without its port:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	var messages []string
	for _, e := range events {
		messages = append(messages, e["state"].(string)+" "+e["message"].(string))
	}
	want := []string{"running network_configuration_started", "failed network_configuration_failed: port " + port + " not found"}
	if strings.Join(messages, "\n") != strings.Join(want, "\n") {
		t.Errorf("posted %q, want %q\n%s", messages, want, out)
	}
}
