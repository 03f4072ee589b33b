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
	kinds := []string{
		v1alpha1.InClusterIPPoolKind, v1alpha1.GlobalInClusterIPPoolKind,
		v1alpha1.InClusterPrefixPoolKind, v1alpha1.GlobalInClusterPrefixPoolKind,
	}
	for _, tc := range []struct {
		kind string
		want Key
	}{
		// The address pools' companions keep the names adoptions made
		// before prefix pools gave them.
		{v1alpha1.InClusterIPPoolKind, Key{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "ns", Name: "incluster-pool"}},
		{v1alpha1.GlobalInClusterIPPoolKind, Key{Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: "incluster-pool"}},
		{v1alpha1.InClusterPrefixPoolKind, Key{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "ns", Name: "inclusterprefix-pool"}},
		{v1alpha1.GlobalInClusterPrefixPoolKind, Key{Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: "inclusterprefix-pool"}},
	} {
		ref := ipamv1.IPPoolReference{APIGroup: group, Kind: tc.kind, Name: "pool"}
		if got, ok := For(ref, "ns"); !ok || got != tc.want {
			t.Errorf("For(%s) = %+v, %v; want %+v", tc.kind, got, ok, tc.want)
		}
		if !Adopted(ref) {
			t.Errorf("Adopted(%s) = false", tc.kind)
		}
		if !IsCompanionName(tc.want.Name) {
			t.Errorf("IsCompanionName(%q) = false", tc.want.Name)
		}
		companion, _ := New(tc.want.Kind)
		companion.SetName(tc.want.Name)
		companion.SetAnnotations(map[string]string{v1alpha1.AdoptedFromAnnotation: tc.kind + "/pool"})
		if from, ok := AdoptedFrom(companion); !ok || from != ref {
			t.Errorf("AdoptedFrom(%s companion) = %+v, %v", tc.kind, from, ok)
		}
		// The annotation of any other kind is not this companion's.
		for _, other := range kinds {
			if other == tc.kind {
				continue
			}
			companion.SetAnnotations(map[string]string{v1alpha1.AdoptedFromAnnotation: other + "/pool"})
			if from, ok := AdoptedFrom(companion); ok {
				t.Errorf("AdoptedFrom(%s companion naming a %s) = %+v, want none", tc.kind, other, from)
			}
		}
	}
	if Adopted(ipamv1.IPPoolReference{APIGroup: group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: "pool"}) {
		t.Error("Adopted(MetalVRFIPPool) = true")
	}
}

// FuzzCompanionNamesNeverCollide: an address pool and a prefix pool of one
// scope never get one companion name, whatever their names (one starting
// with the other's companion prefix included).
func FuzzCompanionNamesNeverCollide(f *testing.F) {
	for _, seed := range [][2]string{{"a", "a"}, {"prefix-a", "a"}, {"a", "prefix-a"}, {"-a", "a"}, {"incluster-a", "inclusterprefix-a"}, {"", ""}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, address, prefix string) {
		for _, scope := range [][2]string{
			{v1alpha1.InClusterIPPoolKind, v1alpha1.InClusterPrefixPoolKind},
			{v1alpha1.GlobalInClusterIPPoolKind, v1alpha1.GlobalInClusterPrefixPoolKind},
		} {
			if a, p := CompanionName(scope[0], address), CompanionName(scope[1], prefix); a == p {
				t.Errorf("%s %q and %s %q share the companion %q", scope[0], address, scope[1], prefix, a)
			}
		}
	})
}
