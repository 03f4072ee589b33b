package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go4.org/netipx"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// mixedVRF is an address pool and a prefix pool (/28s) of one VRF over the
// same 10.9.0.0/26, gateway 10.9.0.1: one allocation domain.
func mixedVRF() (addresses, prefixes *v1alpha1.MetalVRFIPPool) {
	pool := func(name string) *v1alpha1.MetalVRFIPPool {
		p := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: "uid-" + "name", Generation: 1, ResourceVersion: "1"},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{"10.9.0.0/26"}, Prefix: ptr.To(int32(26)), Gateway: "10.9.0.1",
				VRF: &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
			},
			Status: v1alpha1.MetalVRFIPPoolStatus{VRF: &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}},
		}
		p.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.MetalVRFIPPoolKind))
		return p
	}
	addresses, prefixes = pool("addresses"), pool("prefixes")
	addresses.UID, prefixes.UID = "addresses-uid", "prefixes-uid"
	prefixes.Spec.AllocationPrefixLength = ptr.To(int32(28))
	return addresses, prefixes
}

func mustAcquire(t *testing.T, reg *Registry, pool v1alpha1.Pool, claim Claim, want string) {
	t.Helper()
	ip, subnet, err := reg.Acquire(context.Background(), pool, claim, netip.Addr{})
	if err != nil {
		t.Fatalf("Acquire(%s) = %v", claim.Name, err)
	}
	if got := netip.PrefixFrom(ip, subnet.Prefix.Bits()).String(); got != want {
		t.Fatalf("Acquire(%s) = %s, want %s", claim.Name, got, want)
	}
}

// An address pool and a prefix pool of one VRF never hand out one address
// twice: each skips what the other holds, a released prefix is reused by
// either, and a registry seeded afresh from the records knows it all.
func TestPrefixAndAddressPoolsShareAVRF(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	reg := New(store, nil, "here")
	addrPool, prefixPool := mixedVRF()
	for _, pool := range []v1alpha1.Pool{addrPool, prefixPool} {
		// Both built before anything is held: what one hands out reaches
		// the other's allocator as it happens, not through a rebuild.
		if _, err := reg.Stats(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}

	mustAcquire(t, reg, prefixPool, claimNamed("a", "p1"), "10.9.0.16/28") // 10.9.0.0/28 holds the gateway
	mustAcquire(t, reg, prefixPool, claimNamed("a", "p2"), "10.9.0.32/28")
	for i := 2; i <= 15; i++ {
		mustAcquire(t, reg, addrPool, claimNamed("a", fmt.Sprintf("a%d", i)), fmt.Sprintf("10.9.0.%d/26", i))
	}
	mustAcquire(t, reg, addrPool, claimNamed("a", "a48"), "10.9.0.48/26") // past both prefixes
	if _, _, err := reg.Acquire(ctx, prefixPool, claimNamed("a", "p3"), netip.Addr{}); !errors.Is(err, cidr.ErrExhausted) {
		t.Fatalf("a /28 holding 10.9.0.48 was handed out: %v", err)
	}
	if rec := store.records["vrf/project-1/vrf-1"][netip.MustParseAddr("10.9.0.16")]; rec.Holder.Bits != 28 {
		t.Errorf("the record of 10.9.0.16/28 says length %d, want 28", rec.Holder.Bits)
	}
	if s, err := reg.Stats(ctx, prefixPool); err != nil || s.Total.String() != "3" || s.Free.Sign() != 0 || s.Used != 2 {
		t.Errorf("Stats = %+v, %v; want 3 prefixes, none free, 2 used", s, err)
	}

	// A registry of another process, seeded from the records, agrees.
	other := New(store, nil, "here")
	if _, _, err := other.Acquire(ctx, prefixPool, claimNamed("a", "p3"), netip.Addr{}); !errors.Is(err, cidr.ErrExhausted) {
		t.Fatalf("after seeding, a /28 holding 10.9.0.48 was handed out: %v", err)
	}
	mustAcquire(t, other, addrPool, claimNamed("a", "a49"), "10.9.0.49/26")

	// The last address of a /28 released, the prefix is free; a prefix
	// released, its addresses are.
	for _, name := range []string{"a48", "a49"} {
		if _, err := other.Release(ctx, poolref.KeyOf(addrPool), claimNamed("a", name)); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, other, prefixPool, claimNamed("a", "p3"), "10.9.0.48/28")
	if _, err := other.Release(ctx, poolref.KeyOf(prefixPool), claimNamed("a", "p1")); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, other, addrPool, claimNamed("a", "a16"), "10.9.0.16/26")
	mustAcquire(t, other, addrPool, claimNamed("a", "a17"), "10.9.0.17/26")
}

// TestPrefixAndAddressPoolsModel drives the two pools of one VRF with random
// claims, releases and restarts (a registry seeded afresh from the store),
// and checks after every step that no two records share an address: a
// prefix record spans its whole prefix.
func TestPrefixAndAddressPoolsModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 7))
			store := newMemStore()
			reg := New(store, nil, "here")
			addrPool, prefixPool := mixedVRF()
			pools := []v1alpha1.Pool{addrPool, prefixPool}
			held := map[Claim]v1alpha1.Pool{}
			for step := range 400 {
				switch op := rng.IntN(10); {
				case op < 6:
					pool := pools[rng.IntN(2)]
					claim := claimNamed("a", fmt.Sprintf("c%d", step))
					_, _, err := reg.Acquire(ctx, pool, claim, netip.Addr{})
					switch {
					case err == nil:
						held[claim] = pool
					case !errors.Is(err, cidr.ErrExhausted):
						t.Fatalf("step %d: Acquire = %v", step, err)
					}
				case op < 9 && len(held) > 0:
					claims := slices.SortedFunc(maps.Keys(held), func(a, b Claim) int { return strings.Compare(a.Name, b.Name) })
					claim := claims[rng.IntN(len(claims))]
					if _, err := reg.Release(ctx, poolref.KeyOf(held[claim]), claim); err != nil {
						t.Fatal(err)
					}
					delete(held, claim)
				case op == 9:
					reg = New(store, nil, "here")
				}
				var spans []netipx.IPRange
				for ip, rec := range store.records["vrf/project-1/vrf-1"] {
					spans = append(spans, rec.Holder.span(ip))
				}
				if i, j, overlap := cidr.Overlap(spans); overlap {
					t.Fatalf("step %d: records %s and %s overlap", step, spans[i], spans[j])
				}
			}
		})
	}
}

// A VRF holds both families and its pools one each: what a pool of one
// family holds takes nothing in a pool of the other, though an IPv6
// address shifted like an IPv4 prefix number reads as one (fd00::a00:1 as
// 10.0.0.0/24's).
func TestPrefixPoolIgnoresTheOtherFamily(t *testing.T) {
	ctx := context.Background()
	reg := New(newMemStore(), nil, "here")
	v6, v4 := mixedVRF()
	v6.Spec.Addresses, v6.Spec.Prefix, v6.Spec.Gateway, v6.Spec.VRF.IPFamily = []string{"fd00::a00:0/120"}, ptr.To(int32(120)), "", v1alpha1.IPv6Family
	v4.Spec.Addresses, v4.Spec.Prefix, v4.Spec.Gateway, v4.Spec.AllocationPrefixLength = []string{"10.0.0.0/8"}, ptr.To(int32(8)), "", ptr.To(int32(24))
	if _, err := reg.Stats(ctx, v4); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, reg, v6, claimNamed("a", "v6"), "fd00::a00:1/120")
	mustAcquire(t, reg, v4, claimNamed("a", "v4"), "10.0.0.0/24")
}
