package emulator

import (
	"testing"

	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/secret"
)

// The pin the emulator compares a joining node's caCertHashes with is the
// one Cluster API's kubeadm bootstrap writes there.
func TestCAHashIsKubeadmsPin(t *testing.T) {
	generated := secret.NewCertificatesForInitialControlPlane(nil)
	must(t, generated.Generate())
	clusterCA := generated.GetByPurpose(secret.ClusterCA)
	want, err := clusterCA.Hashes()
	must(t, err)
	cert, err := certs.DecodeCertPEM(clusterCA.KeyPair.Cert)
	must(t, err)
	if got := (ca{cert: cert}).hash(); len(want) != 1 || got != want[0] {
		t.Errorf("hash = %s, Cluster API pins %v", got, want)
	}
}
