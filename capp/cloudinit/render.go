package cloudinit

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"text/template"
)

// DefaultMetadataURL is Equinix Metal's metadata service.
const DefaultMetadataURL = "https://metadata.platformequinix.com/metadata"

// Paths on the node.
const (
	// ScriptPath is the network configuration script.
	ScriptPath = "/var/lib/capp/configure-network.sh"
	// StanzasPath is the ifupdown file the script writes, so the VLAN
	// sub-interfaces come back after a reboot.
	StanzasPath = "/etc/network/interfaces.d/capp-vlans"
	// ModulesPath loads 8021q at boot.
	ModulesPath = "/etc/modules-load.d/capp-vlan.conf"
	// KubeletDefaultsPath carries kubelet's --node-ip (KUBELET_EXTRA_ARGS,
	// read by the kubeadm kubelet drop-in after kubeadm's own flags).
	KubeletDefaultsPath = "/etc/default/kubelet"
)

// Options tune the rendering.
type Options struct {
	// MetadataURL is the metadata service the node reads its interfaces and
	// user_state_url from; empty means DefaultMetadataURL.
	MetadataURL string
}

// baseMetric is the metric of a network's default route via its gateway;
// network i uses baseMetric+i. Above the device's own default route (metric
// 0 on bond0), so the VLAN gateways are a fallback that never takes over the
// public network, and distinct so that two networks' default routes coexist.
const baseMetric = 1000

// maxStateMessage bounds, in characters, the message of a user state event
// the script posts: a failure's reason goes into it, and from there into a
// condition of the machine.
const maxStateMessage = 200

//go:embed templates.tmpl
var templatesText string

var templates = template.Must(template.New("").Parse(templatesText))

// networkView is a network as the templates see it.
type networkView struct {
	Interface string
	// Auto is true on the first network of an interface, which carries the
	// interface's "auto" line.
	Auto    bool
	Family  string // inet or inet6, ifupdown's method family
	IPFlag  string // -4 or -6, ip(8)'s
	Address string
	Gateway string
	Metric  int
	Routes  []routeView
	// Nameservers is the stanza's dns-nameservers: space-separated.
	Nameservers string
}

type routeView struct {
	Destination string
	Via         string
}

type portView struct {
	Var    string
	Name   string
	Device string // "${Var}"
	// NIC is true for a port that is not a bond, which the script takes out
	// of the OS bond.
	NIC bool
}

type view struct {
	MetadataURL string
	StanzasPath string
	MaxMessage  int
	Ports       []portView
	// NICs are the devices of the ports that are not bonds, each with a
	// stanza of its own.
	NICs []string
	// Interfaces are brought up in order: the NICs, then the VLAN
	// sub-interfaces.
	Interfaces []string
	Networks   []networkView
	// Nameservers of all networks, each once, for resolv.conf.
	Nameservers []string
}

// bondPattern matches the ports that are bonds; every other port is a NIC.
var bondPattern = regexp.MustCompile(`^bond[0-9]+$`)

// isNIC tells whether port is a NIC rather than a bond. Equinix Metal names
// its bonds bondN; a NIC a machine's networks sit on is one the provider has
// taken out of its bond (hybrid unbonded mode), so the node must too.
func isNIC(port string) bool {
	return !bondPattern.MatchString(port)
}

// newView lays networks out for the templates, naming each port's local
// device with device(port).
func newView(networks []Network, device func(port string) string) view {
	v := view{MaxMessage: maxStateMessage}
	for _, port := range ports(networks) {
		if isNIC(port) {
			v.NICs = append(v.NICs, device(port))
		}
	}
	v.Interfaces = append(v.Interfaces, v.NICs...)
	autos := map[string]bool{}
	for i, n := range networks {
		iface := n.Interface(device(n.Port))
		nv := networkView{
			Interface: iface,
			Auto:      !autos[iface],
			Family:    "inet",
			IPFlag:    family(n.Address.Addr()),
			Address:   n.Address.String(),
			Metric:    baseMetric + i,
		}
		if nv.Auto {
			v.Interfaces = append(v.Interfaces, iface)
		}
		autos[iface] = true
		if n.Address.Addr().Is6() {
			nv.Family = "inet6"
		}
		if n.Gateway.IsValid() {
			nv.Gateway = n.Gateway.String()
		}
		nv.Nameservers = joinAddrs(n.Nameservers, " ")
		for _, r := range n.Routes {
			rv := routeView{Destination: r.Destination.String()}
			if gw := n.routeGateway(r); gw.IsValid() {
				rv.Via = gw.String()
			}
			nv.Routes = append(nv.Routes, rv)
		}
		v.Networks = append(v.Networks, nv)
	}
	for _, ns := range Nameservers(networks) {
		v.Nameservers = append(v.Nameservers, ns.String())
	}
	return v
}

func execute(name string, v view) string {
	var b strings.Builder
	if err := templates.ExecuteTemplate(&b, name, v); err != nil {
		// The templates are fixed and the view is built here: an error is a bug.
		panic(fmt.Sprintf("rendering %s: %v", name, err))
	}
	return b.String()
}

// Script renders the node's network configuration script (ScriptPath). It
// finds each port's local device, takes the ports that are NICs out of the
// OS bond (at once and in the ifupdown configuration), writes the stanzas,
// brings the NICs and VLAN sub-interfaces up with ifup, verifies the result
// and reports it, a failure with its reason.
func Script(networks []Network, opts Options) (string, error) {
	if err := Validate(networks); err != nil {
		return "", err
	}
	// The script names each port's device by the variable device_of sets.
	refs := map[string]string{}
	var portViews []portView
	for i, name := range ports(networks) {
		variable := fmt.Sprintf("port_%d", i)
		refs[name] = "${" + variable + "}"
		portViews = append(portViews, portView{Var: variable, Name: name, Device: refs[name], NIC: isNIC(name)})
	}
	v := newView(networks, func(port string) string { return refs[port] })
	v.Ports = portViews
	v.StanzasPath = StanzasPath
	v.MetadataURL = opts.MetadataURL
	if v.MetadataURL == "" {
		v.MetadataURL = DefaultMetadataURL
	}
	if strings.ContainsAny(v.MetadataURL, "'\n") {
		return "", fmt.Errorf("metadata URL %q contains a quote or a newline", v.MetadataURL)
	}
	return execute("script", v), nil
}
