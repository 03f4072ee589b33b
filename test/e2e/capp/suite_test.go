// Package capp holds the CAPP consumer's end-to-end suite: a real
// kube-apiserver and etcd with CAPI's, CAPP's and both IPAM providers' CRDs;
// the CAPP manager and our IPAM manager in-process; and the reference
// in-cluster IPAM provider running as a peer process.
package capp

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

var (
	env   *testenv.Environment
	k8s   client.Client
	ctx   context.Context
	stops []func()
)

func TestCAPP(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CAPP consumer")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx = context.Background()
	var err error
	env, err = testenv.Start(testenv.Options{Webhooks: true, InClusterCRDs: true, CAPPCRDs: true})
	Expect(err).NotTo(HaveOccurred())

	k8s = env.Client

	stop, err := env.StartIPAM(ctx, env.IPAMOptions(2))
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, stop)
	stop, err = env.StartInCluster(GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, stop)
	stop, err = env.StartCAPP(ctx, env.CAPPOptions(2, metadataURL))
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, stop)

	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
})

var _ = AfterSuite(func() {
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// metadataURL is the metadata service the rendered script is told to use.
const metadataURL = "http://metadata.test/metadata"

// newNamespace creates a namespace of its own for one test.
func newNamespace() string {
	GinkgoHelper()
	ns, err := env.NewNamespace(ctx, "capp")
	Expect(err).NotTo(HaveOccurred())
	return ns
}
