package cloudinit

import (
	"fmt"
	"net/netip"
)

// EndpointBindingPath is the ifupdown file that binds the cluster's
// control-plane endpoint to lo on a control-plane node, so the binding
// comes back after a reboot. Its line "    address <endpoint>/32" (/128 for
// IPv6) is the contract: whoever checks whether a node binds the endpoint
// reads it from this file.
const EndpointBindingPath = "/etc/network/interfaces.d/60-cluster-api-endpoint"

// InvalidValueError is a value the user-data cannot carry: Field names what
// it is, Value is the value as given.
type InvalidValueError struct {
	Field  string
	Value  string
	Reason string
}

func (e *InvalidValueError) Error() string {
	return fmt.Sprintf("%s %q %s", e.Field, e.Value, e.Reason)
}

// EndpointBinding binds addr, the public address the provider reserved as
// the cluster's endpoint and the platform routes to the node (vipManager
// CPEM), to the node's lo: the platform routes the address without putting
// it on an interface, so without the binding the node drops what comes for
// the API server. The file keeps the binding across reboots; the command
// binds it at once. On the node that runs kubeadm init (initsCluster) it
// runs before kubeadm, whose API server must answer on the endpoint to
// finish; on a node joining the control plane, after kubeadm join: bound
// before, the endpoint would lead the join to the node's own API server,
// which does not run yet, instead of the cluster's (upstream's template
// bound it only where the endpoint did not answer yet). "ip addr replace"
// succeeds when the address is already there.
func EndpointBinding(addr netip.Addr, initsCluster bool) (Extra, error) {
	if !addr.IsValid() || addr.Zone() != "" {
		return Extra{}, &InvalidValueError{Field: "control-plane endpoint address", Value: addr.String(), Reason: "is not an IPv4 or IPv6 address without a zone"}
	}
	addr = addr.Unmap()
	prefix := netip.PrefixFrom(addr, addr.BitLen()).String()
	// IPv4 takes the alias lo:0, as upstream CAPP's nodes had it; an IPv6
	// address has no alias label and goes on lo itself, which ifupdown
	// allows beside the loopback stanza of the other family.
	stanza := "auto lo:0\niface lo:0 inet static\n"
	if addr.Is6() {
		stanza = "iface lo inet6 static\n"
	}
	extra := Extra{Files: []File{{
		Path:        EndpointBindingPath,
		Permissions: "0644",
		Content:     "# The cluster's control-plane endpoint, written by the Cluster API Equinix Metal provider.\n" + stanza + "    address " + prefix + "\n",
	}}}
	bind := [][]string{{"ip", "addr", "replace", prefix, "dev", "lo"}}
	if initsCluster {
		extra.First = bind
	} else {
		extra.Last = bind
	}
	return extra, nil
}
