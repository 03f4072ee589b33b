package cloud

import (
	"net/netip"
	"slices"
	"strings"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	corev1 "k8s.io/api/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

// nodeAddresses are the addresses of the node running on device:
//
//   - the node IPs kubelet was given (--node-ip, which kubelet passes on in
//     the annotation alpha.kubernetes.io/provided-node-ip) that the device
//     does not list, as InternalIP. They are the VLAN addresses IPAM gave
//     the node (CAPP writes them into --node-ip): the Metal API never sees
//     an address on a VLAN, and the node controller refuses to initialise a
//     node whose node IP is not among the cloud's addresses;
//   - the device's own addresses (management: the ones the platform gave
//     it), private ones as InternalIP, public ones as ExternalIP. An
//     Elastic IP routed to the device is left out: it is the cluster's
//     endpoint, which CAPP moves to another control-plane node when this
//     one goes, not an address of this node;
//   - the device's hostname.
func nodeAddresses(device *metalv1.Device, node *corev1.Node) []corev1.NodeAddress {
	var own, out []corev1.NodeAddress
	for _, a := range device.GetIpAddresses() {
		addr, err := netip.ParseAddr(a.GetAddress())
		if err != nil || !a.GetManagement() {
			continue
		}
		kind := corev1.NodeInternalIP
		if a.GetPublic() {
			kind = corev1.NodeExternalIP
		}
		own = append(own, corev1.NodeAddress{Type: kind, Address: addr.String()})
	}
	for _, ip := range providedNodeIPs(node) {
		listed := slices.ContainsFunc(own, func(a corev1.NodeAddress) bool { return a.Address == ip.String() })
		if !listed {
			out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
		}
	}
	out = append(out, own...)
	if hostname := device.GetHostname(); hostname != "" {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname})
	}
	return out
}

// providedNodeIPs are the addresses of kubelet's --node-ip, from the
// annotation kubelet sets with an external cloud provider: one address or
// two (one per family), comma-separated. Unspecified addresses (0.0.0.0,
// ::) ask kubelet to choose and name no address.
func providedNodeIPs(node *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for field := range strings.SplitSeq(node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr], ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(field))
		if err == nil && !ip.IsUnspecified() {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
