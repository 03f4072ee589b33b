package capp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

var _ = Describe("The CAPP CRDs", func() {
	It("carry the contract label CAPI resolves versions by, and upstream's short names and category", func() {
		kustomize, err := testenv.Tool("KUSTOMIZE", "kustomize")
		Expect(err).NotTo(HaveOccurred())
		out, err := exec.Command(kustomize, "build", filepath.Join(env.Root, "config", "capp", "crd")).Output()
		Expect(err).NotTo(HaveOccurred(), "kustomize build config/capp/crd (make test builds kustomize)")
		crds, err := testenv.DecodeObjects(bytes.NewReader(out))
		Expect(err).NotTo(HaveOccurred())
		shortNames := map[string]string{"packetclusters": "pcl", "packetmachines": "pma", "packetmachinetemplates": "pmt"}
		Expect(crds).To(HaveLen(len(shortNames)))
		for _, crd := range crds {
			plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
			Expect(crd.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/v1beta2", infrav1.GroupVersion.Version), plural)
			names, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "shortNames")
			Expect(names).To(ConsistOf(shortNames[plural]), plural)
			categories, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "categories")
			Expect(categories).To(ContainElement("cluster-api"), plural)
		}
	})
})

var _ = Describe("The PacketMachine API", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("accepts the proposal's PacketMachineTemplate examples as written (config/samples/capp)", func() {
		data, err := os.ReadFile(filepath.Join(env.Root, "config", "samples", "capp", "packetmachinetemplates.yaml"))
		Expect(err).NotTo(HaveOccurred())
		docs := strings.Split(string(data), "\n---\n")
		Expect(docs).To(HaveLen(2))
		for _, doc := range docs {
			obj := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal([]byte(doc), &obj.Object)).To(Succeed())
			obj.SetNamespace(ns)
			Expect(k8s.Create(ctx, obj)).To(Succeed(), "creating %s", obj.GetName())

			tmpl := &infrav1.PacketMachineTemplate{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), tmpl)).To(Succeed())
			network := tmpl.Spec.Template.Spec.Ports[0].Networks[0]
			Expect(network.VXLAN).To(BeEquivalentTo(1000))
			Expect(network.VLANID).To(Equal("f4ad3be2-9284-4dc3-bdb6-8d120064f921"))
			Expect(network.AddressFromPool.Kind).To(Equal("InClusterIPPool"))
			Expect(network.Routes).To(Equal([]infrav1.RouteSpec{{Destination: "192.168.0.0/16", Gateway: "192.168.10.1"}}))
		}
	})

	// valid is a machine every case below breaks in one place.
	valid := func(name string) *infrav1.PacketMachine {
		return &infrav1.PacketMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Ports: []infrav1.Port{{
				Name: "bond0",
				Networks: []infrav1.Network{{
					VXLAN: 1000, VLANID: "f4ad3be2-9284-4dc3-bdb6-8d120064f921",
					AddressFromPool: poolRef("InClusterIPPool", "pool"),
					Routes:          []infrav1.RouteSpec{{Destination: "192.168.0.0/16", Gateway: "10.0.0.1"}},
				}},
			}}},
		}
	}

	// Each case breaks the valid machine in one place; the rejection names
	// the field and the value (or, for a missing value, what is missing).
	DescribeTable("rejects a machine with a message naming the field and the value",
		func(change func(*infrav1.PacketMachine), field, value, message string) {
			pm := valid("m")
			change(pm)
			err := k8s.Create(ctx, pm)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
			Expect(err.Error()).To(ContainSubstring(field + ": "))
			Expect(err.Error()).To(ContainSubstring(value))
			Expect(err.Error()).To(ContainSubstring(message))
			Expect(claimsOf(ns)).To(BeEmpty(), "a rejected machine claims nothing")
		},
		Entry("a VXLAN above 3999", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].VXLAN = 4000 },
			"spec.ports[0].networks[0].vxlan", "Invalid value: 4000", "less than or equal to 3999"),
		Entry("a VXLAN below 2", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].VXLAN = 1 },
			"spec.ports[0].networks[0].vxlan", "Invalid value: 1", "greater than or equal to 2"),
		Entry("a VLAN id that is not a UUID", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].VLANID = "vlan-1000" },
			"spec.ports[0].networks[0].vlanID", `"vlan-1000"`, "must be the VLAN's UUID"),
		Entry("a network with neither a pool nor a static address", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
		}, "spec.ports[0].networks[0]", "neither is", "exactly one of addressFromPool or address"),
		Entry("a network with both", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].Address = "10.0.0.5/24" },
			"spec.ports[0].networks[0]", "address 10.0.0.5/24 and addressFromPool InClusterIPPool pool", "exactly one of addressFromPool or address must be set, not both"),
		Entry("a static address that is not one", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
			pm.Spec.Ports[0].Networks[0].Address = "10.0.0.500"
		}, "spec.ports[0].networks[0].address", `"10.0.0.500"`, "must be an IP address, optionally with a prefix length"),
		Entry("a static address that is its subnet's network address", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
			pm.Spec.Ports[0].Networks[0].Address = "10.1.0.0/24"
		}, "spec.ports[0].networks[0].address", `"10.1.0.0/24"`, "is the network address of its subnet 10.1.0.0/24"),
		Entry("a static IPv6 address that is its subnet's anycast address", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
			pm.Spec.Ports[0].Networks[0].Address = "fd00:1::/64"
			pm.Spec.Ports[0].Networks[0].Routes = nil
		}, "spec.ports[0].networks[0].address", `"fd00:1::/64"`, "is the network address of its subnet fd00:1::/64"),
		Entry("a gateway next to a pool", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].Gateway = "10.0.0.254" },
			"spec.ports[0].networks[0].gateway", "10.0.0.254", "is only set with a static address"),
		Entry("a gateway that is not an IP", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
			pm.Spec.Ports[0].Networks[0].Address = "10.0.0.5/24"
			pm.Spec.Ports[0].Networks[0].Gateway = "10.0.0.x"
		}, "spec.ports[0].networks[0].gateway", `"10.0.0.x"`, "must be an IP address"),
		Entry("a pool without an apiGroup", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].AddressFromPool.APIGroup = nil },
			"spec.ports[0].networks[0].addressFromPool", "apiGroup is required", "e.g. ipam.cluster.x-k8s.io"),
		Entry("a pool without a name", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].AddressFromPool.Name = "" },
			"spec.ports[0].networks[0].addressFromPool.name", "is required", "the name of the pool"),
		Entry("a pool without a kind", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].AddressFromPool.Kind = "" },
			"spec.ports[0].networks[0].addressFromPool.kind", "is required", "the kind of the pool"),
		Entry("a route destination that is not a CIDR", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Destination = "192.168.0.0"
		}, "spec.ports[0].networks[0].routes[0].destination", `"192.168.0.0"`, "must be a network in CIDR notation"),
		Entry("a route destination with host bits", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Destination = "192.168.1.0/16"
		}, "spec.ports[0].networks[0].routes[0].destination", `"192.168.1.0/16"`, "no host bits set"),
		Entry("a route gateway that is not an IP", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Gateway = "gw.example"
		}, "spec.ports[0].networks[0].routes[0].gateway", `"gw.example"`, "must be an IP address"),
		Entry("a route gateway of the other family", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Gateway = "fd00::1"
		}, "spec.ports[0].networks[0].routes[0].gateway", "fd00::1 is of another IP family than the destination 192.168.0.0/16",
			"gateway and destination must be of the same IP family"),
		Entry("a port name that is not an interface name", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Name = "bond 0" },
			"spec.ports[0].name", `"bond 0"`, "is not an interface name like bond0 or eth1"),
		Entry("a port name too long for <name>.<vxlan>", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Name = "bond0-vlan1" },
			"spec.ports[0].name", `"bond0-vlan1"`, "has 11 characters, more than 10"),
		Entry("two ports of the same name", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports = append(pm.Spec.Ports, *pm.Spec.Ports[0].DeepCopy())
		}, "spec.ports[1]", `{"name":"bond0"}`, "Duplicate value"),
		Entry("a port without networks", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks = nil },
			"spec.ports[0].networks", "Required value", ""),
		Entry("two static IPv4 addresses on one vxlan", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks = []infrav1.Network{{VXLAN: 100, Address: "10.0.0.5/24"}, {VXLAN: 100, Address: "10.0.1.5/24"}}
		}, "spec.ports[0].networks", "static addresses 10.0.0.5/24 and 10.0.1.5/24 are of one IP family on vxlan 100",
			"the sub-interface bond0.100 holds one address of each family"),
		Entry("three networks on one vxlan", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks = []infrav1.Network{
				{VXLAN: 100, Address: "10.0.0.5/24"}, {VXLAN: 100, Address: "fd00::5/64"},
				{VXLAN: 100, AddressFromPool: poolRef("InClusterIPPool", "pool")},
			}
		}, "spec.ports[0].networks", "vxlan 100 has more than two networks on port bond0", "holds at most one IPv4 and one IPv6 address"),
		Entry("full Layer 2 on bond0, which would cut the node off the metadata service", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Layer2 = true
		}, "spec.ports[0]", "layer2 is not supported on a bond", "full Layer 2 takes the device's Layer 3 addresses"),
		Entry("a NIC kept in the bond that carries networks", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Name, pm.Spec.Ports[0].Bonded = "eth1", true
		}, "spec.ports[0]", "a NIC inside the bond", "cannot carry VLANs of its own"),
		Entry("an iPXE URL without the custom_ipxe operating system", func(pm *infrav1.PacketMachine) {
			pm.Spec.IPXEURL = "http://boot.example/ipxe"
		}, "spec", "ipxeURL needs the operating system custom_ipxe", ""),
		Entry("both plan and upstream's machineType", func(pm *infrav1.PacketMachine) { pm.Spec.MachineType = "c3.small.x86" },
			"spec", "exactly one of plan or machineType", ""),
		Entry("neither plan nor machineType", func(pm *infrav1.PacketMachine) { pm.Spec.Plan = "" },
			"spec", "exactly one of plan or machineType", ""),
		Entry("both operatingSystem and upstream's os", func(pm *infrav1.PacketMachine) { pm.Spec.OS = "ubuntu_24_04" },
			"spec", "exactly one of operatingSystem or os", ""),
		Entry("a billing cycle Metal does not know", func(pm *infrav1.PacketMachine) { pm.Spec.BillingCycle = "weekly" },
			"spec.billingCycle", `Unsupported value: "weekly"`, "hourly"),
		Entry("an address type Kubernetes does not know", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].AddressType = "Public" },
			"spec.ports[0].networks[0].addressType", `Unsupported value: "Public"`, "Internal"),
		Entry("a netmask longer than any", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].Netmask = strings.Repeat("255.", 8) },
			"spec.ports[0].networks[0].netmask", "Too long", "may not be more than 15"),
		Entry("more than 8 ports", func(pm *infrav1.PacketMachine) {
			for i := 1; i <= 8; i++ {
				pm.Spec.Ports = append(pm.Spec.Ports, infrav1.Port{Name: fmt.Sprintf("eth%d", i), Networks: pm.Spec.Ports[0].Networks})
			}
		}, "spec.ports", "Too many: 9", "must have at most 8 items"),
	)

	// valid cluster is a PacketCluster every case below breaks in one place.
	validCluster := func() *infrav1.PacketCluster {
		return &infrav1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
			Spec: infrav1.PacketClusterSpec{ProjectID: "p", Networks: []infrav1.NetworkSpec{
				{Name: "nodes", Assignment: infrav1.AssignmentClusterAPI, IPAddresses: []string{"10.70.0.0/24"}},
				{Name: "storage", Assignment: infrav1.AssignmentDHCP, IPAddresses: []string{"10.80.0.0/24"}},
			}},
		}
	}

	It("accepts the valid PacketCluster the cases below break", func() {
		Expect(k8s.Create(ctx, validCluster())).To(Succeed())
	})

	DescribeTable("rejects a PacketCluster with a message naming the field and the value",
		func(change func(*infrav1.PacketCluster), field, value, message string) {
			pc := validCluster()
			change(pc)
			err := k8s.Create(ctx, pc)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
			Expect(err.Error()).To(ContainSubstring(field + ": "))
			Expect(err.Error()).To(ContainSubstring(value))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a VIP manager upstream does not know", func(pc *infrav1.PacketCluster) { pc.Spec.VIPManager = "METALLB" },
			"spec.vipManager", `Unsupported value: "METALLB"`, "CPEM"),
		Entry("a network range with host bits", func(pc *infrav1.PacketCluster) { pc.Spec.Networks[0].IPAddresses = []string{"10.70.0.5/24"} },
			"spec.networks[0].ipAddresses[0]", `"10.70.0.5/24"`, "has host bits set: write the network 10.70.0.0/24"),
		Entry("a network range that is not a CIDR", func(pc *infrav1.PacketCluster) { pc.Spec.Networks[0].IPAddresses = []string{"10.70.0.5"} },
			"spec.networks[0].ipAddresses[0]", `"10.70.0.5"`, "is not a CIDR"),
		Entry("a network mixing IP families", func(pc *infrav1.PacketCluster) {
			pc.Spec.Networks[0].IPAddresses = []string{"10.71.0.0/24", "fd00:71::/64"}
		}, "spec.networks[0].ipAddresses", "fd00:71::/64 is not of the family of 10.71.0.0/24", "a network holds one family"),
		Entry("two networks of one name", func(pc *infrav1.PacketCluster) { pc.Spec.Networks[1].Name = "nodes" },
			"spec.networks", "nodes names more than one network", "network names must be unique"),
		Entry("ranges of two networks that overlap", func(pc *infrav1.PacketCluster) {
			pc.Spec.Networks[0].IPAddresses = []string{"10.75.0.0/24"}
			pc.Spec.Networks[1].IPAddresses = []string{"10.76.0.0/24", "10.75.0.128/25"}
		}, "spec.networks", "10.75.0.128/25 lies inside another entry", "each address belongs to one network"),
		Entry("ranges of one network that overlap", func(pc *infrav1.PacketCluster) {
			pc.Spec.Networks[0].IPAddresses = []string{"10.74.0.0/16", "10.74.3.0/24"}
		}, "spec.networks", "10.74.3.0/24 lies inside another entry", "each address belongs to one network"),
		Entry("one range in two networks", func(pc *infrav1.PacketCluster) { pc.Spec.Networks[1].IPAddresses = []string{"10.70.0.0/24"} },
			"spec.networks", "10.70.0.0/24 lies inside another entry", "each address belongs to one network"),
		Entry("a cluster-api network without a name", func(pc *infrav1.PacketCluster) { pc.Spec.Networks[0].Name = "" },
			"spec.networks[0].name", "is required with assignment cluster-api", "spec.networkRef.network"),
		Entry("an assignment nobody knows", func(pc *infrav1.PacketCluster) { pc.Spec.Networks[0].Assignment = "static" },
			"spec.networks[0].assignment", `Unsupported value: "static"`, "cluster-api"),
		Entry("more networks than the rules can check", func(pc *infrav1.PacketCluster) {
			for i := range 15 {
				pc.Spec.Networks = append(pc.Spec.Networks, infrav1.NetworkSpec{Name: fmt.Sprintf("n%d", i)})
			}
		}, "spec.networks", "Too many: 17", "must have at most 16 items"),
		Entry("a VIP without vipManager KUBE_VIP", func(pc *infrav1.PacketCluster) {
			pc.Spec.VIPManager = infrav1.VIPManagerCPEM
			pc.Spec.VIP = &infrav1.ControlPlaneVIP{AddressFromPool: *poolRef("InClusterIPPool", "vip"), VXLAN: 100}
		}, "spec.vipManager", "is CPEM", "vip needs vipManager KUBE_VIP"),
		Entry("a VIP pool without a name", func(pc *infrav1.PacketCluster) {
			pc.Spec.VIPManager = infrav1.VIPManagerKubeVIP
			pc.Spec.VIP = &infrav1.ControlPlaneVIP{AddressFromPool: *poolRef("InClusterIPPool", ""), VXLAN: 100}
		}, "spec.vip.addressFromPool.name", "is required", "the name of the pool"),
		Entry("a VIP vxlan out of range", func(pc *infrav1.PacketCluster) {
			pc.Spec.VIPManager = infrav1.VIPManagerKubeVIP
			pc.Spec.VIP = &infrav1.ControlPlaneVIP{AddressFromPool: *poolRef("InClusterIPPool", "vip"), VXLAN: 4000}
		}, "spec.vip.vxlan", "Invalid value: 4000", "less than or equal to 3999"),
		Entry("an empty project", func(pc *infrav1.PacketCluster) { pc.Spec.ProjectID = "" },
			"spec.projectID", `Invalid value: ""`, "at least 1 chars long"),
		Entry("a failure domain listed twice", func(pc *infrav1.PacketCluster) {
			pc.Spec.Metro, pc.Spec.FailureDomains = "da", []infrav1.FailureDomainSpec{{Facility: "da11"}, {Facility: "da12"}, {Facility: "da11"}}
		}, "spec.failureDomains", "da11 is listed more than once", "named by its facility or metro"),
		Entry("a failure domain with both a facility and a metro", func(pc *infrav1.PacketCluster) {
			pc.Spec.Metro, pc.Spec.FailureDomains = "da", []infrav1.FailureDomainSpec{{Facility: "da11", Metro: "da"}}
		}, "spec.failureDomains[0]", "Invalid value", "exactly one of facility or metro must be set"),
		Entry("a facility code that is not one", func(pc *infrav1.PacketCluster) {
			pc.Spec.Metro, pc.Spec.FailureDomains = "da", []infrav1.FailureDomainSpec{{Facility: "dallas-1"}}
		}, "spec.failureDomains[0].facility", "dallas-1 is not a facility code", "a metro code and a number, e.g. da11"),
		Entry("a facility of another metro", func(pc *infrav1.PacketCluster) {
			pc.Spec.Metro, pc.Spec.FailureDomains = "da", []infrav1.FailureDomainSpec{{Facility: "da11"}, {Facility: "ny5"}}
		}, "spec.failureDomains", "facility ny5 is not in spec.metro da", "list facilities of the metro of the cluster"),
		Entry("facilities without the cluster's metro", func(pc *infrav1.PacketCluster) {
			pc.Spec.FailureDomains = []infrav1.FailureDomainSpec{{Facility: "da11"}}
		}, "spec.failureDomains", "facility da11 needs spec.metro", "facilities of the metro of the cluster"),
		Entry("metro failure domains of a cluster with VLAN networks", func(pc *infrav1.PacketCluster) {
			pc.Spec.Metro, pc.Spec.FailureDomains = "da", []infrav1.FailureDomainSpec{{Metro: "da"}, {Metro: "sv"}}
		}, "spec.failureDomains", "metro da: metro failure domains need a cluster without VLANs", "a VLAN exists in one metro only"),
		Entry("a metro code that is not one", func(pc *infrav1.PacketCluster) {
			pc.Spec.Networks, pc.Spec.FailureDomains = nil, []infrav1.FailureDomainSpec{{Metro: "Dallas"}}
		}, "spec.failureDomains[0].metro", "Dallas is not a metro code", "two lower-case letters"),
		Entry("facilities and metros mixed", func(pc *infrav1.PacketCluster) {
			pc.Spec.Networks = nil
			pc.Spec.Metro, pc.Spec.FailureDomains = "da", []infrav1.FailureDomainSpec{{Facility: "da11"}, {Metro: "sv"}}
		}, "spec.failureDomains", "mixes facilities and metros (metro sv)", "not both"),
		Entry("a facility beside failure domains", func(pc *infrav1.PacketCluster) {
			pc.Spec.Metro, pc.Spec.Facility, pc.Spec.FailureDomains = "da", "da11", []infrav1.FailureDomainSpec{{Facility: "da12"}}
		}, "spec.facility", "is da11, but spec.failureDomains places the machines", "leave spec.facility empty"),
	)

	It("accepts failure domains: facilities of the metro, or metros of a cluster without VLANs", func() {
		pc := validCluster()
		pc.Name, pc.Spec.Metro = "facilities", "da"
		pc.Spec.FailureDomains = []infrav1.FailureDomainSpec{{Facility: "da11"}, {Facility: "da12", ControlPlane: ptr.To(false)}, {Facility: "da13"}}
		Expect(k8s.Create(ctx, pc)).To(Succeed())
		Expect(pc.Spec.FailureDomains[0].ControlPlane).To(HaveValue(BeTrue()), "controlPlane defaults to true")
		Expect(pc.Spec.FailureDomains[1].ControlPlane).To(HaveValue(BeFalse()))

		metros := validCluster()
		metros.Name, metros.Spec.Networks = "metros", nil
		metros.Spec.FailureDomains = []infrav1.FailureDomainSpec{{Metro: "da"}, {Metro: "sv"}}
		Expect(k8s.Create(ctx, metros)).To(Succeed())
	})

	It("refuses to change a machine's ports after creation", func() {
		pm := valid("m")
		Expect(k8s.Create(ctx, pm)).To(Succeed())
		base := pm.DeepCopy()
		pm.Spec.Ports[0].Networks[0].VXLAN = 1001
		err := k8s.Patch(ctx, pm, client.MergeFrom(base))
		Expect(err).To(MatchError(ContainSubstring("ports are immutable")))

		bare := valid("bare")
		bare.Spec.Ports = nil
		Expect(k8s.Create(ctx, bare)).To(Succeed())
		base = bare.DeepCopy()
		bare.Spec.Ports = valid("").Spec.Ports
		Expect(k8s.Patch(ctx, bare, client.MergeFrom(base))).To(MatchError(ContainSubstring("ports are immutable")))

		// Everything else may still change.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pm), pm)).To(Succeed())
		base = pm.DeepCopy()
		pm.Spec.ProviderID = "equinixmetal://6f1c2a4e-0000-4000-8000-0000000000d1"
		Expect(k8s.Patch(ctx, pm, client.MergeFrom(base))).To(Succeed())
	})

	It("refuses to change a template", func() {
		tmpl := &infrav1.PacketMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
			Spec:       infrav1.PacketMachineTemplateSpec{Template: infrav1.PacketMachineTemplateResource{Spec: valid("").Spec}},
		}
		Expect(k8s.Create(ctx, tmpl)).To(Succeed())
		base := tmpl.DeepCopy()
		tmpl.Spec.Template.Spec.Plan = "m3.large.x86"
		Expect(k8s.Patch(ctx, tmpl, client.MergeFrom(base))).To(MatchError(ContainSubstring("PacketMachineTemplate spec is immutable")))
	})

	It("accepts static addresses of both families", func() {
		pm := valid("static")
		pm.Spec.Ports[0].Networks = []infrav1.Network{
			{VXLAN: 1000, Address: "10.0.0.5", Netmask: "255.255.255.0", Gateway: "10.0.0.1"},
			{VXLAN: 1000, Address: "fd00::5/64", Routes: []infrav1.RouteSpec{{Destination: "fd01::/48"}}},
		}
		pm.Spec.BillingCycle = "hourly"
		pm.Spec.Tags = []string{"a"}
		pm.Spec.HardwareReservationID = "next-available"
		Expect(k8s.Create(ctx, pm)).To(Succeed())

		upstream := valid("upstream")
		upstream.Spec.Plan, upstream.Spec.MachineType = "", "c3.small.x86"
		upstream.Spec.OperatingSystem, upstream.Spec.OS = "", "custom_ipxe"
		upstream.Spec.IPXEURL = "http://boot.example/ipxe"
		Expect(k8s.Create(ctx, upstream)).To(Succeed(), "upstream CAPP's field names")
		Expect(upstream.Spec.DevicePlan()).To(Equal("c3.small.x86"))
		Expect(upstream.Spec.DeviceOS()).To(Equal("custom_ipxe"))

		unbonded := valid("unbonded")
		unbonded.Spec.Ports[0].Name = "eth1"
		unbonded.Spec.OperatingSystem, unbonded.Spec.IPXEURL = "custom_ipxe", "http://boot.example/ipxe"
		Expect(k8s.Create(ctx, unbonded)).To(Succeed(), "a NIC out of the bond carries networks")
	})
})
