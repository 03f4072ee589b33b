package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

func poolReference() *corev1.TypedLocalObjectReference {
	return &corev1.TypedLocalObjectReference{APIGroup: ptr.To("ipam.cluster.x-k8s.io"), Kind: "InClusterIPPool", Name: "pool"}
}

func testScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{infrav1.AddToScheme, ipamv1.AddToScheme, clusterv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func poolMachine() *machineScope {
	pm := &infrav1.PacketMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}
	pm.Spec.Ports = []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: 1000, AddressFromPool: poolReference()}}}}
	return &machineScope{PacketMachine: pm, Cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}}
}

// Without CAPI's IPAM CRDs the machine says so and waits: no error, so no
// retry loop, and no crash.
func TestIPAMNotInstalled(t *testing.T) {
	for name, r := range map[string]*PacketMachineReconciler{
		"missing at start": {Recorder: events.NewFakeRecorder(10)},
		"removed since": {
			Recorder:      events.NewFakeRecorder(10),
			ipamInstalled: true,
			Client: fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return &meta.NoKindMatchError{GroupKind: ipamv1.GroupVersion.WithKind("IPAddressClaim").GroupKind()}
				},
			}).Build(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := poolMachine()
			_, done, err := r.reconcileIPAddresses(context.Background(), s)
			if done || err != nil {
				t.Fatalf("reconcileIPAddresses = %v, %v; want not done, no error", done, err)
			}
			s.setStatus()
			for _, c := range []string{infrav1.IPAddressClaimedCondition, infrav1.IPAddressClaimsFulfilledCondition} {
				cond := conditions.Get(s.PacketMachine, c)
				if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != infrav1.IPAMNotInstalledReason || cond.Message != ipamNotInstalledMessage {
					t.Errorf("%s = %+v", c, cond)
				}
			}
		})
	}
}

// A machine without pool networks needs no IPAM at all.
func TestNoPoolNetworksNeedNoIPAM(t *testing.T) {
	s := poolMachine()
	s.PacketMachine.Spec.Ports[0].Networks[0] = infrav1.Network{VXLAN: 1000, Address: "10.0.0.5/24"}
	r := &PacketMachineReconciler{Recorder: events.NewFakeRecorder(10)}
	_, done, err := r.reconcileIPAddresses(context.Background(), s)
	if !done || err != nil {
		t.Fatalf("reconcileIPAddresses = %v, %v; want done", done, err)
	}
	s.setStatus()
	if !conditions.IsTrue(s.PacketMachine, infrav1.IPAddressClaimedCondition) || len(s.Networks) != 1 {
		t.Errorf("condition %+v, networks %+v", conditions.Get(s.PacketMachine, infrav1.IPAddressClaimedCondition), s.Networks)
	}
}

// A waiting machine names each claim's pool and why it waits: the claim's
// own condition, a kind the API server does not serve (with the kind it
// serves under another case), or a provider that never answered.
func TestExplainWaiting(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "ipam.cluster.x-k8s.io", Version: "v1alpha2"}})
	mapper.Add(schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1alpha2", Kind: "InClusterIPPool"}, meta.RESTScopeNamespace)
	r := &PacketMachineReconciler{Client: fake.NewClientBuilder().WithScheme(testScheme(t)).WithRESTMapper(mapper).Build()}
	waiting := func(kind string, age time.Duration, ready *metav1.Condition) waitingClaim {
		claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Name: "m-port-0-network-0", CreationTimestamp: metav1.NewTime(time.Now().Add(-age))}}
		if ready != nil {
			claim.Status.Conditions = []metav1.Condition{*ready}
		}
		ref := *poolReference()
		ref.Kind = kind
		return waitingClaim{poolClaim: poolClaim{name: claim.Name, pool: ref, path: "spec.ports[0].networks[0].addressFromPool"}, claim: claim}
	}
	for _, tc := range []struct {
		name    string
		claim   waitingClaim
		reason  string
		requeue bool
		want    []string
	}{
		{"the provider's word", waiting("InClusterIPPool", time.Hour, &metav1.Condition{
			Type: ipamv1.IPAddressClaimReadyCondition, Status: metav1.ConditionFalse, Reason: "PoolNotReady", Message: "pool not found",
		}), infrav1.WaitingForIPAddressReason, false, []string{`waits on pool "pool" of kind "InClusterIPPool"`, ": pool not found"}},
		{"a kind in the wrong case", waiting("inclusterippool", 0, nil), infrav1.PoolKindNotServedReason, false,
			[]string{`the API server serves no kind "inclusterippool"`, "fix spec.ports[0].networks[0].addressFromPool (did you mean kind InClusterIPPool?)"}},
		{"a kind nobody serves", waiting("InClusterPool", 0, nil), infrav1.PoolKindNotServedReason, false,
			[]string{`serves no kind "InClusterPool" in apiGroup "ipam.cluster.x-k8s.io"`}},
		{"a new claim", waiting("InClusterIPPool", time.Second, nil), infrav1.WaitingForIPAddressReason, true,
			[]string{`IPAddressClaim m-port-0-network-0 waits on pool "pool"`}},
		{"a claim nobody answered", waiting("InClusterIPPool", time.Minute, nil), infrav1.NoIPAMProviderAnswerReason, false,
			[]string{`no IPAM provider has answered for 1m0s: is the provider of "InClusterIPPool" installed and running`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waits, requeue := r.waitFacts([]waitingClaim{tc.claim})
			c := ipAddressClaimed(claimsWaiting{claimCount: claimCount{total: 1}, claims: waits})
			text, reason := c.Message, c.Reason
			if reason != tc.reason || (requeue > 0) != tc.requeue {
				t.Errorf("reason %s, requeue %s; want %s, requeue %t", reason, requeue, tc.reason, tc.requeue)
			}
			for _, w := range append(tc.want, "0/1 bound; ") {
				if !strings.Contains(text, w) {
					t.Errorf("message %q, want %q", text, w)
				}
			}
		})
	}
}
