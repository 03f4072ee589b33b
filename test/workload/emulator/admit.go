package emulator

import "net/netip"

// Routes are the public addresses the platform reserved in the project,
// each with the device it routes it to ("" while it routes it nowhere).
type Routes map[netip.Addr]string

// Admit decides which nodes would come up, given how the platform routes
// its public addresses: it returns those that would, joining nodes with the
// ClusterName of the control plane answering at their endpoint, and a
// *Refusal for each of the others.
//
// A control plane whose endpoint is a reserved public address (a CPEM
// cluster's Elastic IP) must bind it: its API server answers there through
// the address on lo, and nowhere else. A joining node, control plane or
// worker, reaches its endpoint only when the platform routes the address
// to a control-plane device that binds it and itself came up.
//
// Nodes in joined, by device, came up before: they stay as they were
// whatever the routes are now, as a node that joined does not leave its
// cluster when the address moves.
func Admit(nodes []Node, routes Routes, joined map[string]Node) (admitted []Node, refused []error) {
	serving := map[string]Node{} // control planes that came up, by device
	var joining []Node
	for _, n := range nodes {
		if before, ok := joined[n.DeviceID]; ok {
			admitted = append(admitted, before)
			if before.Role.IsControlPlane() {
				serving[n.DeviceID] = before
			}
			continue
		}
		if _, public := routes[n.Endpoint.Addr()]; n.Role.IsControlPlane() && public && n.Binds != n.Endpoint.Addr() {
			refused = append(refused, refuse(n.DeviceID, EndpointNotBound,
				"the endpoint %s is a public address the platform routes, and the control plane binds %s", n.Endpoint.Addr(), orNone(n.Binds)))
			continue
		}
		if n.Role == FirstControlPlane {
			serving[n.DeviceID] = n
			admitted = append(admitted, n)
			continue
		}
		joining = append(joining, n)
	}
	// Control planes join first: a worker may reach the cluster through one
	// of them once the address moved there.
	var workers []Node
	for _, n := range joining {
		if n.Role == Worker {
			workers = append(workers, n)
			continue
		}
		n, err := reach(n, routes, serving)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		serving[n.DeviceID] = n
		admitted = append(admitted, n)
	}
	for _, n := range workers {
		n, err := reach(n, routes, serving)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		admitted = append(admitted, n)
	}
	return admitted, refused
}

// reach gives the joining node n the cluster of the control plane its
// endpoint leads to, or refuses it.
func reach(n Node, routes Routes, serving map[string]Node) (Node, error) {
	addr := n.Endpoint.Addr()
	target, reserved := routes[addr]
	switch {
	case !reserved:
		return n, refuse(n.DeviceID, EndpointUnreachable, "the endpoint %s is not an address the platform reserved", n.Endpoint)
	case target == "":
		return n, refuse(n.DeviceID, EndpointUnreachable, "the platform routes the endpoint %s to no device", n.Endpoint)
	}
	cp, ok := serving[target]
	switch {
	case !ok:
		return n, refuse(n.DeviceID, EndpointUnreachable, "the platform routes %s to device %s, which runs no control plane that came up", addr, target)
	case cp.Binds != addr || cp.Endpoint.Port() != n.Endpoint.Port():
		return n, refuse(n.DeviceID, EndpointUnreachable, "device %s, to which the platform routes %s, serves %s", target, addr, cp.Endpoint)
	}
	n.ClusterName = cp.ClusterName
	if n.KubernetesVersion == "" {
		n.KubernetesVersion = cp.KubernetesVersion
	}
	return n, nil
}
