// Package emulator turns the Metal API simulator's devices into the nodes of
// Cluster API's in-memory workload clusters. What a device becomes is read
// from its user-data alone, the bytes CAPP sent to the Metal API, as a real
// device's cloud-init would read them: a device whose user-data would not
// join a cluster (see Refusal) never becomes a node.
package emulator
