package capp

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

	DescribeTable("rejects a machine with a clear message",
		func(change func(*infrav1.PacketMachine), field, message string) {
			var obj client.Object = &infrav1.PacketCluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
				Spec:       infrav1.PacketClusterSpec{ProjectID: "p", VIPManager: "METALLB"},
			}
			if change != nil {
				pm := valid("m")
				change(pm)
				obj = pm
			}
			err := k8s.Create(ctx, obj)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(field))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a VXLAN above 3999", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].VXLAN = 4000 },
			"spec.ports[0].networks[0].vxlan", "less than or equal to 3999"),
		Entry("a VXLAN below 2", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].VXLAN = 1 },
			"spec.ports[0].networks[0].vxlan", "greater than or equal to 2"),
		Entry("a VLAN id that is not a UUID", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].VLANID = "vlan-1000" },
			"spec.ports[0].networks[0].vlanID", "must be the VLAN's UUID"),
		Entry("a network with neither a pool nor a static address", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
		}, "spec.ports[0].networks[0]", "exactly one of addressFromPool or address"),
		Entry("a network with both", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].Address = "10.0.0.5/24" },
			"spec.ports[0].networks[0]", "exactly one of addressFromPool or address"),
		Entry("a static address that is not one", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].AddressFromPool = nil
			pm.Spec.Ports[0].Networks[0].Address = "10.0.0.500"
		}, "spec.ports[0].networks[0].address", "must be an IP address, optionally with a prefix length"),
		Entry("a gateway next to a pool", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].Gateway = "10.0.0.1" },
			"spec.ports[0].networks[0]", "gateway is only set with a static address"),
		Entry("a pool without an apiGroup", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks[0].AddressFromPool.APIGroup = nil },
			"spec.ports[0].networks[0].addressFromPool", "apiGroup is required"),
		Entry("a route destination that is not a CIDR", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Destination = "192.168.0.0"
		}, "spec.ports[0].networks[0].routes[0].destination", "must be a network in CIDR notation"),
		Entry("a route destination with host bits", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Destination = "192.168.1.0/16"
		}, "spec.ports[0].networks[0].routes[0].destination", "no host bits set"),
		Entry("a route gateway that is not an IP", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Gateway = "gw.example"
		}, "spec.ports[0].networks[0].routes[0].gateway", "must be an IP address"),
		Entry("a route gateway of the other family", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Networks[0].Routes[0].Gateway = "fd00::1"
		}, "spec.ports[0].networks[0].routes[0]", "gateway and destination must be of the same IP family"),
		Entry("a port name that is not an interface name", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Name = "bond 0" },
			"spec.ports[0].name", "must be an interface name like bond0 or eth1"),
		Entry("a port name too long for <name>.<vxlan>", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Name = "enp1s0f0np0" },
			"spec.ports[0].name", "may not be more than 10 bytes"),
		Entry("two ports of the same name", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports = append(pm.Spec.Ports, *pm.Spec.Ports[0].DeepCopy())
		}, "spec.ports[1]", "Duplicate value"),
		Entry("a port without networks", func(pm *infrav1.PacketMachine) { pm.Spec.Ports[0].Networks = nil },
			"spec.ports[0].networks", "Required value"),
		Entry("full Layer 2 on bond0, which would cut the node off the metadata service", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Layer2 = true
		}, "spec.ports[0]", "layer2 is not supported on a bond: full Layer 2 takes the device's Layer 3 addresses"),
		Entry("a NIC kept in the bond that carries networks", func(pm *infrav1.PacketMachine) {
			pm.Spec.Ports[0].Name, pm.Spec.Ports[0].Bonded = "eth1", true
		}, "spec.ports[0]", "a NIC inside the bond cannot carry VLANs of its own"),
		Entry("an iPXE URL without the custom_ipxe operating system", func(pm *infrav1.PacketMachine) {
			pm.Spec.IPXEURL = "http://boot.example/ipxe"
		}, "spec", "ipxeURL needs the operating system custom_ipxe"),
		Entry("both plan and upstream's machineType", func(pm *infrav1.PacketMachine) { pm.Spec.MachineType = "c3.small.x86" },
			"spec", "exactly one of plan or machineType"),
		Entry("neither plan nor machineType", func(pm *infrav1.PacketMachine) { pm.Spec.Plan = "" },
			"spec", "exactly one of plan or machineType"),
		Entry("both operatingSystem and upstream's os", func(pm *infrav1.PacketMachine) { pm.Spec.OS = "ubuntu_24_04" },
			"spec", "exactly one of operatingSystem or os"),
		Entry("a PacketCluster VIP manager upstream does not know", nil, "spec.vipManager", "Unsupported value: \"METALLB\""),
	)

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
		pm.Spec.ProviderID = "equinixmetal://d-1"
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
