package cloudinit

import (
	"bytes"
	"errors"
	"testing"
)

func TestExpandUpstream(t *testing.T) {
	cp := UpstreamValues{KubernetesVersion: "v1.34.1", ControlPlaneEndpoint: "198.51.100.3", APIKey: "token-1"}
	worker := UpstreamValues{KubernetesVersion: "v1.34.1"}
	const header = "## template: jinja\n#cloud-config\n"
	cases := []struct {
		name     string
		in       string
		values   UpstreamValues
		want     string
		expanded bool
		field    string // an UpstreamTemplateError naming it
	}{
		{"plain cloud-config", header + "runcmd:\n- kubeadm init\n", cp, header + "runcmd:\n- kubeadm init\n", false, ""},
		{"cloud-init Jinja is not a Go template", header + "provider-id: equinixmetal://{{ v1.instance_id }}\n", cp,
			header + "provider-id: equinixmetal://{{ v1.instance_id }}\n", false, ""},
		{"Jinja with a filter", header + "x: {{ ds.meta_data.hostname | lower }}\n", cp, header + "x: {{ ds.meta_data.hostname | lower }}\n", false, ""},
		{"unclosed braces in a script", header + "runcmd:\n- echo '{{'\n", cp, header + "runcmd:\n- echo '{{'\n", false, ""},
		{"escaped Jinja and every field", header +
			"provider-id: equinixmetal://{{ `{{ v1.instance_id }}` }}\n" +
			"runcmd:\n- ip addr add {{ .controlPlaneEndpoint }} dev lo\n- echo {{ .kubernetesVersion }}\n- echo '{\"apiKey\": \"{{ .apiKey }}\"}'\n", cp,
			header + "provider-id: equinixmetal://{{ v1.instance_id }}\n" +
				"runcmd:\n- ip addr add 198.51.100.3 dev lo\n- echo v1.34.1\n- echo '{\"apiKey\": \"token-1\"}'\n", true, ""},
		{"a worker's kubernetesVersion", header + "runcmd:\n- echo {{.kubernetesVersion}}\n", worker, header + "runcmd:\n- echo v1.34.1\n", true, ""},
		{"a worker asking for the endpoint", header + "runcmd:\n- ip addr add {{ .controlPlaneEndpoint }} dev lo\n", worker, "", false, "controlPlaneEndpoint"},
		{"a field upstream never had", header + "runcmd:\n- echo {{ .emlbID }}\n", cp, header + "runcmd:\n- echo {{ .emlbID }}\n", false, ""},
		{"a nested field", header + "x: {{ .apiKey.x }}\n", cp, header + "x: {{ .apiKey.x }}\n", false, ""},
		{"a Go control structure", header + "{{ if .apiKey }}x{{ end }}\n", cp, header + "{{ if .apiKey }}x{{ end }}\n", false, ""},
		{"a function call", header + "x: {{ printf \"%s\" .apiKey }}\n", cp, header + "x: {{ printf \"%s\" .apiKey }}\n", false, ""},
		{"a variable", header + "x: {{ $k := .apiKey }}\n", cp, header + "x: {{ $k := .apiKey }}\n", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, expanded, err := ExpandUpstream([]byte(c.in), c.values)
			if c.field != "" {
				var terr *UpstreamTemplateError
				if !errors.As(err, &terr) || terr.Field != c.field {
					t.Fatalf("err = %v, want an UpstreamTemplateError naming %s", err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if expanded != c.expanded || string(out) != c.want {
				t.Errorf("ExpandUpstream = %t\n%s\nwant %t\n%s", expanded, out, c.expanded, c.want)
			}
		})
	}
}

// Whatever the input, data that is not expanded comes back byte for byte,
// and expanded data has none of upstream's fields left.
func FuzzExpandUpstream(f *testing.F) {
	for _, s := range []string{
		"#cloud-config\n", "{{ v1.instance_id }}", "{{ .apiKey }}", "{{ `{{ x }}` }}{{ .kubernetesVersion }}",
		"{{ .controlPlaneEndpoint }}{{", "{{ if 1 }}{{ end }}", "{{/* c */}}", "{{- .apiKey -}}",
	} {
		f.Add(s)
	}
	values := UpstreamValues{KubernetesVersion: "v1.34.1", ControlPlaneEndpoint: "198.51.100.3", APIKey: "token-1"}
	f.Fuzz(func(t *testing.T, in string) {
		out, expanded, err := ExpandUpstream([]byte(in), values)
		switch {
		case err != nil:
			return
		case !expanded:
			if !bytes.Equal(out, []byte(in)) {
				t.Fatalf("not expanded, yet changed: %q -> %q", in, out)
			}
		case bytes.Contains(out, []byte("{{ .apiKey")) && !bytes.Contains([]byte(in), []byte("`")):
			t.Fatalf("expanded, yet a field is left: %q -> %q", in, out)
		}
	})
}
