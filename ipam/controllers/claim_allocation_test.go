package controllers

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestOwnsAddress: a claim adopts only the IPAddress handed out to it (its
// UID) from its pool, never one left by an earlier claim of the same name,
// maybe on another pool, that the cache still shows.
func TestOwnsAddress(t *testing.T) {
	pool := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool"}}
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "new"}}
	address := func(uid types.UID, poolName string) *ipamv1.IPAddress {
		a := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: "c"},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: poolName},
				Address:  "10.0.0.2",
			},
		}
		if uid != "" {
			a.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: "c", UID: uid,
			}}
		}
		return a
	}
	s := &claimScope{claim: claim, pool: pool}
	for _, tc := range []struct {
		name    string
		address *ipamv1.IPAddress
		owns    bool
	}{
		{"the claim's, from its pool", address("new", "pool"), true},
		{"an earlier claim's of the same name", address("old", "pool"), false},
		{"an earlier claim's, from another pool", address("old", "other"), false},
		{"the claim's UID but another pool", address("new", "other"), false},
		{"no owner reference", address("", "pool"), false},
	} {
		err := s.ownsAddress(tc.address)
		if got := err == nil; got != tc.owns {
			t.Errorf("%s: ownsAddress() = %v, want owned %v", tc.name, err, tc.owns)
		}
		if err != nil && !errors.Is(err, errNotOurAddress) {
			t.Errorf("%s: error %v is not errNotOurAddress", tc.name, err)
		}
	}
}
