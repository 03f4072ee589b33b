package cloudinit

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestNodeSoftwareInstall(t *testing.T) {
	extra, err := NodeSoftwareInstall(NodeSoftware{KubernetesVersion: "v1.33.1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(extra.Files) != 1 || extra.Files[0].Path != NodeSoftwarePath || extra.Files[0].Permissions != "0755" {
		t.Fatalf("files = %+v, want the executable script at %s", extra.Files, NodeSoftwarePath)
	}
	if !reflect.DeepEqual(extra.First, [][]string{{NodeSoftwarePath}}) || extra.Last != nil {
		t.Errorf("commands first %q last %q, want the script first only", extra.First, extra.Last)
	}
	script := extra.Files[0].Content
	// What kubeadm's preflight and kubelet need, in the version asked for.
	for _, want := range []string{
		"#!/bin/bash\n",
		"set -euo pipefail\n",
		"swapoff -a\n",
		`sed -ri '/\sswap\s/s/^#?/#/' /etc/fstab`,
		"cat >/etc/modules-load.d/k8s.conf <<'MODULES'\noverlay\nbr_netfilter\nMODULES\n",
		"modprobe overlay\nmodprobe br_netfilter\n",
		"cat >/etc/sysctl.d/99-kubernetes.conf <<'SYSCTL'\nnet.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n",
		"sysctl --system",
		"kubernetes_version=1.33.1\n",
		"repository=https://pkgs.k8s.io/core:/stable:/v1.33/deb/\n",
		`"kubelet=${kubernetes_version}-*" "kubeadm=${kubernetes_version}-*" "kubectl=${kubernetes_version}-*"`,
		"apt_get install containerd ",
		"apt-mark hold kubelet kubeadm kubectl",
		"-o Dpkg::Options::=--force-confold",
		`kubeadm config images list --kubernetes-version "v${kubernetes_version}" | grep '/pause:'`,
		`s/^(\s*)SystemdCgroup = false/\1SystemdCgroup = true/`,
		`s#^(\s*)(sandbox_image|sandbox) = .*#\1\2 = \"${pause}\"#`,
		"systemctl restart containerd\n",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
	if err := checkNoJinja(NodeSoftwarePath, script); err != nil {
		t.Error(err)
	}
}

func TestNodeSoftwareInstallTakesTheMinorOfTheVersion(t *testing.T) {
	for version, want := range map[string]string{"1.30.14": "v1.30", "v1.34.0": "v1.34", "v2.0.10": "v2.0"} {
		extra, err := NodeSoftwareInstall(NodeSoftware{KubernetesVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(extra.Files[0].Content, "core:/stable:/"+want+"/deb/") {
			t.Errorf("%s: the script does not use the %s repository", version, want)
		}
	}
}

func TestNodeSoftwareInstallRefusesWhatIsNotARelease(t *testing.T) {
	for _, version := range []string{"", "v1.33", "v1.34.0-rc.1", "v1.33.1+build", "latest", "v1.33.1; reboot", "v1.33.1\n"} {
		_, err := NodeSoftwareInstall(NodeSoftware{KubernetesVersion: version})
		var invalid *InvalidValueError
		if !errors.As(err, &invalid) {
			t.Fatalf("NodeSoftwareInstall(%q) = %v, want an *InvalidValueError", version, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "Kubernetes version") || !strings.Contains(msg, strings.ReplaceAll(`"`+version+`"`, "\n", `\n`)) {
			t.Errorf("error %q does not name the field and the value %q", msg, version)
		}
	}
}
