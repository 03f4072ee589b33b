// Package v1beta1 holds the API of the Equinix Metal infrastructure provider
// (CAPP): PacketCluster, PacketMachine and PacketMachineTemplate.
//
// A PacketMachine's ports carry VLAN networks whose addresses come from any
// CAPI IPAM pool (through IPAddressClaims) or are set statically; the
// provider renders them into the node's cloud-init network configuration.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1beta1
