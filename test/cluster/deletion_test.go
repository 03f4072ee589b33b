package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// deletions deletes a claim of the flow's pool with each propagation
// policy, the garbage collector of a real cluster at work: each claim and
// its IPAddress must go (a foreground deletion waits for the IPAddress the
// claim owns, whose finalizer the provider removes as it releases), and the
// next claim must get the released address, the pool's lowest free one.
// Nothing else allocates from the pool meanwhile: the machines are all
// provisioned.
func (f *flow) deletions(ctx context.Context, t *testing.T) {
	for _, policy := range []metav1.DeletionPropagation{
		metav1.DeletePropagationForeground, metav1.DeletePropagationBackground, metav1.DeletePropagationOrphan,
	} {
		claim := f.boundClaim(ctx, t, "deleted-"+strings.ToLower(string(policy)))
		released := f.addressOf(ctx, t, claim)
		if err := f.k8s.Delete(ctx, claim, client.PropagationPolicy(policy)); err != nil {
			t.Fatal(err)
		}
		f.claimGone(ctx, t, claim.Name, fmt.Sprintf("the claim deleted with propagation %s", policy))
		next := f.boundClaim(ctx, t, "after-"+claim.Name)
		if got := f.addressOf(ctx, t, next); got != released {
			t.Errorf("after the %s deletion the next claim got %s, not the released %s", policy, got, released)
		}
		// Gone before the next round, whose claim must get its address.
		if err := f.k8s.Delete(ctx, next); err != nil {
			t.Fatal(err)
		}
		f.claimGone(ctx, t, next.Name, "the next claim")
		t.Logf("propagation %s: claim and IPAddress gone, %s handed out again", policy, released)
	}
}

// claimGone waits until the claim named name and its IPAddress are gone.
func (f *flow) claimGone(ctx context.Context, t *testing.T, name, what string) {
	t.Helper()
	waitFor(ctx, t, 2*time.Minute, what+" and its IPAddress gone", func() error {
		for _, obj := range []client.Object{&ipamv1.IPAddressClaim{}, &ipamv1.IPAddress{}} {
			err := f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: name}, obj)
			if err == nil {
				return fmt.Errorf("%T %s is still there (finalizers %v)", obj, name, obj.GetFinalizers())
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
}

// boundClaim creates a claim of the flow's pool and waits until it is bound.
func (f *flow) boundClaim(ctx context.Context, t *testing.T, name string) *ipamv1.IPAddressClaim {
	t.Helper()
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: flowNamespace, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: nodesPool,
		}},
	}
	if err := f.k8s.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "claim "+name+" bound", func() error {
		if err := f.k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.AddressRef.Name == "" {
			return fmt.Errorf("not bound: %v", claim.Status.Conditions)
		}
		return nil
	})
	return claim
}

// addressOf reads the address a bound claim's IPAddress holds.
func (f *flow) addressOf(ctx context.Context, t *testing.T, claim *ipamv1.IPAddressClaim) string {
	t.Helper()
	address := &ipamv1.IPAddress{}
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: claim.Status.AddressRef.Name}, address); err != nil {
		t.Fatal(err)
	}
	return address.Spec.Address
}

// retirement is what clusterctl move leaves of a global pool's claim on the
// source, with the garbage collector of a real cluster at work: the claim
// is deleted as move deletes it while its Cluster is paused (the claim's
// webhook, through the match conditions of the installed configuration,
// marks its IPAddress moved), the
// collector strips the IPAddress's owner reference to it (the pool's keeps
// the IPAddress), and only then, the Cluster deleted the same way, does the
// IPAM manager see the orphan. Its address must be retired, not held by
// the claim that is gone (the next seeding would sweep that record and free
// the address here while the target holds it): a claim asking for it is
// refused as moved away. The claim's Cluster is one of its own, so that the
// flow's goes on running: the manager retires only the addresses of a
// Cluster that is gone.
func (f *flow) retirement(ctx context.Context, t *testing.T) {
	pool := &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "moved-away"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.66.0.0/29"}, Prefix: ptr.To[int32](29), Gateway: "10.66.0.1"},
	}
	if err := f.k8s.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Cluster API's webhook wants a reference; the PacketCluster it names
	// never exists, so no provider acts on this Cluster.
	moving := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: flowNamespace, Name: "moving-away"}, Spec: clusterv1.ClusterSpec{
		Paused:            ptr.To(false),
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: "moving-away"},
	}}
	if err := f.k8s.Create(ctx, moving); err != nil {
		t.Fatal(err)
	}
	claim := f.claimOf(ctx, t, pool, "moved", map[string]string{clusterv1.ClusterNameLabel: moving.Name}, nil)
	address := &ipamv1.IPAddress{}
	waitFor(ctx, t, 2*time.Minute, "the claim bound", func() error {
		if err := f.k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.AddressRef.Name == "" {
			return fmt.Errorf("not bound: %v", claim.Status.Conditions)
		}
		return f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: claim.Status.AddressRef.Name}, address)
	})

	if err := f.k8s.Patch(ctx, moving, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))); err != nil {
		t.Fatal(err)
	}
	deleteAsMove(ctx, t, f.k8s, claim)
	waitFor(ctx, t, 2*time.Minute, "the garbage collector strips the IPAddress's owner reference to the deleted claim", func() error {
		if err := f.k8s.Get(ctx, client.ObjectKeyFromObject(address), address); err != nil {
			return err
		}
		for _, ref := range address.OwnerReferences {
			if ref.Kind == "IPAddressClaim" {
				return fmt.Errorf("owner references %v", address.OwnerReferences)
			}
		}
		return nil
	})
	deleteAsMove(ctx, t, f.k8s, moving)
	waitFor(ctx, t, 2*time.Minute, "the orphaned IPAddress deleted", func() error {
		err := f.k8s.Get(ctx, client.ObjectKeyFromObject(address), &ipamv1.IPAddress{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("IPAddress %s is still there", address.Name)
	})

	again := f.claimOf(ctx, t, pool, "wants-moved", nil, map[string]string{v1alpha1.RequestedAddressAnnotation: address.Spec.Address})
	waitFor(ctx, t, 2*time.Minute, "the claim asking for the moved address refused", func() error {
		if err := f.k8s.Get(ctx, client.ObjectKeyFromObject(again), again); err != nil {
			return err
		}
		for _, c := range again.Status.Conditions {
			if c.Type == clusterv1.ReadyCondition && strings.Contains(c.Message, "moved to another management cluster") {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", again.Status.Conditions)
	})
	t.Logf("%s retired after the garbage collector stripped its claim's owner reference", address.Spec.Address)
	for _, obj := range []client.Object{again, pool} {
		if err := f.k8s.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

// claimOf creates a claim of pool in the flow's namespace.
func (f *flow) claimOf(ctx context.Context, t *testing.T, pool *v1alpha1.GlobalMetalVRFIPPool, name string, labels, annotations map[string]string) *ipamv1.IPAddressClaim {
	t.Helper()
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: flowNamespace, Name: name, Labels: labels, Annotations: annotations},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: pool.Name,
		}},
	}
	if err := f.k8s.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

// deleteAsMove deletes obj the way clusterctl move deletes what it moved
// from the source: annotated delete-for-move, deleted, then its finalizers
// dropped.
func deleteAsMove(ctx context.Context, t *testing.T, k8s client.Client, obj client.Object) {
	t.Helper()
	forMove := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+clusterctlv1.DeleteForMoveAnnotation+`":""}}}`))
	if err := k8s.Patch(ctx, obj, forMove); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}
