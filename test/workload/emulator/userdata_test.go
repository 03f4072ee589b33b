package emulator

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

func TestReadRendersOfTheProviders(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    fixture
		want Node
	}{{
		name: "first control plane of a CPEM cluster",
		f:    fixture{role: FirstControlPlane, endpoint: endpoint, nodeIP: "10.60.0.2", bind: eip},
		want: Node{Role: FirstControlPlane, ClusterName: fixtureCluster, KubernetesVersion: fixtureVersion,
			Endpoint: endpoint, NodeIP: netip.MustParseAddr("10.60.0.2"), Binds: eip},
	}, {
		name: "joining control plane binding after kubeadm join",
		f:    fixture{role: ControlPlane, endpoint: endpoint, nodeIP: "10.60.0.3", bind: eip},
		want: Node{Role: ControlPlane, Endpoint: endpoint, CACertHashes: []string{caHash},
			NodeIP: netip.MustParseAddr("10.60.0.3"), Binds: eip},
	}, {
		name: "worker",
		f:    fixture{role: Worker, endpoint: endpoint, nodeIP: "10.60.0.4"},
		want: Node{Role: Worker, Endpoint: endpoint, CACertHashes: []string{caHash}, NodeIP: netip.MustParseAddr("10.60.0.4")},
	}, {
		name: "worker without an internal network: no --node-ip",
		f:    fixture{role: Worker, endpoint: endpoint},
		want: Node{Role: Worker, Endpoint: endpoint, CACertHashes: []string{caHash}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(Device{ID: "dev-1", Hostname: "host-1", UserData: tc.f.userData(t)})
			if err != nil {
				t.Fatal(err)
			}
			tc.want.DeviceID, tc.want.Name, tc.want.ProviderID = "dev-1", "host-1", "equinixmetal://dev-1"
			tc.want.ExternalCloudProvider, tc.want.ConfiguresNetwork = true, true
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Read =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	cp := fixture{role: FirstControlPlane, endpoint: endpoint, nodeIP: "10.60.0.2", bind: eip}.userData(t)
	for _, tc := range []struct {
		name     string
		userData []byte
		want     Reason
	}{
		{"not a cloud-config", []byte("#!/bin/sh\nkubeadm init --config /run/kubeadm/kubeadm.yaml\n"), NotCloudConfig},
		{"no kubeadm", []byte("#cloud-config\nruncmd:\n- echo joined\n"), NoKubeadm},
		{"kubeadm's configuration not written", []byte("#cloud-config\nruncmd:\n- kubeadm join --config /run/kubeadm/join.yaml\n"), KubeadmConfigMissing},
		{"jinja without its header", bytes.Replace(cp, []byte("## template: jinja\n"), nil, 1), UnrenderedTemplate},
		{"instance data the emulator does not know", bytes.Replace(cp, []byte("v1.instance_id"), []byte("v1.region"), 1), UnrenderedTemplate},
		{"another device's provider ID", bytes.Replace(cp, []byte("equinixmetal://{{ v1.instance_id }}"), []byte("equinixmetal://dev-2"), 1), ProviderIDMismatch},
		{"binding written, not applied", bytes.Replace(cp, []byte("[ip, addr, replace"), []byte("[ip, addr, show"), 1), BindingIncomplete},
		{"binding applied, not written", bytes.Replace(cp, []byte(cloudinit.EndpointBindingPath), []byte("/etc/network/interfaces.d/other"), 1), BindingIncomplete},
		{"joining control plane binding before kubeadm join",
			fixture{role: ControlPlane, endpoint: endpoint, bind: eip, bindFirst: true}.userData(t), BindsBeforeJoin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(Device{ID: "dev-1", Hostname: "host-1", UserData: tc.userData})
			var refusal *Refusal
			if !errors.As(err, &refusal) || refusal.Reason != tc.want {
				t.Fatalf("Read: %v, want a refusal for %s", err, tc.want)
			}
			if refusal.DeviceID != "dev-1" {
				t.Errorf("the refusal names device %q", refusal.DeviceID)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	read := func(id string, f fixture) Node {
		t.Helper()
		n, err := Read(Device{ID: id, Hostname: id, UserData: f.userData(t)})
		must(t, err)
		return n
	}
	first := read("cp-1", fixture{role: FirstControlPlane, endpoint: endpoint, bind: eip})
	unbound := read("cp-1", fixture{role: FirstControlPlane, endpoint: endpoint})
	joiningCP := read("cp-2", fixture{role: ControlPlane, endpoint: endpoint, bind: eip})
	worker := read("w-1", fixture{role: Worker, endpoint: endpoint})
	elsewhere := read("w-2", fixture{role: Worker, endpoint: netip.MustParseAddrPort("198.51.100.2:6443")})
	otherPort := read("w-3", fixture{role: Worker, endpoint: netip.AddrPortFrom(eip, 443)})
	joined := func(n Node) Node {
		n.ClusterName = fixtureCluster
		return n
	}

	for _, tc := range []struct {
		name     string
		nodes    []Node
		routes   Routes
		joined   []Node
		admitted []string
		refused  map[string]Reason
	}{
		{"routed to the first control plane", []Node{first, joiningCP, worker}, Routes{eip: "cp-1"}, nil, []string{"cp-1", "cp-2", "w-1"}, nil},
		{"moved to a control plane that joined before", []Node{first, joiningCP, worker}, Routes{eip: "cp-2"}, []Node{first, joined(joiningCP)},
			[]string{"cp-1", "cp-2", "w-1"}, nil},
		{"moved to a control plane that has not joined: it would join itself", []Node{first, joiningCP, worker}, Routes{eip: "cp-2"}, nil,
			[]string{"cp-1"}, map[string]Reason{"cp-2": EndpointUnreachable, "w-1": EndpointUnreachable}},
		{"not routed yet: the first control plane comes up alone", []Node{first, worker}, Routes{eip: ""}, nil, []string{"cp-1"},
			map[string]Reason{"w-1": EndpointUnreachable}},
		{"unrouted after the worker joined: it stays", []Node{first, worker}, Routes{eip: ""}, []Node{first, joined(worker)}, []string{"cp-1", "w-1"}, nil},
		{"routed to a worker", []Node{first, worker}, Routes{eip: "w-1"}, nil, []string{"cp-1"},
			map[string]Reason{"w-1": EndpointUnreachable}},
		{"a control plane that does not bind the Elastic IP", []Node{unbound, worker}, Routes{eip: "cp-1"}, nil, nil,
			map[string]Reason{"cp-1": EndpointNotBound, "w-1": EndpointUnreachable}},
		{"an address the platform did not reserve", []Node{first, elsewhere}, Routes{eip: "cp-1"}, nil, []string{"cp-1"},
			map[string]Reason{"w-2": EndpointUnreachable}},
		{"another port than the control plane serves", []Node{first, otherPort}, Routes{eip: "cp-1"}, nil, []string{"cp-1"},
			map[string]Reason{"w-3": EndpointUnreachable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byDevice := map[string]Node{}
			for _, n := range tc.joined {
				byDevice[n.DeviceID] = n
			}
			admitted, refused := Admit(tc.nodes, tc.routes, byDevice)
			var ids []string
			for _, n := range admitted {
				ids = append(ids, n.DeviceID)
				if n.ClusterName != fixtureCluster {
					t.Errorf("%s joins cluster %q", n.DeviceID, n.ClusterName)
				}
			}
			if !reflect.DeepEqual(ids, tc.admitted) {
				t.Errorf("admitted %v, want %v", ids, tc.admitted)
			}
			reasons := map[string]Reason{}
			for _, err := range refused {
				var r *Refusal
				if !errors.As(err, &r) {
					t.Fatalf("not a refusal: %v", err)
				}
				reasons[r.DeviceID] = r.Reason
			}
			if len(reasons) == 0 {
				reasons = nil
			}
			if !reflect.DeepEqual(reasons, tc.refused) {
				t.Errorf("refused %v, want %v", reasons, tc.refused)
			}
		})
	}
}

// TestStrippedBindingIsRefused is the fault the coherence check is for: the
// user-data of a CPEM cluster's control plane without its endpoint binding
// (as CAPP wrote it before it bound the endpoint) makes a control plane
// whose API server never answers at the Elastic IP.
func TestStrippedBindingIsRefused(t *testing.T) {
	bound := fixture{role: FirstControlPlane, endpoint: endpoint, nodeIP: "10.60.0.2", bind: eip}.userData(t)
	stripped := stripBinding(t, bound)
	for _, data := range [][]byte{bound, stripped} {
		if _, err := Read(Device{ID: "cp-1", Hostname: "cp-1", UserData: data}); err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
	cp, _ := Read(Device{ID: "cp-1", Hostname: "cp-1", UserData: stripped})
	worker, err := Read(Device{ID: "w-1", Hostname: "w-1", UserData: fixture{role: Worker, endpoint: endpoint}.userData(t)})
	must(t, err)
	admitted, refused := Admit([]Node{cp, worker}, Routes{eip: "cp-1"}, nil)
	if len(admitted) != 0 {
		t.Errorf("admitted %v", admitted)
	}
	var reasons []Reason
	for _, err := range refused {
		var r *Refusal
		if errors.As(err, &r) {
			reasons = append(reasons, r.Reason)
		}
	}
	if want := []Reason{EndpointNotBound, EndpointUnreachable}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("refusals %v, want %v", reasons, want)
	}
}

// stripBinding removes the endpoint binding's file and command from
// user-data, keeping its header.
func stripBinding(t *testing.T, data []byte) []byte {
	t.Helper()
	at := bytes.Index(data, []byte("#cloud-config\n")) + len("#cloud-config\n")
	var doc yaml.Node
	must(t, yaml.Unmarshal(data[at:], &doc))
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		list := root.Content[i+1]
		keep := list.Content[:0]
		for _, entry := range list.Content {
			var file struct{ Path string }
			var args []string
			switch {
			case root.Content[i].Value == "write_files" && entry.Decode(&file) == nil && file.Path == cloudinit.EndpointBindingPath:
			case root.Content[i].Value == "runcmd" && entry.Decode(&args) == nil && len(args) > 2 && args[0] == "ip" && args[2] == "replace":
			default:
				keep = append(keep, entry)
			}
		}
		list.Content = keep
	}
	out, err := yaml.Marshal(&doc)
	must(t, err)
	if bytes.Contains(out, []byte(cloudinit.EndpointBindingPath)) {
		t.Fatal("the binding is still there")
	}
	return append(slices.Clone(data[:at]), out...)
}
