package cloudinit

import (
	"net/netip"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodetools"
)

var kubeVIP = KubeVIP{
	Address:   netip.MustParseAddr("10.60.0.100"),
	Interface: "bond0.1000",
	Port:      6443,
	Image:     DefaultKubeVIPImage,
}

func TestKubeVIPGolden(t *testing.T) {
	f, err := KubeVIPFile(kubeVIP)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "kube-vip.manifest", f.Content)
	userData, err := UserData(bootstrap(t), cases[0].networks, Options{MetadataURL: "http://169.254.169.254/metadata"}, f)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ipv4-routes-kube-vip.user-data", string(userData))
}

// TestKubeVIPManifestIsAPod reads the manifest the way kubelet does, into
// a Pod, strictly: a misspelt or misplaced field fails.
func TestKubeVIPManifestIsAPod(t *testing.T) {
	for name, v := range map[string]KubeVIP{
		"ipv4": kubeVIP,
		"ipv6": {Address: netip.MustParseAddr("fd00:60::100"), Interface: "eth1.2001", Port: 443, Image: "registry.example/kube-vip@sha256:0123"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := KubeVIPFile(v)
			if err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{}
			if err := sigsyaml.UnmarshalStrict([]byte(f.Content), pod); err != nil {
				t.Fatalf("%v\n%s", err, f.Content)
			}
			if pod.Kind != "Pod" || pod.Namespace != "kube-system" || !pod.Spec.HostNetwork || len(pod.Spec.Containers) != 1 {
				t.Fatalf("not kube-vip's static pod: %+v", pod)
			}
			c := pod.Spec.Containers[0]
			if c.Image != v.Image {
				t.Errorf("image %q, want %q", c.Image, v.Image)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			want := map[string]string{
				"vip_arp": "true", "cp_enable": "true", "vip_leaderelection": "true",
				"vip_address": v.Address.String(), "vip_interface": v.Interface,
				"vip_subnet": map[bool]string{true: "32", false: "128"}[v.Address.Is4()],
				"port":       map[string]string{"ipv4": "6443", "ipv6": "443"}[name],
			}
			for k, w := range want {
				if env[k] != w {
					t.Errorf("env %s = %q, want %q", k, env[k], w)
				}
			}
			if err := checkNoJinja(f.Path, f.Content); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestKubeVIPFileRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*KubeVIP)
		want   string
	}{
		"no address":         {func(v *KubeVIP) { v.Address = netip.Addr{} }, "not an IP address"},
		"a bare port":        {func(v *KubeVIP) { v.Interface = "bond0" }, "not a VLAN sub-interface"},
		"a long interface":   {func(v *KubeVIP) { v.Interface = "enp129s0f1.3999" + "x" }, "not a VLAN sub-interface"},
		"a quote in it":      {func(v *KubeVIP) { v.Interface = `bond0".1` }, "not a VLAN sub-interface"},
		"no port":            {func(v *KubeVIP) { v.Port = 0 }, "not a TCP port"},
		"an image with YAML": {func(v *KubeVIP) { v.Image = "kube-vip\n  x: y" }, "not an image reference"},
	} {
		t.Run(name, func(t *testing.T) {
			v := kubeVIP
			tc.mutate(&v)
			if _, err := KubeVIPFile(v); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("KubeVIPFile = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestKubeVIPUserDataPassesCloudInitSchema validates a control-plane
// node's user-data, the kube-vip manifest merged in, with cloud-init, and
// checks the manifest comes out of Jinja as rendered.
func TestKubeVIPUserDataPassesCloudInitSchema(t *testing.T) {
	nodetools.Require(t, false, "cloud-init")
	f, err := KubeVIPFile(kubeVIP)
	if err != nil {
		t.Fatal(err)
	}
	userData, err := UserData(bootstrap(t), cases[1].networks, Options{}, f)
	if err != nil {
		t.Fatal(err)
	}
	rendered := nodetools.CloudInitSchema(t, userData)
	var cfg struct {
		WriteFiles []File `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(rendered), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.WriteFiles {
		if w.Path == KubeVIPManifestPath {
			if w.Content != f.Content {
				t.Errorf("the manifest after Jinja differs from what was rendered:\n%s", w.Content)
			}
			return
		}
	}
	t.Errorf("the user-data writes no %s", KubeVIPManifestPath)
}

func TestUserDataRejectsABootstrapWritingKubeVIP(t *testing.T) {
	f, err := KubeVIPFile(kubeVIP)
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := "#cloud-config\nwrite_files:\n- path: " + KubeVIPManifestPath + "\n  content: x\n"
	if _, err := UserData([]byte(bootstrap), cases[0].networks, Options{}, f); err == nil || !strings.Contains(err.Error(), "already writes "+KubeVIPManifestPath) {
		t.Fatalf("UserData = %v, want it to refuse a second kube-vip manifest", err)
	}
}
