package cloudinit

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is a file cloud-init writes on the node (a write_files entry).
type File struct {
	Path        string
	Permissions string
	Content     string
}

// Files are the files that configure the node's networks: the network
// script, the 8021q module at boot and, when a network is Internal, kubelet's
// --node-ip. The script is run by the command RunCommand.
func Files(networks []Network, opts Options) ([]File, error) {
	script, err := Script(networks, opts)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: ModulesPath, Permissions: "0644", Content: "8021q\n"},
		{Path: ScriptPath, Permissions: "0755", Content: script},
	}
	if ips := NodeIPs(networks); len(ips) > 0 {
		files = append(files, File{
			Path:        KubeletDefaultsPath,
			Permissions: "0644",
			Content:     "KUBELET_EXTRA_ARGS=--node-ip=" + joinAddrs(ips, ",") + "\n",
		})
	}
	return files, nil
}

// joinAddrs writes addresses separated by sep.
func joinAddrs(addrs []netip.Addr, sep string) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, sep)
}

// RunCommand is the runcmd entry that runs the network script. It goes
// first, so the VLAN addresses (and kubelet's node-ip) exist before the
// bootstrap's commands start kubelet.
var RunCommand = []string{ScriptPath}

// Extra is what a machine adds to its user-data besides its network
// configuration: files, commands that must run after the network script
// and before the bootstrap's (the endpoint's binding, the node software's
// install), and commands that must run after the bootstrap's own
// (kube-vip's return to admin.conf once kubeadm init is done).
type Extra struct {
	Files []File
	First [][]string
	Last  [][]string
}

// Join is e followed by others: their files and commands in that order.
func (e Extra) Join(others ...Extra) Extra {
	for _, o := range others {
		e.Files = append(e.Files, o.Files...)
		e.First = append(e.First, o.First...)
		e.Last = append(e.Last, o.Last...)
	}
	return e
}

// UserData is the device's user-data: bootstrap, a CAPI bootstrap
// cloud-config, with the network configuration of networks and extra
// merged in. The network script runs first, then extra's first commands,
// then the bootstrap's, then extra's last.
func UserData(bootstrap []byte, networks []Network, opts Options, extra Extra) ([]byte, error) {
	files, err := Files(networks, opts)
	if err != nil {
		return nil, err
	}
	first := append([][]string{RunCommand}, extra.First...)
	return Merge(bootstrap, append(files, extra.Files...), first, extra.Last)
}

const cloudConfigHeader = "#cloud-config"

// jinjaDelimiters start Jinja expressions, statements and comments.
var jinjaDelimiters = []string{"{{", "{%", "{#"}

// Merge adds files to the cloud-config's write_files, the commands first in
// front of its runcmd and last after it. Everything else of bootstrap stays as it was: its leading
// comment lines byte for byte (the "## template: jinja" header and
// "#cloud-config"), its other keys, and its files and commands in their
// order. It fails when bootstrap is not a cloud-config, when it already
// writes one of files' paths, or when what is added would read as Jinja.
func Merge(bootstrap []byte, files []File, first, last [][]string) ([]byte, error) {
	header, body := splitHeader(bootstrap)
	if !hasCloudConfigHeader(header) {
		return nil, errors.New("the bootstrap data is not a cloud-config: its first line (after an optional '## template: jinja') must be #cloud-config")
	}
	for _, f := range files {
		if err := checkNoJinja(f.Path, f.Content); err != nil {
			return nil, err
		}
	}

	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("parsing the bootstrap cloud-config: %w", err)
	}
	root, err := rootMapping(&doc)
	if err != nil {
		return nil, err
	}

	writeFiles, err := sequence(root, "write_files")
	if err != nil {
		return nil, err
	}
	for _, entry := range writeFiles.Content {
		if path := stringField(entry, "path"); path != "" {
			for _, f := range files {
				if f.Path == path {
					return nil, fmt.Errorf("the bootstrap data already writes %s, which the provider writes", path)
				}
			}
		}
	}
	for _, f := range files {
		writeFiles.Content = append(writeFiles.Content, mapping(
			"path", f.Path, "owner", "root:root", "permissions", f.Permissions, "content", f.Content))
	}

	runcmd, err := sequence(root, "runcmd")
	if err != nil {
		return nil, err
	}
	var commands []*yaml.Node
	for _, c := range first {
		commands = append(commands, command(c))
	}
	runcmd.Content = append(commands, runcmd.Content...)
	for _, c := range last {
		runcmd.Content = append(runcmd.Content, command(c))
	}

	var out bytes.Buffer
	out.Write(header)
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("writing the user-data: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// command is a runcmd entry: the program and its arguments, not a shell line.
func command(args []string) *yaml.Node {
	cmd := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, arg := range args {
		cmd.Content = append(cmd.Content, scalar(arg))
	}
	return cmd
}

// splitHeader splits data after its leading comment lines.
func splitHeader(data []byte) (header, body []byte) {
	rest := data
	for len(rest) > 0 && rest[0] == '#' {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		rest = rest[min(len(line)+1, len(rest)):]
	}
	return data[:len(data)-len(rest)], rest
}

func hasCloudConfigHeader(header []byte) bool {
	lines := strings.Split(string(header), "\n")
	if strings.HasPrefix(lines[0], "## template:") && len(lines) > 1 {
		lines = lines[1:]
	}
	return strings.TrimRight(lines[0], " \r") == cloudConfigHeader
}

func checkNoJinja(path, content string) error {
	for _, d := range jinjaDelimiters {
		if strings.Contains(content, d) {
			return fmt.Errorf("%s contains %q, which Jinja would interpret", path, d)
		}
	}
	return nil
}

// rootMapping is the document's top-level mapping, created if the
// cloud-config is empty.
func rootMapping(doc *yaml.Node) (*yaml.Node, error) {
	if doc.Kind == 0 {
		*doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the bootstrap cloud-config is not a YAML mapping")
	}
	return doc.Content[0], nil
}

// sequence is the list under key in m, added at the end of m if missing.
func sequence(m *yaml.Node, key string) (*yaml.Node, error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v := m.Content[i+1]
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				*v = yaml.Node{Kind: yaml.SequenceNode}
			}
			if v.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("the bootstrap cloud-config's %s is not a list", key)
			}
			return v, nil
		}
	}
	v := &yaml.Node{Kind: yaml.SequenceNode}
	m.Content = append(m.Content, scalar(key), v)
	return v, nil
}

// stringField is the string value of key in mapping m, or "".
func stringField(m *yaml.Node, key string) string {
	if m.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key && m.Content[i+1].Kind == yaml.ScalarNode {
			return m.Content[i+1].Value
		}
	}
	return ""
}

func scalar(value string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	if strings.Contains(value, "\n") {
		n.Style = yaml.LiteralStyle
	}
	return n
}

// mapping builds a mapping of string keys and values from key, value pairs.
func mapping(pairs ...string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(pairs); i += 2 {
		m.Content = append(m.Content, scalar(pairs[i]), scalar(pairs[i+1]))
	}
	return m
}
