package poolref

import (
	"testing"

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
