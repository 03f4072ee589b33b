// Package workload brings workload clusters up from the project's flavors
// without machines: the devices the Metal API simulator holds become nodes
// of Cluster API's in-memory workload clusters (package emulator), judged by
// the user-data CAPP sent for them, and `make test-workload` drives Cluster
// API's own kubeadm control plane, kubeadm bootstrap and core managers over
// them until the Cluster is Available.
//
// It is a Go module of its own because it imports sigs.k8s.io/cluster-api/test
// (the in-memory API server, etcd and runtime), which brings a large tree of
// test dependencies (kind, docker clients, ginkgo's e2e framework) that the
// providers' go.mod must not carry: the providers' users would inherit them.
// The module requires the providers' module through a replace to the
// repository's root, so it always tests the code beside it.
package workload
