package capp

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodetools"
)

const ipamGroup = "ipam.cluster.x-k8s.io"

// bootstrapData is a kubeadm-style bootstrap cloud-config, Jinja header and all.
const bootstrapData = `## template: jinja
#cloud-config
write_files:
-   path: /run/kubeadm/kubeadm-join-config.yaml
    permissions: '0640'
    content: |
      nodeRegistration:
        name: '{{ ds.meta_data.local_hostname }}'
runcmd:
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml
`

func poolRef(kind, name string) *corev1.TypedLocalObjectReference {
	return &corev1.TypedLocalObjectReference{APIGroup: ptr.To(ipamGroup), Kind: kind, Name: name}
}

// twoPortsThreeNetworks is a machine with bond0 carrying an IPv4 and an
// IPv6 network from MetalVRFIPPools and eth1 carrying one from an
// InClusterIPPool.
func twoPortsThreeNetworks() []infrav1.Port {
	return []infrav1.Port{
		{Name: "bond0", Networks: []infrav1.Network{
			{
				VXLAN: 1000, AddressType: infrav1.AddressTypeInternal,
				AddressFromPool: poolRef(v1alpha1.MetalVRFIPPoolKind, "vrf-v4"),
				Routes:          []infrav1.RouteSpec{{Destination: "192.168.0.0/16"}},
			},
			{
				VXLAN: 1001, AddressType: infrav1.AddressTypeInternal,
				AddressFromPool: poolRef(v1alpha1.MetalVRFIPPoolKind, "vrf-v6"),
			},
		}},
		{Name: "eth1", Networks: []infrav1.Network{{
			VXLAN: 2000, AddressType: infrav1.AddressTypeExternal,
			AddressFromPool: poolRef("InClusterIPPool", "incluster"),
			Routes:          []infrav1.RouteSpec{{Destination: "172.16.0.0/12", Gateway: "10.70.0.254"}},
			Nameservers:     []string{"10.70.0.53"}, // an InClusterIPPool gives none
		}}},
	}
}

// machineFixture creates a Cluster, its Machine (without bootstrap data yet,
// as when the bootstrap provider is not done) and the PacketMachine, owned
// and labelled as CAPI's Machine controller would.
func machineFixture(ns, name string, ports []infrav1.Port) (*clusterv1.Machine, *infrav1.PacketMachine) {
	GinkgoHelper()
	cluster := clusterFixture(ns, nil)
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: name,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "PacketMachine", Name: name,
			},
		},
	}
	Expect(k8s.Create(ctx, machine)).To(Succeed())
	pm := &infrav1.PacketMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
			}},
		},
		Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Ports: ports},
	}
	Expect(k8s.Create(ctx, pm)).To(Succeed())
	return machine, pm
}

// clusterFixture creates the namespace's Cluster and its PacketCluster in
// the simulator's project and metro, edited by edit when not nil; a second
// call returns the existing Cluster. The PacketCluster's endpoint is the
// user's, so the machines' tests reserve no address.
func clusterFixture(ns string, edit func(*infrav1.PacketCluster)) *clusterv1.Cluster {
	GinkgoHelper()
	pc := &infrav1.PacketCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster", Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"}},
		Spec: infrav1.PacketClusterSpec{
			ProjectID: simtest.Project, Metro: simtest.Metro,
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: userEndpoint, Port: 6443},
		},
	}
	if edit != nil {
		edit(pc)
	}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, pc))).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster"},
		Spec: clusterv1.ClusterSpec{
			Paused: ptr.To(false),
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: pc.Name,
			},
		},
	}
	if err := k8s.Create(ctx, cluster); apierrors.IsAlreadyExists(err) {
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	return cluster
}

// setBootstrapData plays the bootstrap provider: the data Secret, then the
// Machine pointing at it.
func setBootstrapData(machine *clusterv1.Machine, data string) {
	GinkgoHelper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: machine.Namespace, Name: machine.Name + "-bootstrap"},
		Data:       map[string][]byte{"value": []byte(data), "format": []byte("cloud-config")},
	}
	Expect(k8s.Create(ctx, secret)).To(Succeed())
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
	base := machine.DeepCopy()
	machine.Spec.Bootstrap.DataSecretName = ptr.To(secret.Name)
	Expect(k8s.Patch(ctx, machine, client.MergeFrom(base))).To(Succeed())
}

func createPools(ns string) {
	GinkgoHelper()
	for name, spec := range map[string]v1alpha1.MetalVRFIPPoolSpec{
		"vrf-v4": {Addresses: []string{"10.60.0.0/24"}, Prefix: ptr.To[int32](24), Gateway: "10.60.0.1", DNSServers: []string{"10.60.0.53"}},
		"vrf-v6": {Addresses: []string{"fd00:61::/64"}, Prefix: ptr.To[int32](64), Gateway: "fd00:61::1"},
	} {
		Expect(k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})).To(Succeed())
	}
	Expect(k8s.Create(ctx, &inclusterv1.InClusterIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "incluster"},
		Spec:       inclusterv1.InClusterIPPoolSpec{Addresses: []string{"10.70.0.10-10.70.0.20"}, Prefix: 24, Gateway: "10.70.0.1"},
	})).To(Succeed())
}

// poolsUsed is how many addresses each pool reports in use.
func poolsUsed(ns string) map[string]int64 {
	GinkgoHelper()
	used := map[string]int64{}
	for _, name := range []string{"vrf-v4", "vrf-v6"} {
		pool := &v1alpha1.MetalVRFIPPool{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pool)).To(Succeed())
		if pool.Status.IPAddresses != nil {
			used[name] = pool.Status.IPAddresses.Used
		}
	}
	pool := &inclusterv1.InClusterIPPool{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "incluster"}, pool)).To(Succeed())
	if pool.Status.Addresses != nil {
		used["incluster"] = int64(pool.Status.Addresses.Used)
	}
	return used
}

// condition returns the PacketMachine's condition of type t, or nil.
func condition(pm *infrav1.PacketMachine, t string) func() *metav1.Condition {
	return func() *metav1.Condition {
		current := &infrav1.PacketMachine{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pm), current); err != nil {
			return nil
		}
		return conditions.Get(current, t)
	}
}

func haveCondition(status metav1.ConditionStatus, reason, message string) OmegaMatcher {
	return And(Not(BeNil()),
		HaveField("Status", status), HaveField("Reason", reason), HaveField("Message", ContainSubstring(message)))
}

var _ = Describe("A PacketMachine with networks from IPAM pools", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("claims an address per network from each pool kind, renders them into the user-data, and releases them on deletion", func() {
		machine, pm := machineFixture(ns, "m1", twoPortsThreeNetworks())

		By("claiming one address per network, named after the port and network, owned and protected by the machine")
		claimNames := []string{"m1-port-0-network-0", "m1-port-0-network-1", "m1-port-1-network-0"}
		for _, name := range claimNames {
			claim := &ipamv1.IPAddressClaim{}
			Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, claim) }).Should(Succeed())
			Expect(metav1.IsControlledBy(claim, pm)).To(BeTrue())
			Expect(claim.OwnerReferences[0].BlockOwnerDeletion).To(Equal(ptr.To(true)))
			Expect(claim.Finalizers).To(ContainElement(infrav1.IPClaimProtectionFinalizer))
			Expect(claim.Spec.ClusterName).To(Equal("cluster"))
			Expect(claim.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "cluster"))
		}

		By("waiting, with no pools yet, and saying how many are bound")
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.WaitingForIPAddressReason, "0/3 bound"))
		Expect(condition(pm, infrav1.IPAddressClaimsFulfilledCondition)()).To(
			haveCondition(metav1.ConditionFalse, infrav1.IPAddressClaimsNotFulfilledReason, "0/3 bound"))
		Expect(condition(pm, infrav1.BootstrapDataRenderedCondition)()).To(haveCondition(metav1.ConditionFalse,
			infrav1.WaitingForPreviousReason, "waiting for the networks' addresses (IPAddressClaimed)"), "rendering waits for the addresses")

		By("continuing as soon as the pools hand the addresses out")
		createPools(ns)
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.IPAddressClaimedReason, "3/3 bound"))
		Expect(condition(pm, infrav1.IPAddressClaimsFulfilledCondition)()).To(
			haveCondition(metav1.ConditionTrue, infrav1.IPAddressClaimsFulfilledReason, "3/3 bound"))
		Eventually(poolsUsed).WithArguments(ns).Should(Equal(map[string]int64{"vrf-v4": 1, "vrf-v6": 1, "incluster": 1}))

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pm), pm)).To(Succeed())
		Expect(pm.Status.Ports).To(Equal([]infrav1.PortStatus{
			{Name: "bond0", Networks: []infrav1.NetworkStatus{
				{VXLAN: 1000, ClaimName: claimNames[0], Address: "10.60.0.2", Prefix: 24, Gateway: "10.60.0.1"},
				{VXLAN: 1001, ClaimName: claimNames[1], Address: "fd00:61::2", Prefix: 64, Gateway: "fd00:61::1"},
			}},
			{Name: "eth1", Networks: []infrav1.NetworkStatus{
				{VXLAN: 2000, ClaimName: claimNames[2], Address: "10.70.0.10", Prefix: 24, Gateway: "10.70.0.1"},
			}},
		}))
		Expect(pm.Status.Addresses).To(Equal([]clusterv1.MachineAddress{
			{Type: clusterv1.MachineInternalIP, Address: "10.60.0.2"},
			{Type: clusterv1.MachineInternalIP, Address: "fd00:61::2"},
			{Type: clusterv1.MachineExternalIP, Address: "10.70.0.10"},
		}))

		By("waiting for the bootstrap data, then rendering the user-data")
		Eventually(condition(pm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.WaitingForBootstrapDataReason, "bootstrap provider"))
		setBootstrapData(machine, bootstrapData)
		Eventually(condition(pm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.BootstrapDataRenderedReason, ""))

		// The patch helper writes the conditions and the rest of the status
		// in two requests: the name may come a moment after the condition.
		Eventually(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pm), pm)).To(Succeed())
			return pm.Status.UserDataSecretName
		}).Should(Equal(controllers.UserDataSecretName("m1")))
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: pm.Status.UserDataSecretName}, secret)).To(Succeed())
		Expect(metav1.IsControlledBy(secret, pm)).To(BeTrue())
		userData := string(secret.Data[controllers.UserDataKey])
		Expect(userData).To(HavePrefix("## template: jinja\n#cloud-config\n"))
		nodetools.CloudInitSchema(GinkgoT(), []byte(userData))

		var cfg struct {
			WriteFiles []struct{ Path, Content string } `json:"write_files"`
			RunCmd     []any                            `json:"runcmd"`
		}
		Expect(yaml.Unmarshal([]byte(userData), &cfg)).To(Succeed())
		files := map[string]string{}
		for _, f := range cfg.WriteFiles {
			files[f.Path] = f.Content
		}
		Expect(files).To(HaveKey("/run/kubeadm/kubeadm-join-config.yaml"), "the bootstrap's files are kept")
		Expect(cfg.RunCmd).To(Equal([]any{
			[]any{cloudinit.ScriptPath},
			"kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml",
		}), "the network script runs before the bootstrap's commands")
		Expect(files).To(HaveKeyWithValue(cloudinit.KubeletDefaultsPath, "KUBELET_EXTRA_ARGS=--node-ip=10.60.0.2,fd00:61::2\n"))
		script := files[cloudinit.ScriptPath]
		nodetools.Require(GinkgoT(), false, "bash", "shellcheck")
		nodetools.Run(GinkgoT(), script, "bash", "-n")
		nodetools.Run(GinkgoT(), script, "shellcheck", "--shell=bash", "--severity=style", "-")
		for _, want := range []string{
			"metadata_url='" + metadataURL + "'",
			`port_0="$(device_of bond0)"`,
			`port_1="$(device_of eth1)"`,
			"iface ${port_0}.1000 inet static\n    address 10.60.0.2/24\n    gateway 10.60.0.1\n",
			"up ip -4 route replace 192.168.0.0/16 via 10.60.0.1 dev ${port_0}.1000\n",
			"iface ${port_0}.1001 inet6 static\n    address fd00:61::2/64\n    gateway fd00:61::1\n",
			"iface ${port_1}.2000 inet static\n    address 10.70.0.10/24\n    gateway 10.70.0.1\n",
			"up ip -4 route replace 172.16.0.0/12 via 10.70.0.254 dev ${port_1}.2000\n",
			"    metric 1000\n    dns-nameservers 10.60.0.53\n", // the pool's, carried on the IPAddress
			"    metric 1002\n    dns-nameservers 10.70.0.53\n", // the network's own
			"write_resolv_conf /etc/resolv.conf 10.60.0.53 10.70.0.53 ||",
		} {
			Expect(script).To(ContainSubstring(want))
		}

		By("releasing every address when the machine is deleted, and only then letting it go")
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(pm), &infrav1.PacketMachine{}))
		}).Should(BeTrue(), "the PacketMachine is gone")
		claims := &ipamv1.IPAddressClaimList{}
		Expect(k8s.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
		Expect(claims.Items).To(BeEmpty(), "the machine outlived its claims")
		Eventually(func() []ipamv1.IPAddress {
			addresses := &ipamv1.IPAddressList{}
			Expect(k8s.List(ctx, addresses, client.InNamespace(ns))).To(Succeed())
			return addresses.Items
		}).Should(BeEmpty())
		Eventually(poolsUsed).WithArguments(ns).Should(Equal(map[string]int64{"vrf-v4": 0, "vrf-v6": 0, "incluster": 0}))
	})

	It("keeps a claim a user deletes under a live machine, says the address is lost, and still releases on deletion", func() {
		createPools(ns)
		_, pm := machineFixture(ns, "m2", twoPortsThreeNetworks()[1:])
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.IPAddressClaimedReason, "1/1 bound"))

		claim := &ipamv1.IPAddressClaim{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "m2-port-0-network-0"}, claim)).To(Succeed())
		Expect(k8s.Delete(ctx, claim)).To(Succeed())
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.IPAddressInvalidReason, "m2-port-0-network-0 are being deleted while the machine exists"))
		// The protection finalizer keeps the claim for as long as the machine lives.
		Consistently(hasFinalizer(claim, infrav1.IPClaimProtectionFinalizer), "1s").Should(BeTrue())

		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim))
		}).Should(BeTrue(), "the claim was not released with its machine")
		Eventually(poolsUsed).WithArguments(ns).Should(HaveKeyWithValue("incluster", int64(0)))
	})

	It("keeps the address of a claim deleted by hand while its machine protects it, and releases it after the machine goes", func() {
		createPools(ns)
		_, pm := machineFixture(ns, "m3", twoPortsThreeNetworks()[:1])
		key := client.ObjectKey{Namespace: ns, Name: "m3-port-0-network-0"}
		address := &ipamv1.IPAddress{}
		Eventually(func() error { return k8s.Get(ctx, key, address) }).Should(Succeed())
		allocations := func() map[string]string {
			held, err := env.AllocationRecords(ctx, ns)
			Expect(err).NotTo(HaveOccurred())
			return held
		}
		Expect(allocations()).To(HaveKeyWithValue(address.Spec.Address, key.Name))

		claim := &ipamv1.IPAddressClaim{}
		Expect(k8s.Get(ctx, key, claim)).To(Succeed())
		Expect(k8s.Delete(ctx, claim)).To(Succeed())
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.IPAddressInvalidReason, key.Name+" are being deleted while the machine exists"))
		// The machine still uses the address: neither the IPAddress nor its
		// record may go while the machine's finalizer protects the claim.
		Consistently(func(g Gomega) {
			g.Expect(k8s.Get(ctx, key, &ipamv1.IPAddress{})).To(Succeed())
			g.Expect(allocations()).To(HaveKeyWithValue(address.Spec.Address, key.Name))
			g.Expect(hasFinalizer(claim, infrav1.IPClaimProtectionFinalizer)()).To(BeTrue())
		}, "2s").Should(Succeed())
		Expect(poolsUsed(ns)).To(HaveKeyWithValue("vrf-v4", int64(1)))

		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, key, &ipamv1.IPAddress{})) }).Should(BeTrue())
		Eventually(allocations).Should(BeEmpty())
		Eventually(poolsUsed).WithArguments(ns).Should(HaveKeyWithValue("vrf-v4", int64(0)))
	})

	It("refuses an address it cannot use and says why", func() {
		// The in-cluster provider does not check that the gateway lies in
		// the subnet; the machine must.
		Expect(k8s.Create(ctx, &inclusterv1.InClusterIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "incluster"},
			Spec:       inclusterv1.InClusterIPPoolSpec{Addresses: []string{"10.70.0.10-10.70.0.20"}, Prefix: 24, Gateway: "10.99.0.1"},
		})).To(Succeed())
		_, pm := machineFixture(ns, "m3", twoPortsThreeNetworks()[1:])
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.IPAddressInvalidReason, "gateway 10.99.0.1 is outside the subnet 10.70.0.0/24"))
		Expect(condition(pm, infrav1.IPAddressClaimedCondition)().Message).To(HavePrefix("1/1 bound, but unusable"))
		Expect(condition(pm, infrav1.IPAddressClaimsFulfilledCondition)()).To(
			haveCondition(metav1.ConditionFalse, infrav1.IPAddressInvalidReason, "outside the subnet"))
		Expect(condition(pm, infrav1.BootstrapDataRenderedCondition)()).To(
			haveCondition(metav1.ConditionFalse, infrav1.WaitingForPreviousReason, "IPAddressClaimed"))
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
	})
})

// hasFinalizer is true once obj, re-read, carries finalizer.
func hasFinalizer(obj client.Object, finalizer string) func() bool {
	return func() bool {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false
		}
		return controllerutil.ContainsFinalizer(obj, finalizer)
	}
}

var _ = Describe("A PacketMachine without a Machine yet", func() {
	It("only takes its finalizer and waits", func() {
		ns := newNamespace()
		pm := &infrav1.PacketMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"},
			Spec: infrav1.PacketMachineSpec{Plan: "p", OperatingSystem: "os", Ports: []infrav1.Port{{
				Name: "bond0", Networks: []infrav1.Network{{VXLAN: 5, Address: "10.0.0.5/24"}},
			}}},
		}
		Expect(k8s.Create(ctx, pm)).To(Succeed())
		Eventually(hasFinalizer(pm, infrav1.MachineFinalizer)).Should(BeTrue())
		Consistently(condition(pm, infrav1.IPAddressClaimedCondition), "1s").Should(BeNil())
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(pm), pm))
		}).Should(BeTrue(), "the finalizer was not removed")
	})
})
