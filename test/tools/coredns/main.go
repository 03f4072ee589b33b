// Command coredns is CoreDNS with only the plugins kubeadm's Corefile
// names (k8s.io/kubernetes cmd/kubeadm/app/phases/addons/dns): the cluster
// DNS of the nodes test/node boots, packed by kubelayer.sh as the image
// kubeadm's CoreDNS Deployment runs. CoreDNS's own main imports every
// plugin (core/plugin), and with them the cloud SDKs of route53, azure,
// clouddns and others; its documentation's way to choose the plugins at
// compile time is this one: coremain and the plugin packages, each of
// which registers itself. The order the plugins run in is CoreDNS's
// (core/dnsserver's Directives), not the imports'.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics" // prometheus
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
