// Package cloudinit renders the node side of a PacketMachine's networks: the
// cloud-init user-data that takes the ports that are NICs out of the OS bond,
// creates a VLAN sub-interface per network on its port, gives it its
// address, gateway and routes, sets kubelet's node-ip, checks the result and
// reports it (a failure with its reason) to the Equinix Metal metadata
// service.
//
// Everything here is a pure function of its inputs, split in pieces
// (Script, Files, Merge, and the templates the script embeds: its ifupdown
// stanzas and its checks) so tests can hand each piece to the real tool
// that consumes it: ifupdown for the stanzas, bash and
// shellcheck for the scripts, cloud-init for the user-data, and ip in a
// network namespace for the addresses and routes.
package cloudinit
