package records_test

import (
	"context"
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

// intruding deletes as its Client does, and at once records the deleted
// record's address for another claim through standby: another writer (a
// standby replica's webhook, an old Pod of a rolling update) that records
// the address while it has no record.
type intruding struct {
	client.Client
	t        *testing.T
	domain   string
	standby  *records.Store
	intruder registry.Holder
	deleted  []string
}

func (c *intruding) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.Client.Delete(ctx, obj, opts...); err != nil {
		return err
	}
	ip := netip.MustParseAddr(obj.GetAnnotations()[v1alpha1.AllocationAddressAnnotation])
	c.deleted = append(c.deleted, ip.String())
	if err := c.standby.Reserve(ctx, c.domain, registry.Record{Address: ip, Holder: c.intruder}); err != nil {
		c.t.Errorf("the intruder recording %s: %v", ip, err)
	}
	return nil
}

// TestSeedingNeverLeavesANamedAddressWithoutARecord: seeding finds records
// whose claims are gone. One whose address an IPAddress names was deleted
// and written again for the IPAddress, and another writer recording the
// address in between took it: its IPAddress's claim and the intruder then
// held it both. Now such a record stays (its IPAddress names the same
// claim) or is rewritten in place (it names another): nothing is deleted
// but the record no IPAddress names, and the intruder gets only that one.
func TestSeedingNeverLeavesANamedAddressWithoutARecord(t *testing.T) {
	ctx := context.Background()
	env, ns, _ := startStore(ctx, t)
	pool := &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-shared"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.7.0.0/29"}, Prefix: ptr.To[int32](29), Gateway: "10.7.0.1"},
	}
	live := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "live"},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: pool.Name,
		}},
	}
	for _, obj := range []client.Object{pool, live} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	key, domain := poolref.KeyOf(pool), registry.DomainOf(pool)
	gone := func(name string) registry.Claim {
		return registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, UID: types.UID("uid-of-" + name)}
	}
	liveClaim := registry.Claim{NamespacedName: client.ObjectKeyFromObject(live), UID: live.UID}
	// .2: its IPAddress names the same gone claim (a global pool's
	// IPAddress on the source of a move); .3: its IPAddress names another,
	// live claim; .4: no IPAddress names it.
	writer := records.New(env.Client, env.Client, ns, records.Writer{Identity: "before"})
	for ip, claim := range map[string]registry.Claim{"10.7.0.2": gone("moved"), "10.7.0.3": gone("old"), "10.7.0.4": gone("stopped")} {
		if err := writer.Reserve(ctx, domain, registry.Record{Address: netip.MustParseAddr(ip), Holder: registry.Holder{Pool: key, Claim: claim}}); err != nil {
			t.Fatal(err)
		}
	}
	for ip, claim := range map[string]registry.Claim{"10.7.0.2": gone("moved"), "10.7.0.3": liveClaim} {
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a" + netip.MustParseAddr(ip).String()[7:], OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID,
			}}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
				PoolRef:  live.Spec.PoolRef, Address: ip, Prefix: ptr.To[int32](29), Gateway: "10.7.0.1",
			},
		}
		if err := env.Client.Create(ctx, address); err != nil {
			t.Fatal(err)
		}
	}

	c := &intruding{
		Client: env.Client, t: t, domain: domain,
		standby:  records.New(env.Client, env.Client, ns, records.Writer{Identity: "standby"}),
		intruder: registry.Holder{Pool: key, Claim: gone("intruder")},
	}
	reg := registry.New(records.New(c, env.Client, ns, records.Writer{Identity: "seeding"}), nil, "this-cluster")
	if _, err := reg.Stats(ctx, pool); err != nil {
		t.Fatal(err)
	}

	var leases coordinationv1.LeaseList
	if err := env.Client.List(ctx, &leases, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	holders := map[string]string{}
	for _, l := range leases.Items {
		holders[l.Annotations[v1alpha1.AllocationAddressAnnotation]] = l.Annotations[v1alpha1.AllocationClaimAnnotation] + " " + l.Annotations[v1alpha1.AllocationClaimUIDAnnotation]
	}
	want := map[string]string{
		"10.7.0.2": ns + "/moved uid-of-moved",
		"10.7.0.3": ns + "/live " + string(live.UID),
		"10.7.0.4": ns + "/intruder uid-of-intruder",
	}
	for ip, holder := range want {
		if holders[ip] != holder {
			t.Errorf("the record of %s names %q; want %q", ip, holders[ip], holder)
		}
	}
	if len(c.deleted) != 1 || c.deleted[0] != "10.7.0.4" {
		t.Errorf("seeding deleted the records of %v; want only 10.7.0.4's, which no IPAddress names", c.deleted)
	}
}
