package records_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"go4.org/netipx"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// TestTwoWritersOfAMixedVRFNeverOverlap: against a real API server, two
// writers that share nothing but it (two replicas without leader election,
// each its own store and registry, seeded before either allocates) serve at
// once an address pool and a prefix pool (/28s) of one VRF over the same
// 10.9.0.0/26. The addresses reach into the /28s whichever comes first; the
// records' names differ (a prefix's is its first address's), so only the
// check after create keeps them apart: no two records left overlap.
func TestTwoWritersOfAMixedVRFNeverOverlap(t *testing.T) {
	ctx := context.Background()
	env, ns, _ := startStore(ctx, t)

	pool := func(name string, length *int32) *v1alpha1.MetalVRFIPPool {
		p := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{"10.9.0.0/26"}, Prefix: ptr.To(int32(26)), Gateway: "10.9.0.1", AllocationPrefixLength: length,
				VRF: &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
			},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.VRF = &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.MetalVRFIPPoolKind))
		return p
	}
	addresses, prefixes := pool("addresses", nil), pool("prefixes", ptr.To(int32(28)))

	writer := func(identity string) *registry.Registry {
		reg := registry.New(records.New(env.Client, env.Client, ns, records.Writer{Identity: identity}), nil, "here")
		for _, p := range []v1alpha1.Pool{addresses, prefixes} {
			if _, err := reg.Stats(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		return reg
	}
	a, b := writer("replica-a"), writer("replica-b")

	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			reg, p := a, v1alpha1.Pool(addresses)
			if i%3 == 2 {
				reg, p = b, prefixes
			}
			claim := registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprint("claim-", i)}, UID: types.UID(fmt.Sprint("uid-", i))}
			if _, _, err := reg.Acquire(ctx, p, claim, netip.Addr{}); err != nil && !errors.Is(err, cidr.ErrExhausted) {
				t.Errorf("claim %d: %v", i, err)
			}
		})
	}
	wg.Wait()

	var list coordinationv1.LeaseList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.HasLabels{v1alpha1.AllocationDomainLabel}); err != nil {
		t.Fatal(err)
	}
	var spans []netipx.IPRange
	for _, lease := range list.Items {
		ip := netip.MustParseAddr(lease.Annotations[v1alpha1.AllocationAddressAnnotation])
		span := netipx.IPRangeFrom(ip, ip)
		if v, ok := lease.Annotations[v1alpha1.AllocationPrefixLengthAnnotation]; ok {
			bits, _ := strconv.Atoi(v)
			span = netipx.RangeOfPrefix(netip.PrefixFrom(ip, bits))
		}
		spans = append(spans, span)
	}
	if i, j, found := cidr.Overlap(spans); found {
		t.Fatalf("records %s and %s overlap (%d records)", spans[i], spans[j], len(spans))
	}
	t.Logf("%d records, none overlapping", len(spans))
}
