package cloudinit

import (
	"bytes"
	_ "embed"
	"regexp"
	"text/template"
)

// NodeSoftwarePath is the script that installs what kubeadm needs on a
// stock image (PacketMachine spec.nodeSoftware Install).
const NodeSoftwarePath = "/usr/local/sbin/cluster-api-node-software.sh"

// NodeSoftware is what the node software script installs.
type NodeSoftware struct {
	// KubernetesVersion is the Machine's version, v1.33.1: kubelet, kubeadm
	// and kubectl come in that exact version from the pkgs.k8s.io
	// repository of its minor.
	KubernetesVersion string
}

//go:embed nodesoftware.sh.tmpl
var nodeSoftwareText string

var nodeSoftwareScript = template.Must(template.New("node-software").Parse(nodeSoftwareText))

// releasePattern is a released Kubernetes version: pkgs.k8s.io's stable
// repositories carry no pre-releases, and the digits-only parts keep it
// safe to write into the script.
var releasePattern = regexp.MustCompile(`^v?(([0-9]+\.[0-9]+)\.[0-9]+)$`)

// NodeSoftwareInstall is the node software script and the command that
// runs it before the bootstrap's.
func NodeSoftwareInstall(n NodeSoftware) (Extra, error) {
	m := releasePattern.FindStringSubmatch(n.KubernetesVersion)
	if m == nil {
		return Extra{}, &InvalidValueError{Field: "Kubernetes version", Value: n.KubernetesVersion,
			Reason: "is not a released version like v1.33.1, which the node software install needs to pick its packages"}
	}
	var out bytes.Buffer
	if err := nodeSoftwareScript.Execute(&out, struct{ Version, Minor string }{m[1], m[2]}); err != nil {
		return Extra{}, err
	}
	return Extra{
		Files: []File{{Path: NodeSoftwarePath, Permissions: "0755", Content: out.String()}},
		First: [][]string{{NodeSoftwarePath}},
	}, nil
}
