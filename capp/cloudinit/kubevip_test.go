package cloudinit

import (
	"net/netip"
	"os"
	"slices"
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
	userData, err := UserData(bootstrap(t), cases[0].networks, Options{MetadataURL: "http://169.254.169.254/metadata"}, Extra{Files: []File{f}})
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
	userData, err := UserData(bootstrap(t), cases[1].networks, Options{}, Extra{Files: []File{f}})
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
	if _, err := UserData([]byte(bootstrap), cases[0].networks, Options{}, Extra{Files: []File{f}}); err == nil || !strings.Contains(err.Error(), "already writes "+KubeVIPManifestPath) {
		t.Fatalf("UserData = %v, want it to refuse a second kube-vip manifest", err)
	}
}

func TestNeedsSuperAdmin(t *testing.T) {
	const initData = "## template: jinja\n#cloud-config\nruncmd:\n- 'kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success'\n"
	const joinData = "## template: jinja\n#cloud-config\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n"
	cases := []struct {
		name, data, version string
		want                bool
	}{
		{"init of 1.29", initData, "v1.29.0", true},
		{"init of 1.34", initData, "v1.34.1", true},
		{"init of 1.28", initData, "v1.28.15", false},
		{"init of an unknown version", initData, "", true},
		{"join of 1.34", joinData, "v1.34.1", false},
		{"init in a list command", "#cloud-config\nruncmd:\n- [kubeadm init, --config, x]\n", "v1.30.0", true},
		{"no runcmd", "#cloud-config\n", "v1.34.1", false},
		{"not YAML", "#cloud-config\n: [\n", "v1.34.1", false},
		{"the testdata bootstrap", string(bootstrap(t)), "v1.34.1", strings.Contains(string(bootstrap(t)), "kubeadm init")},
	}
	for _, c := range cases {
		if got := NeedsSuperAdmin([]byte(c.data), c.version); got != c.want {
			t.Errorf("%s: NeedsSuperAdmin = %t, want %t", c.name, got, c.want)
		}
	}
}

// TestKubeVIPRestoreCommand runs the command the user-data runs after
// kubeadm init, with the node's sed, on the super-admin manifest: the
// result is the admin.conf manifest byte for byte.
func TestKubeVIPRestoreCommand(t *testing.T) {
	nodetools.Require(t, false, "sed")
	admin, err := KubeVIPFile(kubeVIP)
	if err != nil {
		t.Fatal(err)
	}
	superAdmin := kubeVIP
	superAdmin.SuperAdmin = true
	during, err := KubeVIPFile(superAdmin)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := sigsyaml.UnmarshalStrict([]byte(during.Content), pod); err != nil {
		t.Fatal(err)
	}
	if p := pod.Spec.Volumes[0].HostPath.Path; p != "/etc/kubernetes/super-admin.conf" {
		t.Fatalf("during kubeadm init kube-vip mounts %s", p)
	}
	if m := pod.Spec.Containers[0].VolumeMounts[0].MountPath; m != "/etc/kubernetes/admin.conf" {
		t.Errorf("kube-vip reads %s, want its default admin.conf path", m)
	}
	manifest := nodetools.WriteTemp(t, "kube-vip.yaml", during.Content)
	args := append(slices.Clone(KubeVIPRestoreCommand[1:len(KubeVIPRestoreCommand)-1]), manifest)
	nodetools.Run(t, "", KubeVIPRestoreCommand[0], args...)
	after, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != admin.Content {
		t.Errorf("after the restore command the manifest is\n%s\nwant\n%s", after, admin.Content)
	}
}

// On the kubeadm init node the restore command runs after the bootstrap's
// commands, and the network script before them.
func TestUserDataRunsLastCommandsAfterTheBootstrap(t *testing.T) {
	out, err := UserData([]byte("#cloud-config\nruncmd:\n- kubeadm init\n"), cases[0].networks, Options{}, Extra{Last: [][]string{KubeVIPRestoreCommand}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RunCmd []any `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RunCmd) != 3 || cfg.RunCmd[1] != "kubeadm init" {
		t.Fatalf("runcmd = %v", cfg.RunCmd)
	}
	if last, ok := cfg.RunCmd[2].([]any); !ok || len(last) != len(KubeVIPRestoreCommand) || last[0] != "sed" {
		t.Errorf("last runcmd entry = %v, want the restore command", cfg.RunCmd[2])
	}
}
