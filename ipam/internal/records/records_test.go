package records_test

import (
	"context"
	"net/netip"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// TestRetiredRecordsOutliveTheirPoolInTheVRF: against a real API server, a
// deleted pool's retired record stays while another pool of its VRF
// exists (it could hand the address out), and goes with the VRF's last
// pool.
func TestRetiredRecordsOutliveTheirPoolInTheVRF(t *testing.T) {
	ctx := context.Background()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ns, err := env.NewNamespace(ctx, "records")
	if err != nil {
		t.Fatal(err)
	}
	store := records.New(env.Client, env.Client, ns, "test")

	var pools []*v1alpha1.MetalVRFIPPool
	for _, name := range []string{"first", "second"} {
		pool := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				VRF: &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
			},
		}
		if err := env.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		pool.Status.VRF = &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}
		if err := env.Client.Status().Update(ctx, pool); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, pool)
	}
	domain := registry.DomainOf(pools[0])
	if other := registry.DomainOf(pools[1]); other != domain {
		t.Fatalf("the pools are in domains %s and %s; the test needs one", domain, other)
	}

	rec := registry.Record{Address: netip.MustParseAddr("10.9.0.2"), Holder: registry.Holder{
		Pool:  poolref.KeyOf(pools[0]),
		Claim: registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: "moved"}, UID: "claim-uid"},
	}}
	if err := store.Reserve(ctx, domain, rec); err != nil {
		t.Fatal(err)
	}
	if err := store.Retire(ctx, domain, rec); err != nil {
		t.Fatal(err)
	}
	retired := func() int {
		t.Helper()
		var list coordinationv1.LeaseList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.AllocationRetiredLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	if n := retired(); n != 1 {
		t.Fatalf("%d retired records, want 1", n)
	}

	// The first pool is deleted (the API server still shows it while its
	// finalizer runs: ForgetRetired is told which pool goes).
	if err := store.ForgetRetired(ctx, domain, poolref.KeyOf(pools[0])); err != nil {
		t.Fatal(err)
	}
	if n := retired(); n != 1 {
		t.Fatalf("the retired record went with its pool while %s of the VRF exists", pools[1].Name)
	}
	if err := env.Client.Delete(ctx, pools[0], client.Preconditions{UID: ptr.To(pools[0].UID)}); err != nil {
		t.Fatal(err)
	}
	if err := store.ForgetRetired(ctx, domain, poolref.KeyOf(pools[1])); err != nil {
		t.Fatal(err)
	}
	if n := retired(); n != 0 {
		t.Fatalf("%d retired records left after the VRF's last pool went", n)
	}
}
