package cloudinit

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// cloudConfig decodes user-data after its header lines.
func cloudConfig(t *testing.T, data []byte) map[string]any {
	t.Helper()
	_, body := splitHeader(data)
	var out map[string]any
	if err := yaml.Unmarshal(body, &out); err != nil {
		t.Fatalf("user-data does not parse: %v\n%s", err, data)
	}
	return out
}

func TestUserDataKeepsTheBootstrapIntact(t *testing.T) {
	in := bootstrap(t)
	out, err := UserData(in, cases[0].networks, Options{}, Extra{})
	if err != nil {
		t.Fatal(err)
	}
	header := "## template: jinja\n#cloud-config\n"
	if !bytes.HasPrefix(out, []byte(header)) {
		t.Fatalf("the header is not kept byte for byte:\n%s", out)
	}
	before, after := cloudConfig(t, in), cloudConfig(t, out)

	// Every key but write_files and runcmd is unchanged.
	for key, value := range before {
		if key == "write_files" || key == "runcmd" {
			continue
		}
		if !reflect.DeepEqual(after[key], value) {
			t.Errorf("%s changed: %v -> %v", key, value, after[key])
		}
	}
	// The bootstrap's files come first, unchanged, then the network's.
	inFiles, outFiles := before["write_files"].([]any), after["write_files"].([]any)
	if !reflect.DeepEqual(outFiles[:len(inFiles)], inFiles) {
		t.Errorf("the bootstrap's files changed:\n%v\n%v", inFiles, outFiles[:len(inFiles)])
	}
	var paths []string
	for _, f := range outFiles[len(inFiles):] {
		paths = append(paths, f.(map[string]any)["path"].(string))
	}
	if want := []string{ModulesPath, ScriptPath, KubeletDefaultsPath}; !reflect.DeepEqual(paths, want) {
		t.Errorf("added files %v, want %v", paths, want)
	}
	kubelet := outFiles[len(outFiles)-1].(map[string]any)
	if kubelet["content"] != "KUBELET_EXTRA_ARGS=--node-ip=10.60.0.5\n" {
		t.Errorf("kubelet defaults = %q", kubelet["content"])
	}
	if kubelet["permissions"] != "0644" {
		t.Errorf("permissions = %#v, want the string 0644", kubelet["permissions"])
	}
	// The network script runs first, then the bootstrap's commands in order.
	inCmds, outCmds := before["runcmd"].([]any), after["runcmd"].([]any)
	if !reflect.DeepEqual(outCmds[0], []any{ScriptPath}) {
		t.Errorf("first command = %v, want the network script", outCmds[0])
	}
	if !reflect.DeepEqual(outCmds[1:], inCmds) {
		t.Errorf("the bootstrap's commands changed: %v -> %v", inCmds, outCmds[1:])
	}
	// The Jinja expressions of the bootstrap survive as they were.
	if !bytes.Contains(out, []byte("name: '{{ ds.meta_data.local_hostname }}'")) {
		t.Error("the bootstrap's Jinja expressions were altered")
	}
}

func TestUserDataWithoutInternalNetworkLeavesKubeletAlone(t *testing.T) {
	networks := []Network{cases[0].networks[0]}
	networks[0].Internal = false
	out, err := UserData([]byte("#cloud-config\n"), networks, Options{}, Extra{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(KubeletDefaultsPath)) {
		t.Errorf("kubelet defaults written without an Internal network:\n%s", out)
	}
	cfg := cloudConfig(t, out)
	if got := len(cfg["write_files"].([]any)); got != 2 {
		t.Errorf("%d files, want the module list and the script", got)
	}
	if !reflect.DeepEqual(cfg["runcmd"], []any{[]any{ScriptPath}}) {
		t.Errorf("runcmd = %v", cfg["runcmd"])
	}
}

func TestMergeRejects(t *testing.T) {
	files := []File{{Path: KubeletDefaultsPath, Permissions: "0644", Content: "x\n"}}
	for _, tc := range []struct {
		name      string
		bootstrap string
		files     []File
		want      string
	}{
		{"a shell script", "#!/bin/bash\necho hi\n", files, "not a cloud-config"},
		{"ignition", `{"ignition":{"version":"3.4.0"}}`, files, "not a cloud-config"},
		{"a list at the top", "#cloud-config\n- a\n", files, "not a YAML mapping"},
		{"runcmd that is not a list", "#cloud-config\nruncmd: reboot\n", files, "runcmd is not a list"},
		{"a file the network configuration writes", "#cloud-config\nwrite_files:\n- path: /etc/default/kubelet\n  content: KUBELET_EXTRA_ARGS=\n", files, "already writes /etc/default/kubelet"},
		{"content Jinja would read", "## template: jinja\n#cloud-config\n", []File{{Path: "/x", Content: "echo ${#x}"}}, `contains "{#"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge([]byte(tc.bootstrap), tc.files, [][]string{RunCommand}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Merge = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestMergeIntoAnEmptyCloudConfig(t *testing.T) {
	out, err := Merge([]byte("#cloud-config\n"), []File{{Path: "/a", Permissions: "0600", Content: "b\n"}}, [][]string{{"/a"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "#cloud-config\nwrite_files:\n  - path: /a\n    owner: root:root\n    permissions: \"0600\"\n    content: |\n      b\nruncmd:\n  - [/a]\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestRenderedContentHasNoJinja(t *testing.T) {
	for _, tc := range cases {
		files, err := Files(tc.networks, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := checkNoJinja(f.Path, f.Content); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	}
}
