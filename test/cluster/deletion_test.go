package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
