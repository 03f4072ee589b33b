package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// MetalVRFIPPoolKind is the kind an IPAddressClaim names to draw from a namespaced pool.
	MetalVRFIPPoolKind = "MetalVRFIPPool"
	// GlobalMetalVRFIPPoolKind is the kind an IPAddressClaim names to draw from a cluster-scoped pool.
	GlobalMetalVRFIPPoolKind = "GlobalMetalVRFIPPool"

	// ProtectPoolFinalizer keeps a pool, and the record of what it handed out,
	// until no IPAddress of the pool is left.
	ProtectPoolFinalizer = "metal-vrf.ipam.cluster.x-k8s.io/protect-pool"

	// RequestedAddressAnnotation on an IPAddressClaim asks for one specific
	// address of the pool instead of the lowest free one. A claim whose
	// address another claim holds says so in its Ready condition and is
	// served once the address is released; one whose address the pool never
	// hands out (outside it, excluded, a gateway, of the other family) says
	// which rule keeps it out.
	RequestedAddressAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/requested-address"

	// DNSServersAnnotation on an IPAddress lists, comma-separated, the DNS
	// servers of the pool for the address's subnet (spec.subnets[].dnsServers
	// or spec.subnetDNSServers, else spec.dnsServers). The CAPI IPAddress has no field for them; the
	// Equinix Metal provider reads them from here into the node's
	// configuration.
	DNSServersAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/dns-servers"

	// MachineAnnotation on an IPAddressClaim names the Cluster API Machine
	// the claim is for, and HardwareReservationAnnotation the Equinix Metal
	// hardware reservation that machine runs on: they match the claim to
	// the pool's spec.preAllocations.
	MachineAnnotation             = "metal-vrf.ipam.cluster.x-k8s.io/machine"
	HardwareReservationAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/hardware-reservation"

	// SkipDeleteValidationAnnotation lets a pool with addresses in use be deleted.
	// It carries the in-cluster provider's name so tooling written for that
	// provider keeps working. clusterctl move sets its own delete-for-move
	// annotation, which is honoured as well.
	SkipDeleteValidationAnnotation = "ipam.cluster.x-k8s.io/skip-validate-delete-webhook"
)

// VRFScope chooses which addresses of a VRF a pool hands out.
//
// +kubebuilder:validation:Enum=GatewaySubnets;IPRanges
type VRFScope string

const (
	// VRFScopeGatewaySubnets hands out only the VRF IP reservations served
	// by a Metal Gateway: the subnets machines on the gateway's VLAN can use.
	VRFScopeGatewaySubnets VRFScope = "GatewaySubnets"
	// VRFScopeIPRanges hands out the VRF's whole ip_ranges, e.g. for
	// addresses announced over BGP that need no gateway.
	VRFScopeIPRanges VRFScope = "IPRanges"
)

// IPFamily is an IP address family.
//
// +kubebuilder:validation:Enum=IPv4;IPv6
type IPFamily string

const (
	// IPv4Family selects IPv4 addresses.
	IPv4Family IPFamily = "IPv4"
	// IPv6Family selects IPv6 addresses.
	IPv6Family IPFamily = "IPv6"
)

// SecretReference names a Secret.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the Secret. A MetalVRFIPPool reads Secrets of its own
	// namespace only, so it must be empty (or the pool's namespace) there;
	// a GlobalMetalVRFIPPool has no namespace and requires it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// VRFSource makes an Equinix Metal VRF a source of the pool's addresses.
type VRFSource struct {
	// ID of the VRF.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`

	// CredentialsRef names the Secret holding the Metal API credentials:
	// apiKey (required), and optionally baseURL (see docs/metal.md).
	CredentialsRef SecretReference `json:"credentialsRef"`

	// ProjectID, when set, must be the VRF's project: a guard against an
	// ID copied from the wrong project.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ProjectID string `json:"projectID,omitempty"`

	// Metro, when set, must be the VRF's metro code (e.g. "da").
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Metro string `json:"metro,omitempty"`

	// Scope chooses what the pool hands out: GatewaySubnets (the default),
	// only the VRF IP reservations served by a Metal Gateway; or IPRanges,
	// the VRF's whole ip_ranges. In both, every Metal Gateway address of
	// the VRF is reserved, and an address inside a gateway's subnet is
	// handed out with that subnet's prefix and gateway.
	// +optional
	// +kubebuilder:default=GatewaySubnets
	Scope VRFScope `json:"scope,omitempty"`

	// ReservationIDs narrows GatewaySubnets to these VRF IP reservations;
	// each must exist and be served by a Metal Gateway. Empty: all of them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	ReservationIDs []string `json:"reservationIDs,omitempty"`

	// IPFamily is the family of the VRF ranges the pool takes, IPv4 by
	// default: a VRF may hold both, a pool holds one.
	// +optional
	// +kubebuilder:default=IPv4
	IPFamily IPFamily `json:"ipFamily,omitempty"`
}

// NetworkReference makes one network of a PacketCluster a source of the
// pool's addresses.
type NetworkReference struct {
	// Name of the PacketCluster, in the pool's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Network is the name of one of the PacketCluster's spec.networks. Its
	// ipAddresses feed the pool when its assignment is cluster-api.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network"`
}

// MetalVRFIPPoolSpec is the address space of a pool and how its addresses are
// handed out.
//
// Three sources give addresses, unioned: explicit addresses (addresses
// with prefix and gateway, and subnets), an Equinix Metal VRF (vrf) and a
// PacketCluster network (networkRef). The pool reconciler resolves the
// last two and keeps what they gave in status.resolved, which is where
// allocation reads them from.
//
// +kubebuilder:validation:XValidation:rule="(has(self.addresses) && size(self.addresses) > 0) || (has(self.subnets) && size(self.subnets) > 0) || has(self.vrf) || has(self.networkRef)",message="spec.addresses: at least one address source is required (spec.addresses, spec.subnets, spec.vrf or spec.networkRef)"
// +kubebuilder:validation:XValidation:rule="!has(self.addresses) || has(self.prefix)",message="spec.prefix: required when spec.addresses is set"
// +kubebuilder:validation:XValidation:rule="has(self.allocationPrefixLength) == has(oldSelf.allocationPrefixLength) && (!has(self.allocationPrefixLength) || self.allocationPrefixLength == oldSelf.allocationPrefixLength)",message="spec.allocationPrefixLength is immutable: a pool hands out addresses or prefixes of one length for its whole life"
type MetalVRFIPPoolSpec struct {
	// Addresses that may be handed out: CIDRs ("10.0.0.0/24"), inclusive
	// ranges ("10.0.0.10-10.0.0.50") or single addresses, all of one IP
	// family, all inside the subnet given by prefix, not overlapping.
	//
	// Addresses with prefix and gateway are one subnet written the short
	// way: the same as an entry of subnets whose cidr is prefix around
	// addresses[0], with these addresses and that gateway. A pool may use
	// either form, or both (see Subnets).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	// +kubebuilder:validation:items:XValidation:rule="self.trim() == self",messageExpression="'\"%s\" has spaces around it: write \"%s\"'.format([self, self.trim()])"
	Addresses []string `json:"addresses,omitempty"`

	// Subnets are subnets of the pool, each handing out its own addresses
	// with its own prefix, gateway and DNS servers: for a pool over several
	// VLANs or routed subnets. They are of one IP family with the rest of
	// the pool, do not overlap one another, nor the subnet of addresses
	// (prefix around addresses[0], or around gateway).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Subnets []Subnet `json:"subnets,omitempty"`

	// VRF adds the addresses of an Equinix Metal VRF (see VRFSource).
	// +optional
	VRF *VRFSource `json:"vrf,omitempty"`

	// NetworkRef adds the ipAddresses of a PacketCluster network.
	// +optional
	NetworkRef *NetworkReference `json:"networkRef,omitempty"`

	// Prefix is the length of the subnet the addresses sit in; it is handed
	// out with each address that lies in no subnet a source defines (a
	// Metal Gateway subnet, a PacketCluster network CIDR). Required with
	// addresses, and when spec.vrf's IPRanges reach outside every Metal
	// Gateway subnet. At most 32 for IPv4 and 128 for IPv6.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	Prefix *int32 `json:"prefix,omitempty"`

	// Gateway of the subnet given by prefix (and spec.addresses[0], when
	// set), handed out with the addresses of that subnet and never
	// allocated itself. It must lie inside the subnet. It is also the
	// gateway of a PacketCluster network CIDR that contains it. The
	// gateways of spec.subnets are their entries' own.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// ExcludedAddresses are never handed out: CIDRs, ranges or single
	// addresses of the pool's family.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	// +kubebuilder:validation:items:XValidation:rule="self.trim() == self",messageExpression="'\"%s\" has spaces around it: write \"%s\"'.format([self, self.trim()])"
	ExcludedAddresses []string `json:"excludedAddresses,omitempty"`

	// AllocationPrefixLength makes the pool a prefix pool: each claim gets
	// a whole prefix of this length, the lowest free one aligned on it,
	// written to its IPAddress as spec.address (the prefix's first address)
	// and spec.prefix (this length), without a gateway. A prefix holding a
	// gateway, an excluded address or one outside the pool's addresses is
	// never handed out. It must not be shorter than the subnets of the pool
	// (spec.prefix, spec.subnets[].cidr, a source's subnet), at most 32 for
	// IPv4 and 128 for IPv6, e.g. 64 for a /64 per node. Unset: the pool
	// hands out addresses. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	AllocationPrefixLength *int32 `json:"allocationPrefixLength,omitempty"`

	// AllocateReservedIPAddresses lets the subnet's network and broadcast
	// addresses (IPv4) or its subnet-router anycast address (IPv6) be handed
	// out. They are skipped by default.
	// +optional
	AllocateReservedIPAddresses bool `json:"allocateReservedIPAddresses,omitempty"`

	// DNSServers are the DNS servers of the pool's addresses, given to
	// consumers with each address (see DNSServersAnnotation): the node's
	// resolvers, which DHCP would otherwise have configured. At most three,
	// as resolv.conf uses no more; of either IP family.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=39
	DNSServers []string `json:"dnsServers,omitempty"`

	// SubnetDNSServers give the addresses of one subnet of the pool other
	// DNS servers than spec.dnsServers: for a pool whose VRF source gives
	// several Metal Gateway subnets, each with resolvers of its own. (An
	// entry of spec.subnets says its own, in its dnsServers.)
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	SubnetDNSServers []SubnetDNSServers `json:"subnetDNSServers,omitempty"`

	// PreAllocations pin addresses of the pool to the claims of one owner:
	// a Cluster API Machine, or whatever machine runs on an Equinix Metal
	// hardware reservation, so a named control-plane machine, or a machine
	// replaced on the same reserved server, gets the same address. A
	// pre-allocated address is handed out to its owner's claims only;
	// another claim that requests it is refused.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	PreAllocations []PreAllocation `json:"preAllocations,omitempty"`

	// AddressReuseGracePeriodSeconds keeps a released address out of use for
	// this long after its claim was deleted, so ARP caches and switches forget
	// the old holder before a new machine gets the address. The claim's
	// IPAddress, being deleted, stays for the period (skipped when the pool
	// itself is being deleted), which keeps the hold across restarts. 0 or
	// unset: reuse at once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	AddressReuseGracePeriodSeconds *int32 `json:"addressReuseGracePeriodSeconds,omitempty"`
}

// PreAllocation pins an address to the claims of one owner. A claim's owner
// is what its consumer says in the claim's annotations MachineAnnotation and
// HardwareReservationAnnotation (the Equinix Metal provider sets both).
//
// +kubebuilder:validation:XValidation:rule="has(self.machine) != has(self.hardwareReservation)",message="exactly one of machine or hardwareReservation must be set"
type PreAllocation struct {
	// Machine is the name of the Cluster API Machine whose claims get the address.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Machine string `json:"machine,omitempty"`

	// HardwareReservation is the ID of the Equinix Metal hardware
	// reservation whose machine's claims get the address.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	HardwareReservation string `json:"hardwareReservation,omitempty"`

	// Namespace of the claims: required in a GlobalMetalVRFIPPool, which
	// serves every namespace; in a MetalVRFIPPool, empty or its own.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// Address pinned: one the pool hands out.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=39
	Address string `json:"address"`
}

// Subnet is one subnet of a pool and the addresses the pool hands out of it.
// Every address of it is handed out with its prefix length, its gateway and
// its DNS servers.
type Subnet struct {
	// CIDR of the subnet, without host bits (e.g. "10.60.1.0/24"). Its
	// length is the prefix handed out with every address of the subnet.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",messageExpression="'\"%s\" is not a subnet in CIDR notation, e.g. 10.60.1.0/24'.format([self])"
	CIDR string `json:"cidr"`

	// Addresses of the subnet that may be handed out: CIDRs, inclusive
	// ranges "a-b" or single addresses, inside cidr, not overlapping.
	// Empty: the whole subnet. Either way the gateway, and the network and
	// broadcast (IPv4) or subnet-router anycast (IPv6) addresses unless
	// spec.allocateReservedIPAddresses, are never handed out.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	// +kubebuilder:validation:items:XValidation:rule="self.trim() == self",messageExpression="'\"%s\" has spaces around it: write \"%s\"'.format([self, self.trim()])"
	Addresses []string `json:"addresses,omitempty"`

	// Gateway of the subnet, inside it: handed out with its addresses and
	// never allocated itself.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// DNSServers of the subnet's addresses, in place of spec.dnsServers: at
	// most three, of either IP family. An entry of spec.subnetDNSServers
	// more specific than cidr still wins inside it; one naming cidr itself
	// is refused while these are set (one place says a subnet's servers).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=39
	DNSServers []string `json:"dnsServers,omitempty"`
}

// SubnetDNSServers are the DNS servers of the pool's addresses in one subnet.
type SubnetDNSServers struct {
	// Subnet is a subnet of the pool in CIDR notation, without host bits
	// (e.g. a Metal Gateway subnet "10.60.1.0/29"). An address gets the
	// servers of the most specific entry containing it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=43
	Subnet string `json:"subnet"`

	// DNSServers of the subnet's addresses: at most three, of either IP family.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=39
	DNSServers []string `json:"dnsServers"`
}

// IPAddressesSummary counts a pool's addresses.
//
// Total and Free count address space, which for an IPv6 pool can exceed any
// integer type a client may decode into, so they are exact decimal strings.
// Used and OutOfRange count IPAddress objects and always fit an int64.
type IPAddressesSummary struct {
	// Total is the number of addresses the pool can hand out, as a decimal string.
	Total string `json:"total"`
	// Free is the number of addresses not in use, as a decimal string.
	Free string `json:"free"`
	// Used is the number of IPAddresses allocated from the pool.
	Used int64 `json:"used"`
	// OutOfRange is the number of IPAddresses of the pool whose address is no
	// longer part of its address space (after a spec change); they stay
	// allocated until their claims are released.
	OutOfRange int64 `json:"outOfRange"`
}

// ResolvedAddresses are addresses a source (spec.vrf, spec.networkRef) gave
// the pool on its last successful resolution.
type ResolvedAddresses struct {
	// Address is a CIDR, a range "a-b" or a single address.
	Address string `json:"address"`

	// Prefix is set when the source defines the subnet the addresses sit
	// in (a Metal Gateway subnet, a network CIDR): they are handed out with
	// it. Otherwise spec.prefix applies.
	// +optional
	Prefix *int32 `json:"prefix,omitempty"`

	// Gateway of that subnet (a Metal Gateway address), never handed out.
	// +optional
	Gateway string `json:"gateway,omitempty"`

	// Source names where the addresses come from: "vrf/<id>",
	// "vrf/<id>/reservation/<id>" or "packetcluster/<name>/<network>".
	Source string `json:"source"`

	// SubnetOnly marks a Metal Gateway subnet the pool does not hand out
	// from (not in spec.vrf.reservationIDs): its gateway stays reserved, and
	// addresses of other sources inside it get its prefix and gateway.
	// +optional
	SubnetOnly bool `json:"subnetOnly,omitempty"`
}

// ResolvedVRF is the VRF that spec.vrf named, as the Metal API showed it
// through the pool's own credentials.
type ResolvedVRF struct {
	// ID of the VRF.
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`
	// ProjectID is the project the VRF belongs to; read from an endpoint
	// other than the public Metal API, it is followed by "@" and that
	// endpoint, so that the pools of two endpoints never share an
	// allocation domain.
	// +kubebuilder:validation:MaxLength=512
	ProjectID string `json:"projectID"`
}

// MetalVRFIPPoolStatus is what the pool reconciler observed.
type MetalVRFIPPoolStatus struct {
	// Conditions: Ready, SourcesResolved.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// IPAddresses counts the pool's addresses.
	// +optional
	IPAddresses *IPAddressesSummary `json:"ipAddresses,omitempty"`

	// Resolved is what spec.vrf and spec.networkRef gave on their last
	// successful resolution. Allocation reads it, so a Metal API outage
	// does not stop the pool.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	Resolved []ResolvedAddresses `json:"resolved,omitempty"`

	// VRF is spec.vrf as last read with the pool's credentials. The pools
	// whose VRF resolved to the same endpoint, project and ID share their addresses
	// (one allocation domain); a pool whose credentials cannot read the VRF
	// has none and hands out nothing.
	// +optional
	VRF *ResolvedVRF `json:"vrf,omitempty"`

	// LastSyncTime is when every source last resolved successfully.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// MetalVRFIPPool hands out addresses to IPAddressClaims of its namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=metalvrfippools,scope=Namespaced,categories=cluster-api,shortName=mvip
// +kubebuilder:printcolumn:name="Addresses",type="string",JSONPath=".spec.addresses",description="Address entries of the pool"
// +kubebuilder:printcolumn:name="Subnets",type="string",JSONPath=".spec.subnets[*].cidr",priority=1,description="Subnets of spec.subnets"
// +kubebuilder:printcolumn:name="Total",type="string",JSONPath=".status.ipAddresses.total",description="Addresses the pool can hand out"
// +kubebuilder:printcolumn:name="Free",type="string",JSONPath=".status.ipAddresses.free",description="Addresses not in use"
// +kubebuilder:printcolumn:name="Used",type="integer",JSONPath=".status.ipAddresses.used",description="Addresses in use"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Synced",type="string",JSONPath=".status.conditions[?(@.type==\"SourcesResolved\")].status",priority=1,description="Whether spec.vrf and spec.networkRef resolved on the last attempt"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MetalVRFIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetalVRFIPPoolSpec   `json:"spec,omitempty"`
	Status MetalVRFIPPoolStatus `json:"status,omitempty"`
}

// MetalVRFIPPoolList is a list of MetalVRFIPPools.
//
// +kubebuilder:object:root=true
type MetalVRFIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MetalVRFIPPool `json:"items"`
}

// GlobalMetalVRFIPPool hands out addresses to IPAddressClaims of every namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=globalmetalvrfippools,scope=Cluster,categories=cluster-api,shortName=gmvip
// +kubebuilder:printcolumn:name="Addresses",type="string",JSONPath=".spec.addresses",description="Address entries of the pool"
// +kubebuilder:printcolumn:name="Subnets",type="string",JSONPath=".spec.subnets[*].cidr",priority=1,description="Subnets of spec.subnets"
// +kubebuilder:printcolumn:name="Total",type="string",JSONPath=".status.ipAddresses.total",description="Addresses the pool can hand out"
// +kubebuilder:printcolumn:name="Free",type="string",JSONPath=".status.ipAddresses.free",description="Addresses not in use"
// +kubebuilder:printcolumn:name="Used",type="integer",JSONPath=".status.ipAddresses.used",description="Addresses in use"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Synced",type="string",JSONPath=".status.conditions[?(@.type==\"SourcesResolved\")].status",priority=1,description="Whether spec.vrf and spec.networkRef resolved on the last attempt"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type GlobalMetalVRFIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetalVRFIPPoolSpec   `json:"spec,omitempty"`
	Status MetalVRFIPPoolStatus `json:"status,omitempty"`
}

// GlobalMetalVRFIPPoolList is a list of GlobalMetalVRFIPPools.
//
// +kubebuilder:object:root=true
type GlobalMetalVRFIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalMetalVRFIPPool `json:"items"`
}
