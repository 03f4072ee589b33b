package cloudinit

import (
	"bytes"
	"fmt"
	"text/template"
	"text/template/parse"
)

// UpstreamValues are the values upstream CAPP (v1beta1, v0.9) filled into
// bootstrap data, which it read as a Go template: its cluster templates put
// `{{ .controlPlaneEndpoint }}` and `{{ .apiKey }}` into the control plane's
// commands, `{{ .kubernetesVersion }}` into every node's, and escape
// cloud-init's own Jinja as {{ `{{ v1.instance_id }}` }}.
type UpstreamValues struct {
	KubernetesVersion string
	// ControlPlaneEndpoint and APIKey are given to control-plane machines
	// only, as upstream did; empty for workers.
	ControlPlaneEndpoint string
	APIKey               string
}

// upstreamFields are the template fields UpstreamValues fills, by the name
// upstream's templates use.
func (v UpstreamValues) fields() map[string]string {
	return map[string]string{
		"kubernetesVersion":    v.KubernetesVersion,
		"controlPlaneEndpoint": v.ControlPlaneEndpoint,
		"apiKey":               v.APIKey,
	}
}

// UpstreamTemplateError is bootstrap data written for upstream CAPP that
// names a value this machine does not have.
type UpstreamTemplateError struct {
	Field string
}

func (e *UpstreamTemplateError) Error() string {
	return fmt.Sprintf("the bootstrap data uses upstream CAPP's template value {{ .%s }}, which this machine has no value for "+
		"(upstream gave the endpoint and the token to control-plane machines only)", e.Field)
}

// ExpandUpstream fills upstream CAPP's template values into bootstrap when
// it is written for upstream CAPP: it parses as a Go template whose every
// action is one of those fields or a quoted string (the escaped Jinja).
// Anything else, such as cloud-init's Jinja (`{{ v1.instance_id }}` is not a
// Go template) or data without actions, is returned as it is, with expanded
// false: the same bytes mean the same to cloud-init either way.
func ExpandUpstream(bootstrap []byte, v UpstreamValues) (out []byte, expanded bool, err error) {
	if !bytes.Contains(bootstrap, []byte("{{")) {
		return bootstrap, false, nil
	}
	t, err := template.New("bootstrap").Option("missingkey=error").Parse(string(bootstrap))
	if err != nil {
		return bootstrap, false, nil
	}
	fields := v.fields()
	used, actions, ok := upstreamActions(t.Root, fields)
	if !ok || actions == 0 {
		return bootstrap, false, nil
	}
	for _, f := range used {
		if fields[f] == "" {
			return nil, false, &UpstreamTemplateError{Field: f}
		}
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, fields); err != nil {
		return nil, false, fmt.Errorf("filling in upstream CAPP's template values: %w", err)
	}
	return buf.Bytes(), true, nil
}

// upstreamActions returns the fields the template's actions name, how many
// actions it has, and whether every node is text or an action of a single
// known field or string.
func upstreamActions(root *parse.ListNode, fields map[string]string) (used []string, actions int, ok bool) {
	for _, n := range root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
				return nil, 0, false
			}
			actions++
			switch arg := n.Pipe.Cmds[0].Args[0].(type) {
			case *parse.StringNode:
			case *parse.FieldNode:
				if _, known := fields[arg.Ident[0]]; !known || len(arg.Ident) != 1 {
					return nil, 0, false
				}
				used = append(used, arg.Ident[0])
			default:
				return nil, 0, false
			}
		default:
			return nil, 0, false
		}
	}
	return used, actions, true
}
