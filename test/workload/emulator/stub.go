package emulator

import (
	_ "github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	_ "github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
)
