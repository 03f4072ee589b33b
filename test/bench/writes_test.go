package bench

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// ledgerBlock and ledgerBatch shape the ledger write that BenchmarkClaimWrites
// prices: one object per block of ledgerBlock addresses, each update
// recording ledgerBatch more of them.
const (
	ledgerBlock = 256
	ledgerBatch = 8
)

// BenchmarkClaimWrites prices each write a claim costs, one kind at a time,
// on a fresh API server with no manager: bindClaims writes of the kind from
// creators goroutines, as the claims of BenchmarkBindClaims make them, and
// the CPU time of the API server, etcd and this process per write
// (cpu-ms/<write>). The writes are those of our claim reconciler (see
// ipam/controllers): the claim's creation, its release finalizer (the
// default install only), its allocation record (a Lease), its IPAddress and
// its status. It also prices a write the claims do not make, for comparison:
// a record that holds a block of ledgerBlock addresses in one object (a
// ConfigMap here), updated with optimistic concurrency ledgerBatch addresses
// at a time, as a block ledger with a group commit would write its records
// (cpu-ms/ledger-update per update, cpu-ms/ledger-address per address).
func BenchmarkClaimWrites(b *testing.B) {
	setup(b)
	ctx, cancel := context.WithTimeout(b.Context(), scenarioTimeout)
	defer cancel()
	b.StopTimer()
	defer b.StartTimer()
	for range b.N {
		costs, err := priceWrites(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range costs {
			b.ReportMetric(c.cpuMs, "cpu-ms/"+c.name)
		}
	}
}

type writeCost struct {
	name  string
	cpuMs float64
}

func priceWrites(ctx context.Context) ([]writeCost, error) {
	env, err := testenv.Start(testenv.Options{InClusterCRDs: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	k8s := env.Client
	ns := "writes"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: poolName},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{poolCIDR}, Prefix: ptr.To[int32](poolPrefix), Gateway: gateway},
	}
	if err := k8s.Create(ctx, pool); err != nil {
		return nil, err
	}
	pool.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.MetalVRFIPPoolKind))
	claims := make([]*ipamv1.IPAddressClaim, bindClaims)

	steps := []struct {
		name  string
		n     int
		write func(i int) error
	}{
		{"claim-create", bindClaims, func(i int) error {
			claims[i] = &ipamv1.IPAddressClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%05d", i)},
				Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
					APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: poolName,
				}},
			}
			return k8s.Create(ctx, claims[i])
		}},
		{"claim-finalizer", bindClaims, func(i int) error {
			claim := claims[i]
			patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.AddFinalizer(claim, ipamutil.ReleaseAddressFinalizer)
			return k8s.Patch(ctx, claim, patch)
		}},
		{"record-lease", bindClaims, func(i int) error {
			return k8s.Create(ctx, recordLease(ns, claims[i], poolAddress(i)))
		}},
		{"ipaddress-create", bindClaims, func(i int) error {
			return k8s.Create(ctx, ourIPAddress(claims[i], pool, poolAddress(i)))
		}},
		{"claim-status", bindClaims, func(i int) error {
			claim := claims[i]
			before := claim.DeepCopy()
			claim.Status.AddressRef = ipamv1.IPAddressReference{Name: claim.Name}
			claim.Status.Conditions = []metav1.Condition{{
				Type: clusterv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: clusterv1.ReadyReason,
				LastTransitionTime: metav1.Now(),
			}}
			return k8s.Status().Patch(ctx, claim, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		}},
		{"ledger-update", bindClaims / ledgerBatch, ledgerWriter(ctx, k8s, ns)},
	}
	costs := make([]writeCost, 0, len(steps)+1)
	for _, step := range steps {
		if err := settle(ctx); err != nil {
			return nil, err
		}
		before, _ := envCPU()
		// A ledger's block takes one update at a time, as optimistic
		// concurrency on one object allows.
		workers := creators
		if step.name == "ledger-update" {
			workers = 1
		}
		if err := forEach(ctx, step.n, workers, step.write); err != nil {
			return nil, fmt.Errorf("%s: %w", step.name, err)
		}
		if err := settle(ctx); err != nil {
			return nil, err
		}
		after, _ := envCPU()
		cpuMs := float64(after-before) / float64(time.Millisecond)
		costs = append(costs, writeCost{name: step.name, cpuMs: cpuMs / float64(step.n)})
		if step.name == "ledger-update" {
			costs = append(costs, writeCost{name: "ledger-address", cpuMs: cpuMs / float64(bindClaims)})
		}
	}
	return costs, nil
}

// recordLease is a Lease shaped like an allocation record of ours
// (ipam/internal/records): the same labels and annotations, of the same
// lengths.
func recordLease(ns string, claim *ipamv1.IPAddressClaim, ip netip.Addr) *coordinationv1.Lease {
	holder := claim.Namespace + "/" + claim.Name
	domain := "ns/" + ns + "/" + poolName
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "0123456789abcdef." + ip.String(),
			Labels: map[string]string{
				v1alpha1.AllocationDomainLabel:   "0123456789abcdef",
				v1alpha1.AllocationClaimUIDLabel: "0123456789abcdef0123456789abcdef",
			},
			Annotations: map[string]string{
				v1alpha1.AllocationDomainAnnotation:     domain,
				v1alpha1.AllocationAddressAnnotation:    ip.String(),
				v1alpha1.AllocationPoolAnnotation:       v1alpha1.MetalVRFIPPoolKind + "/" + ns + "/" + poolName,
				v1alpha1.AllocationClaimAnnotation:      holder,
				v1alpha1.AllocationClaimUIDAnnotation:   string(claim.UID),
				v1alpha1.AllocationRecordedByAnnotation: "metal-vrf-ipam-manager-0123456789-abcde_01234567-89ab-cdef-0123-456789abcdef",
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

// ourIPAddress is the IPAddress our claim reconciler creates for claim.
func ourIPAddress(claim *ipamv1.IPAddressClaim, pool *v1alpha1.MetalVRFIPPool, ip netip.Addr) *ipamv1.IPAddress {
	address := ipamutil.NewIPAddress(claim, pool)
	address.Spec.Address, address.Spec.Prefix, address.Spec.Gateway = ip.String(), ptr.To[int32](poolPrefix), gateway
	address.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
		{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name, UID: pool.UID,
			Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(true)},
	}
	address.Finalizers = []string{ipamutil.ProtectAddressFinalizer}
	return &address
}

// ledgerWriter returns the i-th update of a block ledger: block i*ledgerBatch
// / ledgerBlock (created by its first update) given the records of
// ledgerBatch more addresses (address -> claim and its UID, as a record
// keeps them), updated from the object its last write returned, so with its
// resourceVersion, as a ledger's one writer per block would. It must be
// called from one goroutine.
func ledgerWriter(ctx context.Context, k8s client.Client, ns string) func(int) error {
	blocks := map[int]*corev1.ConfigMap{}
	return func(i int) error {
		block := i * ledgerBatch / ledgerBlock
		ledger, ok := blocks[block]
		if !ok {
			ledger = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("0123456789abcdef.block-%d", block)},
				Data:       map[string]string{},
			}
			blocks[block] = ledger
		}
		for j := i * ledgerBatch; j < (i+1)*ledgerBatch; j++ {
			ledger.Data[poolAddress(j).String()] = fmt.Sprintf("%s/claim-%05d %s", ns, j, types.UID("01234567-89ab-cdef-0123-456789abcdef"))
		}
		if !ok {
			return k8s.Create(ctx, ledger)
		}
		return k8s.Update(ctx, ledger)
	}
}
