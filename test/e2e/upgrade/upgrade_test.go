// Package upgrade checks the upgrade of a management cluster from upstream
// CAPP v0.9.0, the retired provider, to this one (docs/upgrade.md): its CRDs
// and objects as upstream left them, its devices and endpoint in the
// simulator; then our CRDs replace upstream's, as `clusterctl upgrade
// apply` does, and our manager takes the objects over.
package upgrade

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const cluster = "demo"

// upstreamMachine is a machine as upstream CAPP created it: its device
// tagged the upstream way, its PacketMachine with upstream's spec and
// status (v1beta1 conditions without reasons).
type upstreamMachine struct {
	name         string
	controlPlane bool
	device       string
}

func TestUpgradeFromUpstreamCAPP(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(60 * time.Second)
	g.SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	ctx := context.Background()
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)))

	metalSim, err := simtest.Start(sim.Options{}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(metalSim.Close)
	metalAPI, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	g.Expect(err).NotTo(HaveOccurred())
	env, err := testenv.Start(testenv.Options{UpstreamCAPPCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	k8s := env.Client
	ns, err := env.NewNamespace(ctx, "upgrade")
	g.Expect(err).NotTo(HaveOccurred())

	// What upstream made on the platform: the endpoint's reservation,
	// tagged for the cloud provider and routed to the first control-plane
	// device, and the devices.
	eip, err := metalAPI.ReservePublicIPv4(ctx, simtest.Metro, []string{"cluster-api-provider-packet:cluster-id:" + cluster})
	g.Expect(err).NotTo(HaveOccurred())
	machines := []*upstreamMachine{{name: "demo-control-plane-x1", controlPlane: true}, {name: "demo-worker-a-y2"}}
	for _, m := range machines {
		role := "kubernetes.io/role:node"
		if m.controlPlane {
			role = "kubernetes.io/role:master"
		}
		d, err := metalAPI.CreateDevice(ctx, metal.DeviceRequest{
			Tag: "capp:machine-uid:" + m.name, Hostname: m.name, Plan: "c3.small.x86", Metro: simtest.Metro,
			OperatingSystem: "ubuntu_20_04", Tags: []string{"capp:cluster-id:" + cluster, "capp:namespace:" + ns, role},
		})
		g.Expect(err).NotTo(HaveOccurred())
		m.device = d.GetId()
	}
	_, err = metalAPI.AssignIPAddress(ctx, machines[0].device, eip.GetAddress())
	g.Expect(err).NotTo(HaveOccurred())

	// What upstream's management cluster holds.
	g.Expect(k8s.Create(ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster},
		Spec: clusterv1.ClusterSpec{
			Paused:               ptr.To(false),
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: eip.GetAddress(), Port: 6443},
			InfrastructureRef:    clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: cluster},
		},
	})).To(Succeed())
	createUpstream(g, k8s, ns, "PacketCluster", cluster, nil, map[string]any{
		"projectID": simtest.Project, "metro": simtest.Metro, "vipManager": "CPEM",
		"controlPlaneEndpoint": map[string]any{"host": eip.GetAddress(), "port": int64(6443)},
	}, map[string]any{
		"ready":      true,
		"conditions": upstreamConditions("Ready", "NetworkInfrastructureReady"),
	})
	for _, m := range machines {
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
			Spec: clusterv1.MachineSpec{
				ClusterName: cluster,
				Version:     "v1.30.5",
				Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(m.name + "-bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "PacketMachine", Name: m.name,
				},
				ProviderID: device.ProviderID(m.device),
			},
		}
		if m.controlPlane {
			machine.Labels[clusterv1.MachineControlPlaneLabel] = ""
		}
		g.Expect(k8s.Create(ctx, machine)).To(Succeed())
		g.Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name + "-bootstrap"},
			Data:       map[string][]byte{"value": []byte("## template: jinja\n#cloud-config\nruncmd:\n- echo {{ .kubernetesVersion }}\n")},
		})).To(Succeed())
		createUpstream(g, k8s, ns, "PacketMachine", m.name, machine, map[string]any{
			"os": "ubuntu_20_04", "machineType": "c3.small.x86", "billingCycle": "hourly",
			"providerID": device.ProviderID(m.device), "tags": []any{},
		}, map[string]any{
			"ready": true, "instanceStatus": "active",
			"addresses":  []any{map[string]any{"type": "ExternalIP", "address": "198.18.0.1"}},
			"conditions": upstreamConditions("Ready", "InstanceReady"),
		})
	}

	// The upgrade: our CRDs replace upstream's, our manager starts.
	creates, reserves := metalSim.Calls(sim.OpCreateDevice), metalSim.Calls(sim.OpRequestIPReservation)
	g.Expect(env.UpgradeCAPPCRDs()).To(Succeed())
	opts := env.CAPPOptions(2, "")
	opts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: metalSim.URL}[name]
	}
	stop, err := env.StartCAPP(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stop)

	pc := &infrav1.PacketCluster{}
	readCluster := func() *infrav1.PacketCluster {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, pc)).To(Succeed())
		return pc
	}
	g.Eventually(func() *metav1.Condition { return conditions.Get(readCluster(), infrav1.ReadyCondition) }).Should(
		And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", Not(BeEmpty()))))
	g.Eventually(func() *bool { return readCluster().Status.Initialization.Provisioned }).Should(HaveValue(BeTrue()))
	g.Expect(conditions.Get(pc, infrav1.ControlPlaneEndpointReadyCondition)).To(HaveField("Reason", infrav1.ControlPlaneEndpointSetByUserReason))
	g.Expect(pc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: eip.GetAddress(), Port: 6443}))
	g.Expect(conditions.Has(pc, "NetworkInfrastructureReady")).To(BeFalse(), "upstream's condition is left over")

	for _, m := range machines {
		pm := &infrav1.PacketMachine{}
		read := func() *infrav1.PacketMachine {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.name}, pm)).To(Succeed())
			return pm
		}
		g.Eventually(func() *metav1.Condition { return conditions.Get(read(), infrav1.ReadyCondition) }).Should(
			And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)), "machine %s", m.name)
		// The patch helper writes the conditions before the rest of the status.
		g.Eventually(func() *bool { return read().Status.Initialization.Provisioned }).Should(HaveValue(BeTrue()))
		g.Expect(pm.Spec.DevicePlan()).To(Equal("c3.small.x86"))
		g.Expect(conditions.Get(pm, infrav1.DeviceReadyCondition)).To(HaveField("Reason", infrav1.DeviceActiveReason))
		g.Expect(conditions.Get(pm, infrav1.NodeNetworkConfiguredCondition)).To(HaveField("Reason", infrav1.NodeReportNotExpectedReason))
		g.Expect(conditions.Has(pm, "InstanceReady")).To(BeFalse(), "upstream's condition is left over")
		for _, c := range pm.Status.Conditions {
			g.Expect(c.Reason).NotTo(BeEmpty(), "condition %s of %s", c.Type, m.name)
		}
	}
	g.Expect(metalSim.Calls(sim.OpCreateDevice)).To(Equal(creates), "a device was created for a machine that has one")
	g.Expect(metalSim.Calls(sim.OpRequestIPReservation)).To(Equal(reserves), "an endpoint was reserved for a cluster that has one")

	// A machine deleted after the upgrade takes its upstream device with
	// it; the cluster, as upstream did, leaves the endpoint's reservation
	// to the user.
	for _, m := range machines {
		g.Expect(k8s.Delete(ctx, &infrav1.PacketMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.name}})).To(Succeed())
		g.Eventually(func() bool { _, err := metalAPI.GetDevice(ctx, m.device); return metal.IsNotFound(err) }).Should(BeTrue())
	}
	g.Expect(k8s.Delete(ctx, readCluster())).To(Succeed())
	g.Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(pc), pc) }).Should(MatchError(ContainSubstring("not found")))
	_, err = metalAPI.GetIPReservation(ctx, eip.GetId())
	g.Expect(err).NotTo(HaveOccurred())
}

// upstreamConditions are v1beta1 conditions as upstream wrote them: True,
// with no reason and no message.
func upstreamConditions(types ...string) []any {
	var out []any
	for _, t := range types {
		out = append(out, map[string]any{"type": t, "status": "True", "lastTransitionTime": "2025-06-01T10:00:00Z"})
	}
	return out
}

// createUpstream creates an object with upstream CAPP's schema, owned by
// owner when it is not nil, with upstream's finalizer, then its status.
func createUpstream(g Gomega, k8s client.Client, ns, kind, name string, owner *clusterv1.Machine, spec, status map[string]any) {
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetAPIVersion(infrav1.GroupVersion.String())
	obj.SetKind(kind)
	obj.SetNamespace(ns)
	obj.SetName(name)
	obj.SetLabels(map[string]string{clusterv1.ClusterNameLabel: cluster})
	obj.SetFinalizers([]string{map[string]string{"PacketCluster": infrav1.ClusterFinalizer, "PacketMachine": infrav1.MachineFinalizer}[kind]})
	if owner != nil {
		obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: owner.Name, UID: owner.UID}})
	}
	g.Expect(k8s.Create(context.Background(), obj)).To(Succeed())
	obj.Object["status"] = status
	g.Expect(k8s.Status().Update(context.Background(), obj)).To(Succeed())
}

// testWriter sends the managers' logs to the test's log, shown when it
// fails or with -v.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
