package invariant

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
)

// pool is 10.0.0.0/29 with gateway .1 and .2 excluded: .3 to .6 usable.
var pool = SubnetPool("MetalVRFIPPool", "small", netip.MustParsePrefix("10.0.0.0/29"),
	netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))

func claim(name, uid, address string) ipamv1.IPAddressClaim {
	return ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{Kind: pool.Kind, Name: pool.Name}},
		Status:     ipamv1.IPAddressClaimStatus{AddressRef: ipamv1.IPAddressReference{Name: address}},
	}
}

func address(claimName, ownerUID, addr string) ipamv1.IPAddress {
	return ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: claimName, OwnerReferences: []metav1.OwnerReference{
			{Kind: "IPAddressClaim", Name: claimName, UID: types.UID(ownerUID)},
		}},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: claimName},
			PoolRef:  ipamv1.IPPoolReference{Kind: pool.Kind, Name: pool.Name},
			Address:  addr,
		},
	}
}

func TestSubnetPoolLeavesOutTheReservedAddresses(t *testing.T) {
	if got := pool.size(); got != 4 {
		t.Errorf("size = %d, want 4 (.3 to .6)", got)
	}
	for _, a := range []string{"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.7"} {
		if addr := netip.MustParseAddr(a); pool.Usable.Contains(addr) || !pool.Reserved.Contains(addr) {
			t.Errorf("%s: usable %v, reserved %v; want reserved only", a, pool.Usable.Contains(addr), pool.Reserved.Contains(addr))
		}
	}
}

func TestCheckAcceptsAConsistentNamespace(t *testing.T) {
	claims := []ipamv1.IPAddressClaim{claim("a", "ua", "a"), claim("b", "ub", "b")}
	addresses := []ipamv1.IPAddress{address("a", "ua", "10.0.0.3"), address("b", "ub", "10.0.0.4")}
	if got := Check([]Pool{pool}, claims, addresses); len(got) != 0 {
		t.Errorf("violations: %v", got)
	}
}

// TestCheckFindsEachViolation breaks every invariant once and wants each
// reported with the objects involved.
func TestCheckFindsEachViolation(t *testing.T) {
	deleting := claim("deleting", "ud", "")
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	claims := []ipamv1.IPAddressClaim{
		claim("a", "ua", "a"), claim("b", "ub", "b"),
		claim("recreated", "new", ""), claim("waiting", "uw", ""),
		claim("dangling", "ux", "dangling"), deleting,
	}
	addresses := []ipamv1.IPAddress{
		address("a", "ua", "10.0.0.3"),
		address("b", "ub", "10.0.0.3"),
		address("recreated", "old", "10.0.0.1"),
		address("gone", "ug", "10.0.0.9"),
	}
	want := map[Kind][]string{
		Duplicate:       {"10.0.0.3 is held by 2 IPAddresses", "a (claim a, uid ua)", "b (claim b, uid ub)"},
		ReservedAddress: {"recreated holds 10.0.0.1"},
		OutsidePool:     {"gone holds 10.0.0.9"},
		Orphan:          {"recreated holds 10.0.0.1", "uid old: gone, recreated as uid new", "gone holds 10.0.0.9"},
		Dangling:        {"dangling (uid ux) names IPAddress dangling"},
		Unbound:         {"has 3 free addresses", "recreated, waiting"},
		Stuck:           {"deleting"},
	}
	got := map[Kind]string{}
	for _, v := range Check([]Pool{pool}, claims, addresses) {
		got[v.Kind] += v.Detail + "\n"
	}
	for kind, parts := range want {
		for _, part := range parts {
			if !strings.Contains(got[kind], part) {
				t.Errorf("%s: want %q in %q", kind, part, got[kind])
			}
		}
	}
	for kind := range got {
		if _, ok := want[kind]; !ok {
			t.Errorf("unexpected %s: %s", kind, got[kind])
		}
	}
}
