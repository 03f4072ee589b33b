// Package adopt checks the adoption of the reference in-cluster provider's
// pools (docs/adoption.md): a real kube-apiserver and etcd with CAPI's and
// the in-cluster provider's CRDs and this provider's webhooks, the real
// in-cluster manager as a process, and this provider's manager in-process.
package adopt

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// settle is the manager's --adoption-settle here: short, so that a test
// waits seconds, not the default ten.
const settle = 2 * time.Second

var (
	env       *testenv.Environment
	k8s       client.Client
	ctx       context.Context
	stopIPAM  func()
	stopTheir func()
)

func TestAdopt(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Adopting in-cluster pools")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx = context.Background()
	var err error
	env, err = testenv.Start(testenv.Options{Webhooks: true, InClusterCRDs: true})
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	stopTheir, err = env.StartInCluster(GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	// Ours runs as installed: a ServiceAccount bound to the roles `make
	// generate` writes from the RBAC markers, so that every write the
	// adoption makes (pausing both in-cluster kinds, creating and deleting
	// companions) is one its role grants. Its records stay in the
	// namespace the tests read them from.
	Expect(env.BindGeneratedRole(ctx, testenv.AllocationNamespace, testenv.IPAMAccount,
		filepath.Join(env.Root, "config", "ipam", "rbac", "role.yaml"))).To(Succeed())
	Expect(env.BindLeaderElectionRole(ctx, testenv.AllocationNamespace, testenv.IPAMAccount,
		filepath.Join(env.Root, "config", "ipam", "rbac", "leader_election_role.yaml"))).To(Succeed())
	opts := env.IPAMOptions(4)
	opts.AdoptionSettle = settle
	stopIPAM, err = env.StartIPAMAs(ctx, testenv.ServiceAccount(testenv.AllocationNamespace, testenv.IPAMAccount), opts)
	Expect(err).NotTo(HaveOccurred())
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
})

var _ = AfterSuite(func() {
	if stopIPAM != nil {
		stopIPAM()
	}
	if stopTheir != nil {
		stopTheir()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
