// Package cloud is the Equinix Metal cloud provider of this project's cloud
// controller manager (k8s.io/cloud-provider): it initialises a workload
// cluster's nodes from their devices and tells the node lifecycle controller
// which devices are gone or powered off.
//
// It implements InstancesV2 only. The endpoint's Elastic IP, which
// Equinix Metal's own cloud provider (CPEM) moved between control-plane
// nodes, is routed by CAPP (vipManager CPEM); there are no load balancers
// (the platform's is gone), no routes (the nodes share a VLAN) and no
// Zones, which InstancesV2 replaces.
//
// Every call goes through package metal (typed errors, retries, metrics):
// GetDevice for a node with a provider ID, ListDevices by hostname in the
// configured project for one without.
package cloud
