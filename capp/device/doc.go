// Package device is the Equinix Metal side of a machine and of a cluster,
// shaped like capp/cloudinit: plain types in, plain results out. It reads
// observe -> plan -> execute:
//
//   - Observe: Find reads a machine's device by its ID, or by the
//     machine's tag, proven the machine's (Owned) before anything else is
//     done with it; ResolveVLANs resolves the ports' VLANs in a metro, and
//     ReadBatches the newest batch of each port that lacks some. From what
//     it found the controller builds a Spec: the machine's providerID,
//     whether a device may be created now (its place known, a creation
//     slot held), whether a VLAN is missing in the device's metro, and the
//     ports' VLANs.
//   - Plan(spec, device) is pure and decides the one next Step: create the
//     device, wait to create it, wait for it, wait for a missing VLAN, take
//     a port out of the bond, send one VLAN batch for a port, wait for that
//     batch, fail, or done. Step.OnPorts tells the device's steps
//     (DeviceReady) from its ports' (VLANsAttached). PlanDelete decides
//     the steps of a deletion, and NodeReport reads what the node said.
//   - Executor carries a step out through API, the few shared/metal calls
//     this package uses: Create (with PickReservation's hardware
//     reservation), Run for a port step or a delete.
//
// A cluster's endpoint has the same shape: ReadEndpoint and FindEndpoints
// observe, PlanEndpoint (routing it to a device) and PlanReservation (which
// reservation to keep, release or make) decide, and AssignEndpoint,
// ReserveEndpoint and ReleaseEndpoint execute. No SDK type is used above
// this package.
//
// The controller observes, plans once and executes one step per reconcile.
// Every step is safe to repeat, because Plan derives it from what the
// platform shows, never from what an earlier reconcile believes it did.
package device
