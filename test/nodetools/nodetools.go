// Package nodetools runs rendered node configuration through the Debian
// programs a node uses (cloud-init, bash, shellcheck, ifupdown, ip). `make
// test` installs them and sets REQUIRE_NODE_TOOLS, so there a missing program
// fails the test; run ad hoc without them, the tests skip.
package nodetools

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// T is the part of testing.TB (and Ginkgo's GinkgoT) the helpers use.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	TempDir() string
}

// Require fails (under REQUIRE_NODE_TOOLS) or skips the test unless every
// program is installed and, when root is true, the test runs as root (for
// network namespaces).
func Require(t T, root bool, programs ...string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		if os.Getenv("REQUIRE_NODE_TOOLS") != "" {
			t.Fatalf("%s is required (REQUIRE_NODE_TOOLS is set): `make test` installs the Debian packages and runs as root", what)
		}
		t.Skipf("%s is missing; `make test` provides it", what)
	}
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing(p)
		}
	}
	if root && os.Geteuid() != 0 {
		missing("root (for network namespaces)")
	}
}

// Run runs a program with stdin and returns its output; it fails the test,
// showing the output, if the program fails.
func Run(t T, stdin, name string, args ...string) string {
	t.Helper()
	out, err := RunErr(stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// RunErr runs a program with stdin and returns its combined output and error.
func RunErr(stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// WriteTemp writes content to a new file in the test's temporary directory.
func WriteTemp(t T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatalf("%v", err)
	}
	return path
}

// instanceData is what a node's Jinja user-data is rendered with.
const instanceData = `{"ds":{"meta_data":{"local_hostname":"node-a","instance_id":"d-1"}},"v1":{"local_hostname":"node-a","instance_id":"d-1"}}`

// CloudInitSchema renders user-data as cloud-init does on the node (through
// Jinja when it starts with "## template: jinja") and validates the result
// against cloud-init's schema. It returns the rendered cloud-config.
func CloudInitSchema(t T, userData []byte) string {
	t.Helper()
	Require(t, false, "cloud-init")
	rendered := string(userData)
	if bytes.HasPrefix(userData, []byte("## template: jinja\n")) {
		rendered = Run(t, "", "cloud-init", "devel", "render",
			"-i", WriteTemp(t, "instance-data.json", instanceData), WriteTemp(t, "user-data", rendered))
		if strings.Contains(rendered, "{{") {
			t.Fatalf("Jinja left expressions unrendered:\n%s", rendered)
		}
	}
	Run(t, "", "cloud-init", "schema", "--config-file", WriteTemp(t, "cloud-config", rendered))
	return rendered
}
