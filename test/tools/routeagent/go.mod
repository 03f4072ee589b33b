module github.com/metal-vrf/cluster-api-metal-vrf/test/tools/routeagent

// The pod network of the nodes test/node boots (kubelayer.sh builds its
// image): a module of its own, so the repository's module does not take
// netlink for a test's DaemonSet.

go 1.26.2

require github.com/vishvananda/netlink v1.3.1

require (
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.10.0 // indirect
)
