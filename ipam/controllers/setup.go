// Package controllers holds the IPAM provider's controllers: the claim
// handler that plugs into ipamutil.ClaimReconciler, the registry that hands
// out addresses, and the pool reconciler that keeps pool status and deletion
// protection.
package controllers

import (
	"context"
	"fmt"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// Options configure the controllers.
type Options struct {
	// WatchFilterValue restricts reconciliation to objects labelled
	// cluster.x-k8s.io/watch-filter=<value>, for sharding.
	WatchFilterValue string
	// Concurrency is the number of claims, and of pools, reconciled at once.
	Concurrency int
}

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools;globalmetalvrfippools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools/status;globalmetalvrfippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools/finalizers;globalmetalvrfippools/finalizers,verbs=update
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the claim and pool controllers with mgr.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.Concurrency < 1 {
		opts.Concurrency = 1
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &ipamv1.IPAddressClaim{}, unboundClaimsByPool, indexUnboundClaim); err != nil {
		return fmt.Errorf("indexing claims by pool: %w", err)
	}

	reg := newRegistry(mgr.GetAPIReader())
	adapter := &ProviderAdapter{
		client:      mgr.GetClient(),
		reader:      mgr.GetAPIReader(),
		recorder:    mgr.GetEventRecorderFor("metal-vrf-ipam"),
		registry:    reg,
		concurrency: opts.Concurrency,
		releases:    newReleases(v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind),
	}
	claims := &ipamutil.ClaimReconciler{
		Client:           mgr.GetClient(),
		Scheme:           mgr.GetScheme(),
		WatchFilterValue: opts.WatchFilterValue,
		Adapter:          adapter,
	}
	if err := claims.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the claim controller: %w", err)
	}

	for _, kind := range []string{v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind} {
		pools := &poolReconciler{client: mgr.GetClient(), registry: reg, recorder: adapter.recorder, releases: adapter.releases, kind: kind}
		if err := pools.setupWithManager(ctx, mgr, opts); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", kind, err)
		}
	}
	return nil
}
