package cloudinit

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestEndpointBinding(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		stanza  string
		command []string
	}{
		{"147.75.1.2", "auto lo:0\niface lo:0 inet static\n    address 147.75.1.2/32\n", []string{"ip", "addr", "replace", "147.75.1.2/32", "dev", "lo"}},
		// A v4-mapped address is bound as the IPv4 address it is.
		{"::ffff:147.75.1.2", "auto lo:0\niface lo:0 inet static\n    address 147.75.1.2/32\n", []string{"ip", "addr", "replace", "147.75.1.2/32", "dev", "lo"}},
		{"2604:1380::5", "iface lo inet6 static\n    address 2604:1380::5/128\n", []string{"ip", "addr", "replace", "2604:1380::5/128", "dev", "lo"}},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			extra, err := EndpointBinding(netip.MustParseAddr(tc.addr), true)
			if err != nil {
				t.Fatal(err)
			}
			want := File{Path: EndpointBindingPath, Permissions: "0644",
				Content: "# The cluster's control-plane endpoint, written by the Cluster API Equinix Metal provider.\n" + tc.stanza}
			if !reflect.DeepEqual(extra.Files, []File{want}) {
				t.Errorf("files = %#v, want %#v", extra.Files, []File{want})
			}
			if !reflect.DeepEqual(extra.First, [][]string{tc.command}) {
				t.Errorf("first commands = %q, want %q", extra.First, tc.command)
			}
			if extra.Last != nil {
				t.Errorf("last commands = %q, want none", extra.Last)
			}
			// A node joining the control plane binds it after kubeadm join.
			joining, err := EndpointBinding(netip.MustParseAddr(tc.addr), false)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(joining.Files, []File{want}) || joining.First != nil || !reflect.DeepEqual(joining.Last, [][]string{tc.command}) {
				t.Errorf("joining: files %#v, first %q, last %q; want the same file and the command last", joining.Files, joining.First, joining.Last)
			}
		})
	}
}

func TestEndpointBindingRefusesWhatIsNotAnAddress(t *testing.T) {
	for _, addr := range []netip.Addr{{}, netip.MustParseAddr("fe80::1%bond0")} {
		_, err := EndpointBinding(addr, true)
		var invalid *InvalidValueError
		if !errors.As(err, &invalid) {
			t.Fatalf("EndpointBinding(%v) = %v, want an *InvalidValueError", addr, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "control-plane endpoint address") || !strings.Contains(msg, `"`+addr.String()+`"`) {
			t.Errorf("error %q does not name the field and the value %q", msg, addr)
		}
	}
}

// TestUserDataRunsTheBindingAndTheSoftwareBeforeKubeadm merges the binding,
// the node software and kube-vip's restore into the kubeadm bootstrap: the
// header stays, the files are added after the bootstrap's, and the commands
// run network script, binding, software, the bootstrap's, then the last.
func TestUserDataRunsTheBindingAndTheSoftwareBeforeKubeadm(t *testing.T) {
	binding, err := EndpointBinding(netip.MustParseAddr("147.75.1.2"), true)
	if err != nil {
		t.Fatal(err)
	}
	software, err := NodeSoftwareInstall(NodeSoftware{KubernetesVersion: "v1.33.1"})
	if err != nil {
		t.Fatal(err)
	}
	in := bootstrap(t)
	out, err := UserData(in, cases[0].networks, Options{}, binding.Join(software, Extra{Last: [][]string{KubeVIPRestoreCommand}}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "## template: jinja\n#cloud-config\n") {
		t.Fatalf("the Jinja header is not kept:\n%s", out)
	}
	before, after := cloudConfig(t, in), cloudConfig(t, out)
	var paths []string
	for _, f := range after["write_files"].([]any)[len(before["write_files"].([]any)):] {
		paths = append(paths, f.(map[string]any)["path"].(string))
	}
	if want := []string{ModulesPath, ScriptPath, KubeletDefaultsPath, EndpointBindingPath, NodeSoftwarePath}; !reflect.DeepEqual(paths, want) {
		t.Errorf("added files %v, want %v", paths, want)
	}
	inCmds := before["runcmd"].([]any)
	want := []any{
		[]any{ScriptPath},
		[]any{"ip", "addr", "replace", "147.75.1.2/32", "dev", "lo"},
		[]any{NodeSoftwarePath},
	}
	want = append(want, inCmds...)
	want = append(want, toAnyList(KubeVIPRestoreCommand))
	if got := after["runcmd"].([]any); !reflect.DeepEqual(got, want) {
		t.Errorf("runcmd =\n%v\nwant\n%v", got, want)
	}
}

func toAnyList(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
