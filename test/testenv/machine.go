package testenv

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// BootstrappedMachine returns, not created, a Machine of cluster in ns as
// Cluster API and a bootstrap provider leave it once the bootstrap data is
// ready: data (a cloud-config) in its Secret <name>-bootstrap, which it
// names, and the PacketMachine of its name as its infrastructure.
func BootstrappedMachine(ns, cluster, name, data string) (*corev1.Secret, *clusterv1.Machine) {
	secret := BootstrapData(ns, name, data)
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster,
			Bootstrap: clusterv1.Bootstrap{
				ConfigRef:      clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: name},
				DataSecretName: ptr.To(secret.Name),
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "PacketMachine", Name: name},
		},
	}
	return secret, machine
}

// BootstrapData returns, not created, the Secret <name>-bootstrap a
// bootstrap provider writes for a Machine (or a MachineDeployment's
// machines) named name: data, a cloud-config.
func BootstrapData(ns, name, data string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-bootstrap"},
		Data:       map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")},
	}
}
