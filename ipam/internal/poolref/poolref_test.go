package poolref

import (
	"testing"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

func TestParse(t *testing.T) {
	for _, key := range []Key{
		{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "ns", Name: "pool"},
		{Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: "pool"},
	} {
		if got, ok := Parse(key.String()); !ok || got != key {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", key.String(), got, ok, key)
		}
	}
	for _, bad := range []string{"", "pool", "InClusterIPPool/ns/pool", "MetalVRFIPPool/pool", "GlobalMetalVRFIPPool/ns/pool"} {
		if got, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) = %+v, want no key", bad, got)
		}
	}
}

func TestAdoptedRefs(t *testing.T) {
	group := v1alpha1.GroupVersion.Group
	for _, tc := range []struct {
		kind string
		want Key
	}{
		{v1alpha1.InClusterIPPoolKind, Key{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "ns", Name: "incluster-pool"}},
		{v1alpha1.GlobalInClusterIPPoolKind, Key{Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: "incluster-pool"}},
	} {
		ref := ipamv1.IPPoolReference{APIGroup: group, Kind: tc.kind, Name: "pool"}
		if got, ok := For(ref, "ns"); !ok || got != tc.want {
			t.Errorf("For(%s) = %+v, %v; want %+v", tc.kind, got, ok, tc.want)
		}
		if !Adopted(ref) {
			t.Errorf("Adopted(%s) = false", tc.kind)
		}
		companion, _ := New(tc.want.Kind)
		companion.SetName(tc.want.Name)
		companion.SetAnnotations(map[string]string{v1alpha1.AdoptedFromAnnotation: tc.kind + "/pool"})
		if from, ok := AdoptedFrom(companion); !ok || from != "pool" {
			t.Errorf("AdoptedFrom(%s companion) = %q, %v", tc.kind, from, ok)
		}
		// The annotation of the other kind is not this companion's.
		other := v1alpha1.InClusterIPPoolKind
		if tc.kind == other {
			other = v1alpha1.GlobalInClusterIPPoolKind
		}
		companion.SetAnnotations(map[string]string{v1alpha1.AdoptedFromAnnotation: other + "/pool"})
		if from, ok := AdoptedFrom(companion); ok {
			t.Errorf("AdoptedFrom(%s companion naming a %s) = %q, want none", tc.kind, other, from)
		}
	}
	if Adopted(ipamv1.IPPoolReference{APIGroup: group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: "pool"}) {
		t.Error("Adopted(MetalVRFIPPool) = true")
	}
}
