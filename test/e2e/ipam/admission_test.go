package ipam

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"
)

var _ = Describe("The release-finalizer admission policy", func() {
	var ns string
	BeforeEach(func() {
		// The policy is an opt-in for Kubernetes 1.36 and later; make test's
		// kube-apiserver is 1.36, so this skips only on older assets.
		if !env.AdmissionPolicy {
			Skip("the API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)")
		}
		ns = newNamespace()
	})

	It("creates claims of our pools with ipamutil's release finalizer already set", func() {
		for _, kind := range []string{poolKind, "GlobalMetalVRFIPPool"} {
			claim := createClaim(ns, "claim-of-"+strings.ToLower(kind), kind, "no-such-pool")
			Expect(claim.Finalizers).To(ContainElement(ipamutil.ReleaseAddressFinalizer),
				"the create response of a claim of a %s", kind)
		}
	})

	It("leaves claims of other providers' pools alone", func() {
		claim := newClaim(ns, "claim-of-another-provider", "InClusterIPPool", "pool")
		claim.Spec.PoolRef.APIGroup = "ipam.cluster.x-k8s.io"
		Expect(k8s.Create(ctx, claim)).To(Succeed())
		Expect(controllerutil.ContainsFinalizer(claim, ipamutil.ReleaseAddressFinalizer)).To(BeFalse())

		other := newClaim(ns, "claim-of-another-group", poolKind, "pool")
		other.Spec.PoolRef.APIGroup = "example.com"
		Expect(k8s.Create(ctx, other)).To(Succeed())
		Expect(other.Finalizers).To(BeEmpty())
	})
})
