package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// MachineFinalizer keeps a PacketMachine until its device is gone and its
	// addresses are released.
	MachineFinalizer = "packetmachine.infrastructure.cluster.x-k8s.io"

	// DeviceRequestedAnnotation is set on a PacketMachine, with an
	// optimistic lock, before its device is requested: a machine without it
	// (and without a providerID) never asked for one, so it creates its
	// device without looking for it in the project; one with it looks for
	// the device by its tag first, so a create whose answer was lost is
	// adopted rather than made twice.
	DeviceRequestedAnnotation = "infrastructure.cluster.x-k8s.io/device-requested"

	// IPClaimProtectionFinalizer keeps an IPAddressClaim, and so its address,
	// while the PacketMachine that made it may still use the address. Only the
	// PacketMachine reconciler removes it, once the device is gone.
	IPClaimProtectionFinalizer = "packetmachine.infrastructure.cluster.x-k8s.io/ip-claim-protection"

	// DNSServersAnnotation on an IPAddress lists, comma-separated, the DNS
	// servers of the address's subnet. The metal-vrf IPAM provider writes it
	// from its pools' spec.dnsServers (the CAPI IPAddress has no field for
	// them); any other provider may too. A network's spec nameservers take
	// precedence.
	DNSServersAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/dns-servers"

	// ClaimMachineAnnotation on the IPAddressClaims of a PacketMachine names
	// its Machine, and ClaimHardwareReservationAnnotation the hardware
	// reservation (spec.hardwareReservationID, when it names exactly one):
	// the metal-vrf IPAM provider pins addresses to them (a pool's
	// spec.preAllocations).
	ClaimMachineAnnotation             = "metal-vrf.ipam.cluster.x-k8s.io/machine"
	ClaimHardwareReservationAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/hardware-reservation"
)

// AddressType says how Kubernetes sees a network's address.
//
// +kubebuilder:validation:Enum=Internal;External
type AddressType string

const (
	// AddressTypeInternal addresses are the node's InternalIP; kubelet's
	// --node-ip is set to the first one of each IP family.
	AddressTypeInternal AddressType = "Internal"
	// AddressTypeExternal addresses are the node's ExternalIP.
	AddressTypeExternal AddressType = "External"
)

// BillingCycle is how Equinix Metal bills a device.
//
// +kubebuilder:validation:Enum=hourly;daily;monthly;yearly
type BillingCycle string

// NodeSoftware says where a node's container runtime, kubelet, kubeadm and
// kubectl come from.
//
// +kubebuilder:validation:Enum=Install;Preinstalled
type NodeSoftware string

const (
	// NodeSoftwareInstall: the provider's user-data installs them on a
	// stock apt-based image (Debian, Ubuntu), in the Machine's Kubernetes
	// version, and turns swap off, loads the kernel modules and sets the
	// sysctls kubeadm needs, before the bootstrap's commands.
	NodeSoftwareInstall NodeSoftware = "Install"
	// NodeSoftwarePreinstalled: the image has them and is prepared for
	// kubeadm (an image-builder image), or the bootstrap's own commands
	// install them; the provider adds nothing.
	NodeSoftwarePreinstalled NodeSoftware = "Preinstalled"
)

// PacketMachineSpec is the device a Machine runs on and its Layer 2 networks.
//
// +kubebuilder:validation:XValidation:rule="has(self.plan) != has(self.machineType)",message="exactly one of plan or machineType (upstream CAPP's name for it) must be set"
// +kubebuilder:validation:XValidation:rule="has(self.operatingSystem) != has(self.os)",message="exactly one of operatingSystem or os (upstream CAPP's name for it) must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.ipxeURL) || (has(self.os) ? self.os : self.operatingSystem) == 'custom_ipxe'",message="ipxeURL needs the operating system custom_ipxe"
// +kubebuilder:validation:XValidation:rule="has(self.ports) == has(oldSelf.ports) && (!has(self.ports) || self.ports == oldSelf.ports)",message="ports are immutable: changing a machine's networks at runtime is not supported; replace the machine instead"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)",fieldPath=".providerID",messageExpression="'is immutable once set (it was ' + oldSelf.providerID + '): a machine keeps its device; replace the machine instead'"
type PacketMachineSpec struct {
	// ProviderID is the device's identity in Kubernetes, equinixmetal://<device id>.
	// It is set once the device exists, and immutable from then on. A
	// providerID set by hand adopts the device only if it is provably the
	// machine's (its project and tags); any other is left alone.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^equinixmetal://[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')",messageExpression="'%s is not equinixmetal://<device UUID>'.format([self])"
	ProviderID string `json:"providerID,omitempty"`

	// Project is the Equinix Metal project of the device; empty means the
	// PacketCluster's project.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Project string `json:"project,omitempty"`

	// Metro the device is created in, e.g. "ny".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Metro string `json:"metro,omitempty"`

	// Facility the device is created in, e.g. "ny5".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Facility string `json:"facility,omitempty"`

	// Plan is the device's hardware plan, e.g. "c3.small.x86". Exactly one
	// of plan and machineType (upstream CAPP's name for it) is set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Plan string `json:"plan,omitempty"`

	// MachineType is upstream CAPP's name for plan: manifests written for
	// it apply unchanged.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	MachineType string `json:"machineType,omitempty"`

	// OperatingSystem is the device's operating system slug, e.g.
	// "ubuntu_24_04". Exactly one of operatingSystem and os (upstream CAPP's
	// name for it) is set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	OperatingSystem string `json:"operatingSystem,omitempty"`

	// OS is upstream CAPP's name for operatingSystem.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	OS string `json:"os,omitempty"`

	// BillingCycle of the device.
	// +optional
	BillingCycle BillingCycle `json:"billingCycle,omitempty"`

	// SSHKeys are public keys allowed to log in to the device.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=16384
	SSHKeys []string `json:"sshKeys,omitempty"`

	// Tags of the device. The tags that prove which machine and cluster a
	// device belongs to are the provider's: cluster-api-provider-packet:*
	// and upstream CAPP's capp:machine-uid:, capp:cluster-id: and
	// capp:namespace: are refused.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.all(t, !t.startsWith('cluster-api-provider-packet:') && !t.matches('^capp:(machine-uid|cluster-id|namespace):'))",messageExpression="'tag %s is reserved: tags starting with cluster-api-provider-packet: (or capp:machine-uid:, capp:cluster-id:, capp:namespace: of upstream CAPP) prove which machine and cluster a device belongs to, and only the provider writes them'.format([self.filter(t, t.startsWith('cluster-api-provider-packet:') || t.matches('^capp:(machine-uid|cluster-id|namespace):'))[0]])"
	Tags []string `json:"tags,omitempty"`

	// HardwareReservationID places the device on a reserved server: one
	// reservation ID, a comma-separated preference list (the first that can
	// take the device is used), or "next-available" for any free
	// reservation of the project.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	HardwareReservationID string `json:"hardwareReservationID,omitempty"`

	// IPXEURL is the iPXE script the device boots from; it needs the
	// operating system custom_ipxe.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	IPXEURL string `json:"ipxeURL,omitempty"`

	// NodeSoftware says where the node's containerd, kubelet, kubeadm and
	// kubectl come from: Install (the provider's user-data installs them,
	// for a stock image such as ubuntu_24_04) or Preinstalled (the image or
	// the bootstrap's own commands provide them). Unset means Preinstalled,
	// so manifests written for upstream CAPP, whose preKubeadmCommands
	// install them, do not install them twice. It is read when the
	// user-data is rendered, before the device is created.
	// +optional
	NodeSoftware NodeSoftware `json:"nodeSoftware,omitempty"`

	// Ports are the device's network ports (bond0, eth0, eth1) and the VLANs
	// each one carries. They cannot change after creation.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Ports []Port `json:"ports,omitempty"`
}

// Port is the Layer 2 configuration of one of the device's ports.
//
// A port has one VLAN sub-interface <name>.<vxlan> per vxlan, which holds at
// most one address of each IP family: two networks of one vxlan on a port
// are a dual-stack pair, never two addresses of one family.
//
// +kubebuilder:validation:XValidation:rule="self.networks.all(n, self.networks.filter(m, m.vxlan == n.vxlan).size() <= 2)",fieldPath=".networks",messageExpression="'vxlan %d has more than two networks on port %s: its sub-interface %s.%d holds at most one IPv4 and one IPv6 address'.format([self.networks.filter(n, self.networks.filter(m, m.vxlan == n.vxlan).size() > 2)[0].vxlan, self.name, self.name, self.networks.filter(n, self.networks.filter(m, m.vxlan == n.vxlan).size() > 2)[0].vxlan])"
// +kubebuilder:validation:XValidation:rule="self.networks.all(n, !has(n.address) || self.networks.filter(m, m.vxlan == n.vxlan && has(m.address) && (isCIDR(m.address) ? cidr(m.address).ip().family() : (isIP(m.address) ? ip(m.address).family() : 0)) == (isCIDR(n.address) ? cidr(n.address).ip().family() : (isIP(n.address) ? ip(n.address).family() : 0))).size() == 1)",fieldPath=".networks",messageExpression="'static addresses %s and %s are of one IP family on vxlan %d: the sub-interface %s.%d holds one address of each family'.format([self.networks.filter(n, has(n.address) && self.networks.filter(m, m.vxlan == n.vxlan && has(m.address) && (isCIDR(m.address) ? cidr(m.address).ip().family() : (isIP(m.address) ? ip(m.address).family() : 0)) == (isCIDR(n.address) ? cidr(n.address).ip().family() : (isIP(n.address) ? ip(n.address).family() : 0))).size() > 1)[0].address, self.networks.filter(n, has(n.address) && self.networks.filter(m, m.vxlan == n.vxlan && has(m.address) && (isCIDR(m.address) ? cidr(m.address).ip().family() : (isIP(m.address) ? ip(m.address).family() : 0)) == (isCIDR(n.address) ? cidr(n.address).ip().family() : (isIP(n.address) ? ip(n.address).family() : 0))).size() > 1)[1].address, self.networks.filter(n, has(n.address) && self.networks.filter(m, m.vxlan == n.vxlan && has(m.address) && (isCIDR(m.address) ? cidr(m.address).ip().family() : (isIP(m.address) ? ip(m.address).family() : 0)) == (isCIDR(n.address) ? cidr(n.address).ip().family() : (isIP(n.address) ? ip(n.address).family() : 0))).size() > 1)[0].vxlan, self.name, self.networks.filter(n, has(n.address) && self.networks.filter(m, m.vxlan == n.vxlan && has(m.address) && (isCIDR(m.address) ? cidr(m.address).ip().family() : (isIP(m.address) ? ip(m.address).family() : 0)) == (isCIDR(n.address) ? cidr(n.address).ip().family() : (isIP(n.address) ? ip(n.address).family() : 0))).size() > 1)[0].vxlan])"
// +kubebuilder:validation:XValidation:rule="!self.name.startsWith('bond') || !has(self.layer2) || !self.layer2",message="layer2 is not supported on a bond: full Layer 2 takes the device's Layer 3 addresses, and with them the metadata service the node reports through; use the hybrid modes (networks on bond0, or on eth1 taken out of the bond)"
// +kubebuilder:validation:XValidation:rule="self.name.startsWith('bond') || !has(self.bonded) || !self.bonded",message="a NIC inside the bond cannot carry VLANs of its own: put the networks on bond0, or leave bonded false to take the NIC out of the bond (hybrid unbonded)"
type Port struct {
	// Name of the port as Equinix Metal names it: bond0, or eth0 and eth1 on
	// a two-NIC server. The node carries each network of the port on the
	// VLAN sub-interface <name>.<vxlan>, which must fit Linux's 15-character
	// interface names, so the name has at most 10 characters.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-zA-Z][a-zA-Z0-9_-]{0,9}$')",messageExpression="size(self) > 10 ? '%s has %d characters, more than 10: its VLAN sub-interfaces %s.<vxlan> must fit the 15 characters of a Linux interface name'.format([self, size(self), self]) : '%s is not an interface name like bond0 or eth1: a letter, then letters, digits, - or _'.format([self])"
	Name string `json:"name"`

	// Bonded says whether a NIC (eth0, eth1) stays in bond0. A NIC that
	// carries networks must leave the bond: the provider disbonds it
	// (hybrid unbonded mode) and the node takes it out of its OS bond, while
	// bond0 keeps the device's Layer 3 addresses on the other NIC. On a bond
	// port it has no effect.
	// +optional
	Bonded bool `json:"bonded,omitempty"`

	// Layer2 would convert the port to full Layer 2. It is refused on a bond:
	// the device would lose its Layer 3 addresses and the metadata service
	// with them; the hybrid modes keep both.
	// +optional
	Layer2 bool `json:"layer2,omitempty"`

	// Networks the port carries, each a VLAN.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Networks []Network `json:"networks"`
}

// Network is one VLAN on a port and the address the node has on it.
//
// The address comes either from an IPAM pool (addressFromPool) or from the
// spec (address): exactly one of the two.
//
// +kubebuilder:validation:XValidation:rule="has(self.addressFromPool) != has(self.address)",messageExpression="has(self.address) ? 'exactly one of addressFromPool or address must be set, not both: address %s and addressFromPool %s %s'.format([self.address, self.addressFromPool.kind, self.addressFromPool.name]) : 'exactly one of addressFromPool or address (a static address) must be set; neither is'"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || has(self.address)",fieldPath=".gateway",messageExpression="'%s is only set with a static address: an address from a pool comes with the gateway of its pool'.format([self.gateway])"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !has(self.address) || !isIP(self.gateway) || !(isCIDR(self.address) || isIP(self.address)) || (isCIDR(self.address) ? cidr(self.address).ip().family() : ip(self.address).family()) == ip(self.gateway).family()",fieldPath=".gateway",messageExpression="'%s is IPv%d but the address %s is IPv%d: the gateway must be of the IP family of the address'.format([self.gateway, ip(self.gateway).family(), self.address, (isCIDR(self.address) ? cidr(self.address).ip().family() : ip(self.address).family())])"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !has(self.address) || !isCIDR(self.address) || !isIP(self.gateway) || cidr(self.address).ip().family() != ip(self.gateway).family() || cidr(self.address).masked().containsIP(self.gateway)",fieldPath=".gateway",messageExpression="'%s lies outside the subnet %s of the address %s: the gateway must be reachable on the subnet'.format([self.gateway, string(cidr(self.address).masked()), self.address])"
// +kubebuilder:validation:XValidation:rule="!has(self.routes) || !has(self.address) || !isCIDR(self.address) || self.routes.all(r, !has(r.gateway) || cidr(self.address).masked().containsIP(r.gateway))",fieldPath=".routes",messageExpression="'route to %s: gateway %s is not reachable on the subnet %s of the address %s: the gateway of a route must lie in the subnet'.format([self.routes.filter(r, has(r.gateway) && !cidr(self.address).masked().containsIP(r.gateway))[0].destination, self.routes.filter(r, has(r.gateway) && !cidr(self.address).masked().containsIP(r.gateway))[0].gateway, string(cidr(self.address).masked()), self.address])"
// +kubebuilder:validation:XValidation:rule="!has(self.netmask) || !has(self.address) || !isCIDR(self.address) || !(self.netmask in {'0.0.0.0': 0, '128.0.0.0': 1, '192.0.0.0': 2, '224.0.0.0': 3, '240.0.0.0': 4, '248.0.0.0': 5, '252.0.0.0': 6, '254.0.0.0': 7, '255.0.0.0': 8, '255.128.0.0': 9, '255.192.0.0': 10, '255.224.0.0': 11, '255.240.0.0': 12, '255.248.0.0': 13, '255.252.0.0': 14, '255.254.0.0': 15, '255.255.0.0': 16, '255.255.128.0': 17, '255.255.192.0': 18, '255.255.224.0': 19, '255.255.240.0': 20, '255.255.248.0': 21, '255.255.252.0': 22, '255.255.254.0': 23, '255.255.255.0': 24, '255.255.255.128': 25, '255.255.255.192': 26, '255.255.255.224': 27, '255.255.255.240': 28, '255.255.255.248': 29, '255.255.255.252': 30, '255.255.255.254': 31, '255.255.255.255': 32}) || cidr(self.address).prefixLength() == {'0.0.0.0': 0, '128.0.0.0': 1, '192.0.0.0': 2, '224.0.0.0': 3, '240.0.0.0': 4, '248.0.0.0': 5, '252.0.0.0': 6, '254.0.0.0': 7, '255.0.0.0': 8, '255.128.0.0': 9, '255.192.0.0': 10, '255.224.0.0': 11, '255.240.0.0': 12, '255.248.0.0': 13, '255.252.0.0': 14, '255.254.0.0': 15, '255.255.0.0': 16, '255.255.128.0': 17, '255.255.192.0': 18, '255.255.224.0': 19, '255.255.240.0': 20, '255.255.248.0': 21, '255.255.252.0': 22, '255.255.254.0': 23, '255.255.255.0': 24, '255.255.255.128': 25, '255.255.255.192': 26, '255.255.255.224': 27, '255.255.255.240': 28, '255.255.255.248': 29, '255.255.255.252': 30, '255.255.255.254': 31, '255.255.255.255': 32}[self.netmask]",fieldPath=".netmask",messageExpression="'%s is a /%d, but the address %s has the prefix length /%d: give one, or make them agree'.format([self.netmask, {'0.0.0.0': 0, '128.0.0.0': 1, '192.0.0.0': 2, '224.0.0.0': 3, '240.0.0.0': 4, '248.0.0.0': 5, '252.0.0.0': 6, '254.0.0.0': 7, '255.0.0.0': 8, '255.128.0.0': 9, '255.192.0.0': 10, '255.224.0.0': 11, '255.240.0.0': 12, '255.248.0.0': 13, '255.252.0.0': 14, '255.254.0.0': 15, '255.255.0.0': 16, '255.255.128.0': 17, '255.255.192.0': 18, '255.255.224.0': 19, '255.255.240.0': 20, '255.255.248.0': 21, '255.255.252.0': 22, '255.255.254.0': 23, '255.255.255.0': 24, '255.255.255.128': 25, '255.255.255.192': 26, '255.255.255.224': 27, '255.255.255.240': 28, '255.255.255.248': 29, '255.255.255.252': 30, '255.255.255.254': 31, '255.255.255.255': 32}[self.netmask], self.address, cidr(self.address).prefixLength()])"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !(has(self.address) && isIP(self.address) && has(self.netmask) && self.netmask in {'0.0.0.0': 0, '128.0.0.0': 1, '192.0.0.0': 2, '224.0.0.0': 3, '240.0.0.0': 4, '248.0.0.0': 5, '252.0.0.0': 6, '254.0.0.0': 7, '255.0.0.0': 8, '255.128.0.0': 9, '255.192.0.0': 10, '255.224.0.0': 11, '255.240.0.0': 12, '255.248.0.0': 13, '255.252.0.0': 14, '255.254.0.0': 15, '255.255.0.0': 16, '255.255.128.0': 17, '255.255.192.0': 18, '255.255.224.0': 19, '255.255.240.0': 20, '255.255.248.0': 21, '255.255.252.0': 22, '255.255.254.0': 23, '255.255.255.0': 24, '255.255.255.128': 25, '255.255.255.192': 26, '255.255.255.224': 27, '255.255.255.240': 28, '255.255.255.248': 29, '255.255.255.252': 30, '255.255.255.254': 31, '255.255.255.255': 32}) || ip(self.gateway).family() != ip(self.address).family() || cidr(self.address + {'0.0.0.0': '/0', '128.0.0.0': '/1', '192.0.0.0': '/2', '224.0.0.0': '/3', '240.0.0.0': '/4', '248.0.0.0': '/5', '252.0.0.0': '/6', '254.0.0.0': '/7', '255.0.0.0': '/8', '255.128.0.0': '/9', '255.192.0.0': '/10', '255.224.0.0': '/11', '255.240.0.0': '/12', '255.248.0.0': '/13', '255.252.0.0': '/14', '255.254.0.0': '/15', '255.255.0.0': '/16', '255.255.128.0': '/17', '255.255.192.0': '/18', '255.255.224.0': '/19', '255.255.240.0': '/20', '255.255.248.0': '/21', '255.255.252.0': '/22', '255.255.254.0': '/23', '255.255.255.0': '/24', '255.255.255.128': '/25', '255.255.255.192': '/26', '255.255.255.224': '/27', '255.255.255.240': '/28', '255.255.255.248': '/29', '255.255.255.252': '/30', '255.255.255.254': '/31', '255.255.255.255': '/32'}[self.netmask]).masked().containsIP(self.gateway)",fieldPath=".gateway",messageExpression="'%s lies outside the subnet %s of the address %s with netmask %s: the gateway must be reachable on the subnet'.format([self.gateway, string(cidr(self.address + {'0.0.0.0': '/0', '128.0.0.0': '/1', '192.0.0.0': '/2', '224.0.0.0': '/3', '240.0.0.0': '/4', '248.0.0.0': '/5', '252.0.0.0': '/6', '254.0.0.0': '/7', '255.0.0.0': '/8', '255.128.0.0': '/9', '255.192.0.0': '/10', '255.224.0.0': '/11', '255.240.0.0': '/12', '255.248.0.0': '/13', '255.252.0.0': '/14', '255.254.0.0': '/15', '255.255.0.0': '/16', '255.255.128.0': '/17', '255.255.192.0': '/18', '255.255.224.0': '/19', '255.255.240.0': '/20', '255.255.248.0': '/21', '255.255.252.0': '/22', '255.255.254.0': '/23', '255.255.255.0': '/24', '255.255.255.128': '/25', '255.255.255.192': '/26', '255.255.255.224': '/27', '255.255.255.240': '/28', '255.255.255.248': '/29', '255.255.255.252': '/30', '255.255.255.254': '/31', '255.255.255.255': '/32'}[self.netmask]).masked()), self.address, self.netmask])"
// +kubebuilder:validation:XValidation:rule="!has(self.routes) || !(has(self.address) && isIP(self.address) && has(self.netmask) && self.netmask in {'0.0.0.0': 0, '128.0.0.0': 1, '192.0.0.0': 2, '224.0.0.0': 3, '240.0.0.0': 4, '248.0.0.0': 5, '252.0.0.0': 6, '254.0.0.0': 7, '255.0.0.0': 8, '255.128.0.0': 9, '255.192.0.0': 10, '255.224.0.0': 11, '255.240.0.0': 12, '255.248.0.0': 13, '255.252.0.0': 14, '255.254.0.0': 15, '255.255.0.0': 16, '255.255.128.0': 17, '255.255.192.0': 18, '255.255.224.0': 19, '255.255.240.0': 20, '255.255.248.0': 21, '255.255.252.0': 22, '255.255.254.0': 23, '255.255.255.0': 24, '255.255.255.128': 25, '255.255.255.192': 26, '255.255.255.224': 27, '255.255.255.240': 28, '255.255.255.248': 29, '255.255.255.252': 30, '255.255.255.254': 31, '255.255.255.255': 32}) || self.routes.all(r, !has(r.gateway) || cidr(self.address + {'0.0.0.0': '/0', '128.0.0.0': '/1', '192.0.0.0': '/2', '224.0.0.0': '/3', '240.0.0.0': '/4', '248.0.0.0': '/5', '252.0.0.0': '/6', '254.0.0.0': '/7', '255.0.0.0': '/8', '255.128.0.0': '/9', '255.192.0.0': '/10', '255.224.0.0': '/11', '255.240.0.0': '/12', '255.248.0.0': '/13', '255.252.0.0': '/14', '255.254.0.0': '/15', '255.255.0.0': '/16', '255.255.128.0': '/17', '255.255.192.0': '/18', '255.255.224.0': '/19', '255.255.240.0': '/20', '255.255.248.0': '/21', '255.255.252.0': '/22', '255.255.254.0': '/23', '255.255.255.0': '/24', '255.255.255.128': '/25', '255.255.255.192': '/26', '255.255.255.224': '/27', '255.255.255.240': '/28', '255.255.255.248': '/29', '255.255.255.252': '/30', '255.255.255.254': '/31', '255.255.255.255': '/32'}[self.netmask]).masked().containsIP(r.gateway))",fieldPath=".routes",messageExpression="'route to %s: gateway %s is not reachable on the subnet %s of the address %s with netmask %s: the gateway of a route must lie in the subnet'.format([self.routes.filter(r, has(r.gateway) && !cidr(self.address + {'0.0.0.0': '/0', '128.0.0.0': '/1', '192.0.0.0': '/2', '224.0.0.0': '/3', '240.0.0.0': '/4', '248.0.0.0': '/5', '252.0.0.0': '/6', '254.0.0.0': '/7', '255.0.0.0': '/8', '255.128.0.0': '/9', '255.192.0.0': '/10', '255.224.0.0': '/11', '255.240.0.0': '/12', '255.248.0.0': '/13', '255.252.0.0': '/14', '255.254.0.0': '/15', '255.255.0.0': '/16', '255.255.128.0': '/17', '255.255.192.0': '/18', '255.255.224.0': '/19', '255.255.240.0': '/20', '255.255.248.0': '/21', '255.255.252.0': '/22', '255.255.254.0': '/23', '255.255.255.0': '/24', '255.255.255.128': '/25', '255.255.255.192': '/26', '255.255.255.224': '/27', '255.255.255.240': '/28', '255.255.255.248': '/29', '255.255.255.252': '/30', '255.255.255.254': '/31', '255.255.255.255': '/32'}[self.netmask]).masked().containsIP(r.gateway))[0].destination, self.routes.filter(r, has(r.gateway) && !cidr(self.address + {'0.0.0.0': '/0', '128.0.0.0': '/1', '192.0.0.0': '/2', '224.0.0.0': '/3', '240.0.0.0': '/4', '248.0.0.0': '/5', '252.0.0.0': '/6', '254.0.0.0': '/7', '255.0.0.0': '/8', '255.128.0.0': '/9', '255.192.0.0': '/10', '255.224.0.0': '/11', '255.240.0.0': '/12', '255.248.0.0': '/13', '255.252.0.0': '/14', '255.254.0.0': '/15', '255.255.0.0': '/16', '255.255.128.0': '/17', '255.255.192.0': '/18', '255.255.224.0': '/19', '255.255.240.0': '/20', '255.255.248.0': '/21', '255.255.252.0': '/22', '255.255.254.0': '/23', '255.255.255.0': '/24', '255.255.255.128': '/25', '255.255.255.192': '/26', '255.255.255.224': '/27', '255.255.255.240': '/28', '255.255.255.248': '/29', '255.255.255.252': '/30', '255.255.255.254': '/31', '255.255.255.255': '/32'}[self.netmask]).masked().containsIP(r.gateway))[0].gateway, string(cidr(self.address + {'0.0.0.0': '/0', '128.0.0.0': '/1', '192.0.0.0': '/2', '224.0.0.0': '/3', '240.0.0.0': '/4', '248.0.0.0': '/5', '252.0.0.0': '/6', '254.0.0.0': '/7', '255.0.0.0': '/8', '255.128.0.0': '/9', '255.192.0.0': '/10', '255.224.0.0': '/11', '255.240.0.0': '/12', '255.248.0.0': '/13', '255.252.0.0': '/14', '255.254.0.0': '/15', '255.255.0.0': '/16', '255.255.128.0': '/17', '255.255.192.0': '/18', '255.255.224.0': '/19', '255.255.240.0': '/20', '255.255.248.0': '/21', '255.255.252.0': '/22', '255.255.254.0': '/23', '255.255.255.0': '/24', '255.255.255.128': '/25', '255.255.255.192': '/26', '255.255.255.224': '/27', '255.255.255.240': '/28', '255.255.255.248': '/29', '255.255.255.252': '/30', '255.255.255.254': '/31', '255.255.255.255': '/32'}[self.netmask]).masked()), self.address, self.netmask])"
type Network struct {
	// VXLAN is the VLAN's tag (its "vxlan" in Equinix Metal), 2-3999. The
	// node's sub-interface is <port>.<vxlan>.
	// +required
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=3999
	VXLAN int32 `json:"vxlan"`

	// VLANID is the Equinix Metal id (a UUID) of the VLAN, when more than one
	// VLAN of the project and metro could match the vxlan.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$')",message="must be the VLAN's UUID"
	VLANID string `json:"vlanID,omitempty"`

	// Netmask of the network, e.g. 255.255.255.248, for addresses that come
	// without a prefix length. When the address has one, they must agree.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="self in {'0.0.0.0': 0, '128.0.0.0': 1, '192.0.0.0': 2, '224.0.0.0': 3, '240.0.0.0': 4, '248.0.0.0': 5, '252.0.0.0': 6, '254.0.0.0': 7, '255.0.0.0': 8, '255.128.0.0': 9, '255.192.0.0': 10, '255.224.0.0': 11, '255.240.0.0': 12, '255.248.0.0': 13, '255.252.0.0': 14, '255.254.0.0': 15, '255.255.0.0': 16, '255.255.128.0': 17, '255.255.192.0': 18, '255.255.224.0': 19, '255.255.240.0': 20, '255.255.248.0': 21, '255.255.252.0': 22, '255.255.254.0': 23, '255.255.255.0': 24, '255.255.255.128': 25, '255.255.255.192': 26, '255.255.255.224': 27, '255.255.255.240': 28, '255.255.255.248': 29, '255.255.255.252': 30, '255.255.255.254': 31, '255.255.255.255': 32}",messageExpression="'%s is not a netmask (ones, then zeros), e.g. 255.255.255.248'.format([self])"
	Netmask string `json:"netmask,omitempty"`

	// AddressFromPool is the IPAM pool (any kind: InClusterIPPool,
	// MetalVRFIPPool, ...) in the machine's namespace that hands out the
	// node's address on this network.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.apiGroup) && self.apiGroup != ''",message="apiGroup is required, e.g. ipam.cluster.x-k8s.io"
	// +kubebuilder:validation:XValidation:rule="self.kind != ''",fieldPath=".kind",message="is required: the kind of the pool, e.g. InClusterIPPool"
	// +kubebuilder:validation:XValidation:rule="self.name != ''",fieldPath=".name",message="is required: the name of the pool"
	AddressFromPool *corev1.TypedLocalObjectReference `json:"addressFromPool,omitempty"`

	// Address is a static address of the node on this network, with its
	// prefix length ("10.60.0.5/24") or without it, then netmask gives it.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isIP(self) || isCIDR(self)",message="must be an IP address, optionally with a prefix length, e.g. 10.60.0.5/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !(cidr(self) == cidr(self).masked()) || self.endsWith('/31') && cidr(self).ip().family() == 4 || self.endsWith('/32') || self.endsWith('/127') || self.endsWith('/128')",messageExpression="'%s is the network address of its subnet %s, which no host can have: give the node an address inside the subnet'.format([self, string(cidr(self).masked())])"
	Address string `json:"address,omitempty"`

	// Gateway of a static address's subnet.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// Nameservers are the node's DNS servers on this network, written into
	// the interface's configuration and /etc/resolv.conf. Empty: those the
	// address's pool gives (a MetalVRFIPPool's spec.dnsServers, which the
	// IPAM provider puts on the IPAddress), if any; set them here for pools
	// of other kinds and static addresses, or to override the pool's. At
	// most three, as resolv.conf uses no more.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=39
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) && ip.isCanonical(self)",messageExpression="'%s is not an IP address in canonical form, e.g. 10.60.0.53 or fd00::53'.format([self])"
	Nameservers []string `json:"nameservers,omitempty"`

	// AddressType says whether the address is the node's InternalIP or ExternalIP.
	// +optional
	AddressType AddressType `json:"addressType,omitempty"`

	// Routes reached through this network.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Routes []RouteSpec `json:"routes,omitempty"`
}

// RouteSpec is a static route through a network.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || !isIP(self.gateway) || !isCIDR(self.destination) || ip(self.gateway).family() == cidr(self.destination).ip().family()",fieldPath=".gateway",messageExpression="'%s is of another IP family than the destination %s: gateway and destination must be of the same IP family'.format([self.gateway, self.destination])"
type RouteSpec struct {
	// Destination network, e.g. 192.168.0.0/16.
	// +required
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a network in CIDR notation with no host bits set, e.g. 192.168.0.0/16"
	Destination string `json:"destination"`

	// Gateway the destination is reached through; empty means the gateway
	// of the network's address.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`
}

// DevicePlan is the device's plan, whichever of plan and machineType
// names it.
func (s *PacketMachineSpec) DevicePlan() string {
	if s.Plan != "" {
		return s.Plan
	}
	return s.MachineType
}

// DeviceOS is the device's operating system, whichever of operatingSystem
// and os names it.
func (s *PacketMachineSpec) DeviceOS() string {
	if s.OperatingSystem != "" {
		return s.OperatingSystem
	}
	return s.OS
}

// PacketMachineInitializationStatus reports the CAPI provisioning contract.
// +kubebuilder:validation:MinProperties=1
type PacketMachineInitializationStatus struct {
	// Provisioned is true once the device exists and reported its network
	// configured.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// NetworkStatus is the address a network of a port actually got.
type NetworkStatus struct {
	// VXLAN of the network.
	VXLAN int32 `json:"vxlan"`
	// ClaimName is the IPAddressClaim the address came from; empty for a
	// static address.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// Address assigned to the node on the network.
	Address string `json:"address"`
	// Prefix length of the network.
	Prefix int32 `json:"prefix"`
	// Gateway of the network, if it has one.
	// +optional
	Gateway string `json:"gateway,omitempty"`
}

// PortStatus is what a port's networks got, in the order of spec.ports[].networks[].
type PortStatus struct {
	// Name of the port.
	Name string `json:"name"`
	// Networks of the port.
	// +listType=atomic
	Networks []NetworkStatus `json:"networks"`
}

// PacketMachineStatus is what the PacketMachine reconciler observed.
type PacketMachineStatus struct {
	// Conditions: Paused, IPAddressClaimed, IPAddressClaimsFulfilled,
	// BootstrapDataRendered. Ready arrives with the device.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Initialization reports the CAPI provisioning contract.
	// +optional
	Initialization PacketMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// Addresses of the node: one per network with an addressType,
	// InternalIP or ExternalIP by that type.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// Ports are the addresses each port's networks got, once all are known.
	// +optional
	// +listType=atomic
	Ports []PortStatus `json:"ports,omitempty"`

	// UserDataSecretName is the Secret, owned by the PacketMachine, holding
	// the device's user-data: the bootstrap data merged with the network
	// configuration.
	// +optional
	UserDataSecretName string `json:"userDataSecretName,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// PacketMachine is an Equinix Metal device of a Cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1beta1"
// +kubebuilder:resource:path=packetmachines,scope=Namespaced,categories=cluster-api,shortName=pma
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster the machine belongs to"
// +kubebuilder:printcolumn:name="State",type="string",JSONPath=".status.conditions[?(@.type==\"DeviceReady\")].reason",description="What the device is doing"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description="Device active, VLANs attached, node network configured"
// +kubebuilder:printcolumn:name="InstanceID",type="string",JSONPath=".spec.providerID",description="The device, equinixmetal://<id>"
// +kubebuilder:printcolumn:name="Machine",type="string",JSONPath=".metadata.ownerReferences[?(@.kind==\"Machine\")].name",description="Machine that owns this PacketMachine"
// +kubebuilder:printcolumn:name="Addresses",type="string",JSONPath=".status.addresses[*].address",description="The machine's addresses",priority=1
// +kubebuilder:printcolumn:name="Claimed",type="string",JSONPath=".status.conditions[?(@.type==\"IPAddressClaimed\")].message",description="Addresses bound out of those claimed",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type PacketMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PacketMachineSpec   `json:"spec,omitempty"`
	Status PacketMachineStatus `json:"status,omitempty"`
}

// GetConditions returns the machine's conditions (CAPI's conditions.Getter).
func (m *PacketMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the machine's conditions (CAPI's conditions.Setter).
func (m *PacketMachine) SetConditions(conditions []metav1.Condition) {
	m.Status.Conditions = conditions
}

// PacketMachineList is a list of PacketMachines.
//
// +kubebuilder:object:root=true
type PacketMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PacketMachine `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &PacketMachine{}, &PacketMachineList{})
}
