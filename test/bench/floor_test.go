package bench

import (
	"context"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// floorName names the floor provider in the benchmarks' figures.
const floorName = "floor"

// floor is the least a provider can do and still serve the IPAM contract:
// for each claim of its pool it creates the IPAddress (owned by the claim
// and the pool) and sets the claim's status.addressRef, and when a claim is
// gone it deletes the claim's IPAddress, as the garbage collector would
// (envtest has none). It writes no finalizer and no record, and hands out
// addresses from a counter: nothing keeps an address from being handed out
// twice after a restart or by a second replica. What it costs is what the
// contract's writes cost, the API server's ceiling for any provider on the
// same machine. Its pool is an InClusterIPPool, whose CRD the benchmarks'
// environments have, read only for the owner reference.
var floor = provider{
	name: floorName, start: startFloor, group: inclusterv1.GroupVersion.Group, kind: "InClusterIPPool",
	newPool: func() client.Object {
		return &inclusterv1.InClusterIPPool{Spec: inclusterv1.InClusterIPPoolSpec{
			Addresses: []string{poolCIDR}, Prefix: poolPrefix, Gateway: gateway,
		}}
	},
	// The floor keeps no count; it is only measured on empty pools.
	usedCount: func(client.Object) (int64, bool) { return 0, true },
}

// startFloor runs the floor's controller in this process with as many
// workers as ours.
func startFloor(env *testenv.Environment) (func(), error) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	r := &floorReconciler{client: mgr.GetClient()}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&ipamv1.IPAddressClaim{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, <-done
	}
	return func() { cancel(); <-done }, nil
}

type floorReconciler struct {
	client client.Client
	// next is the index (see poolAddress) of the next address handed out.
	next atomic.Int32
}

func (r *floorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	claim := &ipamv1.IPAddressClaim{}
	err := r.client.Get(ctx, req.NamespacedName, claim)
	if apierrors.IsNotFound(err) {
		// The IPAddress has the claim's name.
		address := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
		return ctrl.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, address))
	}
	if err != nil || claim.Status.AddressRef.Name != "" || !claim.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, err
	}
	pool := &inclusterv1.InClusterIPPool{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Spec.PoolRef.Name}, pool); err != nil {
		return ctrl.Result{}, err
	}
	address := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
			PoolRef:  claim.Spec.PoolRef,
			Address:  poolAddress(int(r.next.Add(1) - 1)).String(), Prefix: ptr.To[int32](poolPrefix), Gateway: gateway,
		},
	}
	if err := controllerutil.SetControllerReference(claim, address, scheme); err != nil {
		return ctrl.Result{}, err
	}
	notController := func(ref *metav1.OwnerReference) { ref.Controller = ptr.To(false) }
	if err := controllerutil.SetOwnerReference(pool, address, scheme, notController); err != nil {
		return ctrl.Result{}, err
	}
	// An IPAddress that exists already is this claim's, from a reconcile
	// whose status write has not been seen yet.
	if err := r.client.Create(ctx, address); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, err
	}
	patch := client.MergeFrom(claim.DeepCopy())
	claim.Status.AddressRef.Name = address.Name
	return ctrl.Result{}, r.client.Status().Patch(ctx, claim, patch)
}
