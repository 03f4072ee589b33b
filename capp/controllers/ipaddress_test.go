package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
			s.setConditions()
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
	s.setConditions()
	if !conditions.IsTrue(s.PacketMachine, infrav1.IPAddressClaimedCondition) || len(s.Networks) != 1 {
		t.Errorf("condition %+v, networks %+v", conditions.Get(s.PacketMachine, infrav1.IPAddressClaimedCondition), s.Networks)
	}
}
