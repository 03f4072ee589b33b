package capp

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodetools"
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

// upstreamBootstrap is bootstrap data in the shape upstream CAPP's cluster
// templates give their KubeadmControlPlane: a Go template with the
// endpoint, the token and the Kubernetes version, and cloud-init's Jinja
// escaped from it.
const upstreamBootstrap = `## template: jinja
#cloud-config
write_files:
- path: /etc/kubeadm-extra.yaml
  content: |
    provider-id: equinixmetal://{{ ` + "`{{ v1.instance_id }}`" + ` }}
runcmd:
- ip addr add {{ .controlPlaneEndpoint }} dev lo
- |
  echo 'cloud-sa.json={"apiKey": "{{ .apiKey }}"}' > /tmp/cpem
- echo {{ .kubernetesVersion }}
- kubeadm init
`

var _ = Describe("Bootstrap data written for upstream CAPP", func() {
	It("gets upstream's template values on a control-plane machine, and a worker asking for the endpoint is told why not", func() {
		ns := newNamespace()
		// {{ .apiKey }} is the token of the cluster's own credentials
		// Secret, never the manager's (test/e2e/tenant).
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metal-credentials"},
			StringData: map[string]string{"apiKey": simtest.APIKey},
		})).To(Succeed())
		clusterFixture(ns, func(pc *infrav1.PacketCluster) {
			pc.Spec.CredentialsRef = &corev1.LocalObjectReference{Name: "metal-credentials"}
		})
		cp, cpm := machineFixture(ns, "cp", nil)
		controlPlane(cp)
		worker, wpm := machineFixture(ns, "worker", nil)
		for _, m := range []*clusterv1.Machine{cp, worker} {
			base := m.DeepCopy()
			m.Spec.Version = "v1.34.1"
			Expect(k8s.Patch(ctx, m, client.MergeFrom(base))).To(Succeed())
			setBootstrapData(m, upstreamBootstrap)
		}

		Eventually(condition(cpm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.BootstrapDataRenderedReason, ""))
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.UserDataSecretName(cpm.Name)}, secret)).To(Succeed())
		userData := string(secret.Data[controllers.UserDataKey])
		nodetools.CloudInitSchema(GinkgoT(), secret.Data[controllers.UserDataKey])
		Expect(userData).To(HavePrefix("## template: jinja\n#cloud-config\n"))
		Expect(userData).To(ContainSubstring("provider-id: equinixmetal://{{ v1.instance_id }}"))
		Expect(userData).To(ContainSubstring("ip addr add " + userEndpoint + " dev lo"))
		Expect(userData).To(ContainSubstring(`{"apiKey": "` + simtest.APIKey + `"}`))
		Expect(userData).To(ContainSubstring("echo v1.34.1"))
		Expect(userData).NotTo(ContainSubstring("{{ ."))

		Eventually(condition(wpm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.BootstrapDataInvalidReason, "{{ .controlPlaneEndpoint }}"))
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.UserDataSecretName(wpm.Name)}, &corev1.Secret{})).
			To(MatchError(ContainSubstring("not found")))
	})
})
