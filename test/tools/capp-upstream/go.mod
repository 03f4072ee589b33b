// Upstream CAPP v0.9.0 (sigs.k8s.io/cluster-api-provider-packet), the last
// release of the retired provider: test/e2e/upgrade installs its CRDs, as a
// management cluster running it has them, and upgrades them to ours. Only
// its source is downloaded; nothing of it is built.
module github.com/metal-vrf/cluster-api-metal-vrf/test/tools/capp-upstream

go 1.26.2

require sigs.k8s.io/cluster-api-provider-packet v0.9.0
