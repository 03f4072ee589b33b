// Package device is the Equinix Metal side of one machine, shaped like
// capp/cloudinit: plain types in, plain results out.
//
//   - Spec is what the machine wants (its ports and their VLANs); Device is
//     what the platform has (the device, its ports, their newest VLAN
//     assignment batch).
//   - Plan(spec, device) is pure: it returns the next Step (create the
//     device, wait for it, take a port out of the bond, send one VLAN batch
//     for a port, wait for that batch, fail, or done). PlanDelete does the
//     same for deletion, and NodeReport reads what the node said.
//   - Executor carries a step out (Run, Create) through API, the few
//     shared/metal calls this package uses; Find and ReadBatches read the
//     device back into plain types, once it is proven the machine's
//     (Owned). The endpoint's reservation has the same shape: ReadEndpoint,
//     PlanEndpoint, AssignEndpoint.
//
// The controller loops observe -> plan -> execute; every step is safe to
// repeat, because Plan derives it from what the platform shows, never from
// what an earlier reconcile believes it did.
package device
