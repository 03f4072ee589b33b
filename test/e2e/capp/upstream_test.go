package capp

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// upstreamObjects are infrastructure objects in the shape upstream CAPP
// v1beta1's cluster templates write them: a PacketCluster with projectID,
// metro and vipManager; PacketMachineTemplates with os, machineType,
// billingCycle, sshKeys and an empty tags list, and no ports.
const upstreamObjects = `apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: PacketCluster
metadata:
  name: upstream
spec:
  projectID: "` + simtest.Project + `"
  metro: "` + simtest.Metro + `"
  vipManager: "CPEM"
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: PacketMachineTemplate
metadata:
  name: upstream-control-plane
spec:
  template:
    spec:
      os: "ubuntu_20_04"
      billingCycle: hourly
      machineType: "c3.small.x86"
      sshKeys:
        - "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv1 user@example"
      tags: []
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: PacketMachineTemplate
metadata:
  name: upstream-worker-a
spec:
  template:
    spec:
      os: "ubuntu_20_04"
      billingCycle: hourly
      machineType: "m3.small.x86"
      sshKeys:
        - "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv1 user@example"
      tags: []
`

var _ = Describe("Upstream CAPP's infrastructure objects", func() {
	It("apply unchanged, and their PacketCluster gets its endpoint the upstream way (CPEM)", func() {
		ns := newNamespace()
		for _, doc := range strings.Split(upstreamObjects, "\n---\n") {
			obj := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal([]byte(doc), &obj.Object)).To(Succeed())
			obj.SetNamespace(ns)
			Expect(k8s.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
		}

		tmpl := &infrav1.PacketMachineTemplate{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upstream-worker-a"}, tmpl)).To(Succeed())
		Expect(tmpl.Spec.Template.Spec.DevicePlan()).To(Equal("m3.small.x86"))
		Expect(tmpl.Spec.Template.Spec.DeviceOS()).To(Equal("ubuntu_20_04"))

		// Cluster API's Cluster controller labels the infrastructure
		// cluster it references with the cluster's name; play it.
		pc := getCluster(&infrav1.PacketCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "upstream"}})
		base := pc.DeepCopy()
		pc.Labels = map[string]string{clusterv1.ClusterNameLabel: pc.Name}
		Expect(k8s.Patch(ctx, pc, client.MergeFrom(base))).To(Succeed())
		Expect(k8s.Create(ctx, &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pc.Name},
			Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: pc.Name,
			}},
		})).To(Succeed())
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointReservedReason, ""))
		Expect(getCluster(pc).Spec.ControlPlaneEndpoint.Host).NotTo(BeEmpty())
		Expect(k8s.Delete(ctx, getCluster(pc))).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
	})
})
