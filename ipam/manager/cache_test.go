package manager

import (
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

func claimOf(group, kind string) *ipamv1.IPAddressClaim {
	now := metav1.Now()
	return &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "7", Generation: 2, DeletionTimestamp: &now,
			Labels:        map[string]string{clusterv1.ClusterNameLabel: "cluster"},
			Annotations:   map[string]string{"note": "x"},
			Finalizers:    []string{"example.com/keep"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: ipamv1.IPAddressClaimSpec{ClusterName: "cluster", PoolRef: ipamv1.IPPoolReference{APIGroup: group, Kind: kind, Name: "pool"}},
		Status: ipamv1.IPAddressClaimStatus{
			AddressRef: ipamv1.IPAddressReference{Name: "c"},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}},
		},
	}
}

func addressOf(group, kind string) *ipamv1.IPAddress {
	return &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "c", UID: "uid-a", ResourceVersion: "8",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ipam.cluster.x-k8s.io/v1beta2", Kind: "IPAddressClaim", Name: "c", UID: "uid-c"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: "c"}, PoolRef: ipamv1.IPPoolReference{APIGroup: group, Kind: kind, Name: "pool"},
			Address: "10.0.0.2", Gateway: "10.0.0.1",
		},
	}
}

// The cache keeps every field of the claims and IPAddresses the manager
// serves or may adopt, which it patches from the cache, but the managed
// fields; of another provider's, their identity and pool reference alone.
func TestCompactKeepsOursWholeAndOthersIdentity(t *testing.T) {
	for _, c := range []struct {
		what, group, kind string
		ours              bool
	}{
		{what: "claim of a MetalVRFIPPool", group: v1alpha1.GroupVersion.Group, kind: v1alpha1.MetalVRFIPPoolKind, ours: true},
		{what: "claim of a GlobalMetalVRFIPPool", group: v1alpha1.GroupVersion.Group, kind: v1alpha1.GlobalMetalVRFIPPoolKind, ours: true},
		{what: "claim of an in-cluster pool, which may be adopted", group: v1alpha1.GroupVersion.Group, kind: v1alpha1.InClusterIPPoolKind, ours: true},
		{what: "claim of another provider's pool", group: "ipam.example.com", kind: "ExamplePool"},
		{what: "claim of another kind of our group", group: v1alpha1.GroupVersion.Group, kind: "ExamplePool"},
	} {
		t.Run(c.what, func(t *testing.T) {
			claim := claimOf(c.group, c.kind)
			want := claim.DeepCopy()
			want.ManagedFields = nil
			address := addressOf(c.group, c.kind)
			wantAddress := address.DeepCopy()
			wantAddress.ManagedFields = nil
			if !c.ours {
				want = &ipamv1.IPAddressClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "7", Generation: 2, DeletionTimestamp: claim.DeletionTimestamp},
					Spec:       ipamv1.IPAddressClaimSpec{PoolRef: claim.Spec.PoolRef},
				}
				wantAddress = &ipamv1.IPAddress{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-a", ResourceVersion: "8"},
					Spec:       ipamv1.IPAddressSpec{PoolRef: address.Spec.PoolRef},
				}
			}
			got, err := compactClaim(claim)
			if err != nil || !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("the cache keeps the claim\n%+v\nwant\n%+v (err %v)", got, want, err)
			}
			gotAddress, err := compactAddress(address)
			if err != nil || !equality.Semantic.DeepEqual(gotAddress, wantAddress) {
				t.Errorf("the cache keeps the IPAddress\n%+v\nwant\n%+v (err %v)", gotAddress, wantAddress, err)
			}
		})
	}
}

// What repeats from object to object is kept once, not once per object.
func TestCompactSharesRepeatedStrings(t *testing.T) {
	// Strings built at run time, as the decoder makes them: one copy each.
	fresh := func(s string) string { return string([]byte(s)) }
	first, second := addressOf(fresh(v1alpha1.GroupVersion.Group), fresh(v1alpha1.MetalVRFIPPoolKind)), addressOf(fresh(v1alpha1.GroupVersion.Group), fresh(v1alpha1.MetalVRFIPPoolKind))
	second.Namespace, second.Spec.Gateway = fresh(first.Namespace), fresh(first.Spec.Gateway)
	a, _ := compactAddress(first)
	b, _ := compactAddress(second)
	for _, f := range []struct {
		what string
		of   func(*ipamv1.IPAddress) string
	}{
		{"namespace", func(a *ipamv1.IPAddress) string { return a.Namespace }},
		{"pool kind", func(a *ipamv1.IPAddress) string { return a.Spec.PoolRef.Kind }},
		{"pool group", func(a *ipamv1.IPAddress) string { return a.Spec.PoolRef.APIGroup }},
		{"gateway", func(a *ipamv1.IPAddress) string { return a.Spec.Gateway }},
	} {
		if x, y := f.of(a.(*ipamv1.IPAddress)), f.of(b.(*ipamv1.IPAddress)); unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("the two IPAddresses' %s %q is kept twice", f.what, x)
		}
	}
}

// A tombstone (an object deleted while the watch was down) is left as it is.
func TestCompactLeavesTombstones(t *testing.T) {
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/c", Obj: claimOf("ipam.example.com", "ExamplePool")}
	for _, transform := range []func(any) (any, error){compactClaim, compactAddress} {
		if got, err := transform(tomb); err != nil || !equality.Semantic.DeepEqual(got, tomb) {
			t.Errorf("a tombstone became %+v (err %v)", got, err)
		}
	}
}
