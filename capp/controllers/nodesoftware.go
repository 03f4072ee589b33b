package controllers

import (
	"fmt"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// nodeSoftware is what a machine with spec.nodeSoftware Install adds to its
// user-data: the script installing containerd, kubelet, kubeadm and kubectl
// of the Machine's Kubernetes version (cloudinit.NodeSoftwareInstall).
// Otherwise (Preinstalled, or unset) the image or the bootstrap brings
// them, and it adds nothing. It fails on a version the install cannot
// pick packages for.
func nodeSoftware(s *machineScope) (cloudinit.Extra, error) {
	if s.PacketMachine.Spec.NodeSoftware != infrav1.NodeSoftwareInstall {
		return cloudinit.Extra{}, nil
	}
	extra, err := cloudinit.NodeSoftwareInstall(cloudinit.NodeSoftware{KubernetesVersion: s.Machine.Spec.Version})
	if err != nil {
		return extra, fmt.Errorf("spec.nodeSoftware Install: Machine %s spec.version: %w", s.Machine.Name, err)
	}
	return extra, nil
}
