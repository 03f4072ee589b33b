package records_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// TestTheAPIServerFencesADeposedLeader: a leader that passed its own check
// of its lease, then froze while another process took the lease over, has
// its record refused by the API server (config/ipam/fence) when it wakes,
// and the allocation fails as fenced; the new leader's records, the
// webhook's, and those of a manager without leader election are admitted.
func TestTheAPIServerFencesADeposedLeader(t *testing.T) {
	ctx := context.Background()
	env, ns, _ := startStore(ctx, t)
	k8s := env.Client

	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fenced"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.5.0.0/29"}, Prefix: ptr.To(int32(29)), Gateway: "10.5.0.1"},
	}
	if err := k8s.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	claim := func(name string) registry.Claim {
		t.Helper()
		c := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
				APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name,
			}},
		}
		if err := k8s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, UID: c.UID}
	}
	// The leader election Lease, as the manager's lock writes it.
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader", Labels: map[string]string{v1alpha1.LeaderElectionLabel: "true"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("old")},
	}
	if err := k8s.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}

	// The old leader's own fence answers from its clock: it led when it
	// checked, and knows it does not once it has woken.
	var answers []error
	fence := func() error {
		answer := answers[0]
		answers = answers[1:]
		return answer
	}
	old := registry.New(records.New(k8s, k8s, ns, records.Writer{Identity: "old", Lease: "leader"}), fence, "here")
	answers = []error{nil, nil}
	first, _, err := old.Acquire(ctx, pool, claim("first"), netip.Addr{})
	if err != nil {
		t.Fatalf("the leader could not allocate: %v", err)
	}

	lease.Spec.HolderIdentity = ptr.To("new")
	if err := k8s.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	deposed := fmt.Errorf("%w: frozen past its lease", registry.ErrFenced)
	answers = []error{nil, deposed}
	second := claim("second")
	if ip, _, err := old.Acquire(ctx, pool, second, netip.Addr{}); !errors.Is(err, registry.ErrFenced) {
		t.Fatalf("the deposed leader allocated %s (err %v); want ErrFenced", ip, err)
	} else {
		t.Logf("the deposed leader's allocation failed: %v", err)
	}
	byWriter := func() map[string]int {
		t.Helper()
		var list coordinationv1.LeaseList
		if err := k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.AllocationFencedLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, l := range list.Items {
			counts[l.Annotations[v1alpha1.AllocationRecordedByAnnotation]]++
		}
		return counts
	}
	if got := byWriter(); got["old"] != 1 || len(got) != 1 {
		t.Fatalf("fenced records by writer %v; want only the one the old leader wrote while it led", got)
	}

	leader := registry.New(records.New(k8s, k8s, ns, records.Writer{Identity: "new", Lease: "leader"}), nil, "here")
	ip, _, err := leader.Acquire(ctx, pool, second, netip.Addr{})
	if err != nil {
		t.Fatalf("the new leader could not allocate: %v", err)
	}
	if ip == first {
		t.Fatalf("the new leader handed out %s twice", ip)
	}
	if got := byWriter(); got["new"] != 1 {
		t.Fatalf("fenced records by writer %v; want one by the new leader", got)
	}

	// The webhook's records, which any replica writes, and those of a
	// manager without leader election carry no fence.
	domain := registry.DomainOf(pool)
	admitted := registry.Record{Address: netip.MustParseAddr("10.5.0.5"), ByAdmission: true,
		Holder: registry.Holder{Pool: poolref.KeyOf(pool), Claim: claim("moved")}}
	if err := records.New(k8s, k8s, ns, records.Writer{Identity: "old", Lease: "leader"}).Confirm(ctx, domain, admitted); err != nil {
		t.Fatalf("the deposed leader's webhook could not record an IPAddress being created: %v", err)
	}
	solo := registry.Record{Address: netip.MustParseAddr("10.5.0.6"), Holder: registry.Holder{Pool: poolref.KeyOf(pool), Claim: claim("solo")}}
	if err := records.New(k8s, k8s, ns, records.Writer{Identity: "solo"}).Reserve(ctx, domain, solo); err != nil {
		t.Fatalf("a manager without leader election could not record: %v", err)
	}
}
