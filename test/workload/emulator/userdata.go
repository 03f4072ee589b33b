package emulator

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// Role is what a device becomes in its cluster.
type Role string

const (
	// FirstControlPlane runs kubeadm init: it creates the cluster.
	FirstControlPlane Role = "first control plane"
	// ControlPlane runs kubeadm join as a control plane.
	ControlPlane Role = "control plane"
	// Worker runs kubeadm join as a worker.
	Worker Role = "worker"
)

// IsControlPlane tells whether the role runs the control plane's static pods.
func (r Role) IsControlPlane() bool { return r == FirstControlPlane || r == ControlPlane }

// Device is what the emulator reads of a device: its identity as the
// metadata service tells it to cloud-init, and its user-data.
type Device struct {
	ID       string
	Hostname string
	UserData []byte
}

// Node is what a device's user-data makes of it.
type Node struct {
	DeviceID string
	// Name is the kubelet's node name: nodeRegistration.name, else the
	// device's hostname, as kubeadm defaults it.
	Name string
	Role Role
	// ClusterName is kubeadm init's clusterName. A joining node names no
	// cluster: it joins whatever answers at Endpoint (see Admit).
	ClusterName string
	// KubernetesVersion is kubeadm init's kubernetesVersion.
	KubernetesVersion string
	// Endpoint is the control plane endpoint kubeadm init configures, or
	// the API server a joining node discovers the cluster through.
	Endpoint netip.AddrPort
	// CACertHashes pin the cluster CA a joining node accepts.
	CACertHashes []string
	ProviderID   string
	// NodeIP is the kubelet's --node-ip from the defaults file CAPP writes;
	// the zero Addr when the user-data sets none.
	NodeIP netip.Addr
	// ExternalCloudProvider: the kubelet runs with cloud-provider external,
	// so the node waits tainted until a cloud controller initialises it.
	ExternalCloudProvider bool
	// Binds is the endpoint address the device binds to its loopback
	// interface; the zero Addr when it binds none.
	Binds netip.Addr
	// ConfiguresNetwork: the runcmd runs CAPP's network script, which
	// reports its outcome to the metadata service.
	ConfiguresNetwork bool
}

// kubeadmCommand finds kubeadm init or join in a runcmd entry, with the
// file its --config names.
var kubeadmCommand = regexp.MustCompile(`\bkubeadm (init|join)\b.*--config[ =](\S+)`)

// jinjaExpression is a Jinja expression as cloud-init's templates write
// them; jinjaVariables are those of cloud-init's instance data that the
// emulator fills in from the device.
var (
	jinjaExpression = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_.]+)\s*\}\}`)
	jinjaDelimiters = []string{"{{", "{%", "{#"}
)

const jinjaHeader = "## template: jinja"

// Read decides what node the device would become, from its user-data as
// cloud-init and kubeadm would read it, or returns a *Refusal saying why it
// would not be one. It does not look beyond the device: whether the node
// could reach its cluster is Admit's question.
func Read(d Device) (Node, error) {
	data, err := renderJinja(d)
	if err != nil {
		return Node{}, err
	}
	cc, err := parseCloudConfig(d.ID, data)
	if err != nil {
		return Node{}, err
	}
	verb, configPath, kubeadmAt := cc.kubeadm()
	if verb == "" {
		return Node{}, refuse(d.ID, NoKubeadm, "no runcmd entry runs kubeadm init or kubeadm join with --config")
	}
	config, ok := cc.files[configPath]
	if !ok {
		return Node{}, refuse(d.ID, KubeadmConfigMissing, "kubeadm %s reads %s, which the user-data does not write", verb, configPath)
	}
	n := Node{DeviceID: d.ID, Name: d.Hostname}
	var registration bootstrapv1.NodeRegistrationOptions
	if verb == "init" {
		registration, err = readInit(&n, config)
	} else {
		registration, err = readJoin(&n, config)
	}
	if err != nil {
		return Node{}, refuse(d.ID, KubeadmConfigInvalid, "%s: %v", configPath, err)
	}
	if registration.Name != "" {
		n.Name = registration.Name
	}
	for _, arg := range registration.KubeletExtraArgs {
		value := ptr.Deref(arg.Value, "")
		switch arg.Name {
		case "provider-id":
			n.ProviderID = value
		case "cloud-provider":
			n.ExternalCloudProvider = value == "external"
		}
	}
	if want := device.ProviderID(d.ID); n.ProviderID != want {
		return Node{}, refuse(d.ID, ProviderIDMismatch, "the kubelet's provider ID is %q, the device's is %q", n.ProviderID, want)
	}
	if n.NodeIP, err = nodeIP(cc.files[cloudinit.KubeletDefaultsPath]); err != nil {
		return Node{}, refuse(d.ID, KubeadmConfigInvalid, "%s: %v", cloudinit.KubeletDefaultsPath, err)
	}
	n.ConfiguresNetwork = slices.ContainsFunc(cc.runcmd, func(args []string) bool { return slices.Equal(args, cloudinit.RunCommand) })
	var bindAt int
	if n.Binds, bindAt, err = binding(d.ID, cc); err != nil {
		return Node{}, err
	}
	if n.Role == ControlPlane && bindAt >= 0 && bindAt < kubeadmAt {
		return Node{}, refuse(d.ID, BindsBeforeJoin, "runcmd binds %s to lo (entry %d) before kubeadm join (entry %d)", n.Binds, bindAt, kubeadmAt)
	}
	return n, nil
}

// renderJinja renders the user-data as cloud-init does when it starts with
// the Jinja header, filling in the instance data the emulator knows; an
// expression it does not know, or one left in user-data without the header,
// is refused: the node would carry it literally.
func renderJinja(d Device) ([]byte, error) {
	data := d.UserData
	if !bytes.HasPrefix(data, []byte(jinjaHeader)) {
		for _, delim := range jinjaDelimiters {
			if bytes.Contains(data, []byte(delim)) {
				return nil, refuse(d.ID, UnrenderedTemplate, "the user-data holds %q without the %q header: cloud-init leaves it as it is", delim, jinjaHeader)
			}
		}
		return data, nil
	}
	values := map[string]string{
		"v1.instance_id":        d.ID,
		"v1.local_hostname":     d.Hostname,
		"ds.meta_data.id":       d.ID,
		"ds.meta_data.hostname": d.Hostname,
	}
	var unknown []string
	out := jinjaExpression.ReplaceAllFunc(data, func(expr []byte) []byte {
		name := string(jinjaExpression.FindSubmatch(expr)[1])
		v, ok := values[name]
		if !ok {
			unknown = append(unknown, name)
		}
		return []byte(v)
	})
	if len(unknown) > 0 {
		return nil, refuse(d.ID, UnrenderedTemplate, "the emulator does not know the instance data %v", unknown)
	}
	for _, delim := range jinjaDelimiters {
		if bytes.Contains(out, []byte(delim)) {
			return nil, refuse(d.ID, UnrenderedTemplate, "a Jinja statement or expression (%q) the emulator does not render", delim)
		}
	}
	return out, nil
}

// cloudConfig is what the emulator reads of a cloud-config: its files by
// path, and its runcmd entries as argument lists.
type cloudConfig struct {
	files  map[string]string
	runcmd [][]string
}

func parseCloudConfig(deviceID string, data []byte) (*cloudConfig, error) {
	header, body := data, data
	for strings.HasPrefix(string(body), "#") {
		_, rest, _ := bytes.Cut(body, []byte("\n"))
		body = rest
	}
	header = header[:len(data)-len(body)]
	if !slices.Contains(strings.Split(string(header), "\n"), "#cloud-config") {
		return nil, refuse(deviceID, NotCloudConfig, "no #cloud-config line heads the user-data")
	}
	var raw struct {
		WriteFiles []struct {
			Path     string `yaml:"path"`
			Content  string `yaml:"content"`
			Encoding string `yaml:"encoding"`
		} `yaml:"write_files"`
		RunCmd []yaml.Node `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(body, &raw); err != nil {
		return nil, refuse(deviceID, NotCloudConfig, "%v", err)
	}
	cc := &cloudConfig{files: map[string]string{}}
	for _, f := range raw.WriteFiles {
		content := f.Content
		switch f.Encoding {
		case "":
		case "b64", "base64":
			decoded, err := base64.StdEncoding.DecodeString(content)
			if err != nil {
				return nil, refuse(deviceID, NotCloudConfig, "%s: %v", f.Path, err)
			}
			content = string(decoded)
		default:
			return nil, refuse(deviceID, NotCloudConfig, "%s: the emulator reads no %s encoding", f.Path, f.Encoding)
		}
		cc.files[f.Path] = content
	}
	for _, entry := range raw.RunCmd {
		switch entry.Kind {
		case yaml.ScalarNode:
			cc.runcmd = append(cc.runcmd, strings.Fields(entry.Value))
		case yaml.SequenceNode:
			var args []string
			if err := entry.Decode(&args); err != nil {
				return nil, refuse(deviceID, NotCloudConfig, "runcmd line %d: %v", entry.Line, err)
			}
			cc.runcmd = append(cc.runcmd, args)
		default:
			return nil, refuse(deviceID, NotCloudConfig, "runcmd line %d is neither a command line nor a list", entry.Line)
		}
	}
	return cc, nil
}

// kubeadm is the kubeadm command the runcmd runs: init or join, the
// configuration file it reads, and the entry's index; verb is "" when none.
func (cc *cloudConfig) kubeadm() (verb, configPath string, at int) {
	for i, args := range cc.runcmd {
		if m := kubeadmCommand.FindStringSubmatch(strings.Join(args, " ")); m != nil {
			return m[1], strings.Trim(m[2], `'"`), i
		}
	}
	return "", "", -1
}

// readInit reads kubeadm init's configuration: a ClusterConfiguration and
// an InitConfiguration, as YAML documents of one file.
func readInit(n *Node, config string) (bootstrapv1.NodeRegistrationOptions, error) {
	n.Role = FirstControlPlane
	docs := kubeadmDocuments(config)
	if docs["ClusterConfiguration"] == "" || docs["InitConfiguration"] == "" {
		return bootstrapv1.NodeRegistrationOptions{}, fmt.Errorf("kubeadm init needs a ClusterConfiguration and an InitConfiguration, the file holds %v", slices.Sorted(maps.Keys(docs)))
	}
	cluster, extra, err := kubeadmtypes.UnmarshalClusterConfiguration(docs["ClusterConfiguration"])
	if err != nil {
		return bootstrapv1.NodeRegistrationOptions{}, err
	}
	init, err := kubeadmtypes.UnmarshalInitConfiguration(docs["InitConfiguration"])
	if err != nil {
		return bootstrapv1.NodeRegistrationOptions{}, err
	}
	if extra.ClusterName != nil {
		n.ClusterName = *extra.ClusterName
	}
	if extra.KubernetesVersion != nil {
		n.KubernetesVersion = *extra.KubernetesVersion
	}
	if n.Endpoint, err = parseEndpoint(cluster.ControlPlaneEndpoint); err != nil {
		return bootstrapv1.NodeRegistrationOptions{}, fmt.Errorf("controlPlaneEndpoint: %w", err)
	}
	return init.NodeRegistration, nil
}

// readJoin reads kubeadm join's JoinConfiguration.
func readJoin(n *Node, config string) (bootstrapv1.NodeRegistrationOptions, error) {
	n.Role = Worker
	doc := kubeadmDocuments(config)["JoinConfiguration"]
	if doc == "" {
		return bootstrapv1.NodeRegistrationOptions{}, fmt.Errorf("kubeadm join needs a JoinConfiguration")
	}
	join, err := kubeadmtypes.UnmarshalJoinConfiguration(doc)
	if err != nil {
		return bootstrapv1.NodeRegistrationOptions{}, err
	}
	if join.ControlPlane != nil {
		n.Role = ControlPlane
	}
	discovery := join.Discovery.BootstrapToken
	if n.Endpoint, err = parseEndpoint(discovery.APIServerEndpoint); err != nil {
		return bootstrapv1.NodeRegistrationOptions{}, fmt.Errorf("discovery.bootstrapToken.apiServerEndpoint: %w", err)
	}
	n.CACertHashes = discovery.CACertHashes
	return join.NodeRegistration, nil
}

// kubeadmDocuments splits a kubeadm configuration file into its YAML
// documents by kind.
func kubeadmDocuments(config string) map[string]string {
	docs := map[string]string{}
	for _, doc := range strings.Split(config, "\n---") {
		var meta struct {
			Kind string `yaml:"kind"`
		}
		if yaml.Unmarshal([]byte(doc), &meta) == nil && meta.Kind != "" {
			docs[meta.Kind] = doc
		}
	}
	return docs
}

// parseEndpoint reads host:port where host is an IP address: the emulator
// routes addresses, not names.
func parseEndpoint(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.ParseAddrPort(net.JoinHostPort(host, port))
}

// nodeIP reads --node-ip from the kubelet's defaults file; the first
// address when it lists one per family.
func nodeIP(defaults string) (netip.Addr, error) {
	for _, line := range strings.Split(defaults, "\n") {
		for _, arg := range strings.Fields(strings.TrimPrefix(line, "KUBELET_EXTRA_ARGS=")) {
			if v, ok := strings.CutPrefix(arg, "--node-ip="); ok {
				first, _, _ := strings.Cut(v, ",")
				return netip.ParseAddr(first)
			}
		}
	}
	return netip.Addr{}, nil
}

// binding is the endpoint address the user-data binds to lo, and the
// index of the runcmd entry that binds it now (-1 when none): the ifupdown
// stanza at cloudinit.EndpointBindingPath and `ip addr replace <address>/32 dev lo`
// must both be there and agree, or neither.
func binding(deviceID string, cc *cloudConfig) (netip.Addr, int, error) {
	var stanza netip.Addr
	content, written := cc.files[cloudinit.EndpointBindingPath]
	for _, line := range strings.Split(content, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "address" {
			p, err := netip.ParsePrefix(f[1])
			if err != nil || p.Bits() != p.Addr().BitLen() {
				return netip.Addr{}, -1, refuse(deviceID, BindingIncomplete, "%s: %q is not a single address", cloudinit.EndpointBindingPath, f[1])
			}
			stanza = p.Addr()
		}
	}
	if written && !stanza.IsValid() {
		return netip.Addr{}, -1, refuse(deviceID, BindingIncomplete, "%s has no address line", cloudinit.EndpointBindingPath)
	}
	var applied netip.Addr
	at := -1
	for i, args := range cc.runcmd {
		if len(args) == 6 && args[0] == "ip" && args[1] == "addr" && args[2] == "replace" && args[4] == "dev" && args[5] == "lo" {
			if p, err := netip.ParsePrefix(args[3]); err == nil && p.Bits() == p.Addr().BitLen() {
				applied, at = p.Addr(), i
			}
		}
	}
	if stanza != applied {
		return netip.Addr{}, -1, refuse(deviceID, BindingIncomplete, "%s binds %v at boot, runcmd binds %v now", cloudinit.EndpointBindingPath, orNone(stanza), orNone(applied))
	}
	return stanza, at, nil
}

func orNone(a netip.Addr) string {
	if !a.IsValid() {
		return "nothing"
	}
	return a.String()
}
