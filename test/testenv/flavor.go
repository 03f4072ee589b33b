package testenv

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// FlavorInputs returns, not created, what a user of the cluster templates
// creates in ns beside the rendered cluster: the Secret credentials (type
// addons.cluster.x-k8s.io/resource-set) carrying the cloud controller manager's
// configuration with apiKey, which the ClusterResourceSet copies into the
// workload cluster and the PacketCluster reads its token from, and the
// ConfigMap <cluster>-cni with a stand-in for the CNI's manifest (nothing
// applies it: there is no workload cluster in the tests).
func FlavorInputs(ns, cluster, credentials, apiKey string) []client.Object {
	return []client.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + "-cni"},
			Data:       map[string]string{"cni.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\n  namespace: kube-system\n"},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentials},
			Type:       metal.ResourceSetSecretType,
			StringData: map[string]string{"metal-cloud-config.yaml": fmt.Sprintf(
				"apiVersion: v1\nkind: Secret\nmetadata:\n  name: metal-cloud-config\n  namespace: kube-system\nstringData:\n  %s: '{\"apiKey\": %q}'\n",
				metal.CloudConfigKey, apiKey)},
		},
	}
}
