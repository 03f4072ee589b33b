package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// cert-manager's CRDs come from its Go module, at the version clusterctl
	// v1.14.2 installs (CertManagerDefaultVersion), checked against the
	// module's go.sum hash.
	certManagerModule  = "github.com/cert-manager/cert-manager"
	CertManagerVersion = "v1.21.1"
	certManagerSum     = "h1:0LttV37Q5c2CBNoHkjuI8sLKTXWZDC2SwQkxrBMKV9w="

	// LocalVersion is the version the working tree's providers are
	// published as in a local repository: the next release, which
	// metadata.yaml maps to the current contract (the previous release,
	// make test-upgrade's starting point, sorts below it).
	LocalVersion = "v0.2.0"
)

// InstallCertManagerCRDs installs cert-manager's Certificate and Issuer
// CRDs from its module. clusterctl checks that cert-manager works by
// creating one of each; with the CRDs those are accepted, and clusterctl
// goes on without installing cert-manager from GitHub.
func InstallCertManagerCRDs(cfg *rest.Config) error {
	dir, err := certManagerDir()
	if err != nil {
		return err
	}
	crds := filepath.Join(dir, "deploy", "crds")
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{
			filepath.Join(crds, "cert-manager.io_certificates.yaml"),
			filepath.Join(crds, "cert-manager.io_issuers.yaml"),
		},
		ErrorIfPathMissing: true,
	}); err != nil {
		return fmt.Errorf("installing cert-manager's CRDs: %w", err)
	}
	return nil
}

// CertManagerCRDs returns every CRD of cert-manager's module, as one YAML
// stream: the first part of the cert-manager components a clusterctl
// repository serves.
func CertManagerCRDs() ([]byte, error) {
	dir, err := certManagerDir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "deploy", "crds", "*cert-manager.io_*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in cert-manager's module at %s", dir)
	}
	var crds bytes.Buffer
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if !bytes.HasPrefix(data, []byte("---")) {
			crds.WriteString("---\n")
		}
		crds.Write(data)
		if !bytes.HasSuffix(data, []byte("\n")) {
			crds.WriteString("\n")
		}
	}
	return crds.Bytes(), nil
}

// certManagerDir returns where the Go toolchain keeps cert-manager's module
// (downloading it from the module proxy on the first run).
func certManagerDir() (string, error) {
	dir, err := os.MkdirTemp("", "cert-manager-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	out, err := RunTool(dir, append(os.Environ(), "GOFLAGS=", "GOWORK=off"),
		"go", "mod", "download", "-json", certManagerModule+"@"+CertManagerVersion)
	if err != nil {
		return "", err
	}
	var mod struct{ Dir, Sum string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", err
	}
	if mod.Sum != certManagerSum {
		return "", fmt.Errorf("%s@%s has hash %s, want %s", certManagerModule, CertManagerVersion, mod.Sum, certManagerSum)
	}
	return mod.Dir, nil
}

// WriteClusterctlRepository writes a local clusterctl repository,
// <dir>/<provider label>/<LocalVersion> (Cluster API's providers: the pinned
// module's version), holding what `make release` publishes (the IPAM and
// infrastructure components and metadata.yaml) and Cluster API's own core
// components, plus the kubeadm bootstrap and control-plane ones when kubeadm
// is set, built from the pinned module the way its release builds them. It
// returns a clusterctl configuration naming every provider there (written
// beside dir), for `clusterctl init --core cluster-api --infrastructure
// packet --ipam metal-vrf`.
func WriteClusterctlRepository(root, dir, kustomize string, kubeadm bool) (config string, err error) {
	capiDir, err := moduleDir(root, "sigs.k8s.io/cluster-api")
	if err != nil {
		return "", err
	}
	capiVersion, err := RunTool(root, nil, "go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/cluster-api")
	if err != nil {
		return "", err
	}
	type provider struct{ name, typ, label, version, file, dir, kustomization string }
	capi := strings.TrimSpace(string(capiVersion))
	providers := []provider{
		{"cluster-api", "CoreProvider", "cluster-api", capi, "core-components.yaml", capiDir, "core/config/default"},
		{"metal-vrf", "IPAMProvider", "ipam-metal-vrf", LocalVersion, "ipam-components.yaml", root, "config/ipam/default"},
		{"packet", "InfrastructureProvider", "infrastructure-packet", LocalVersion, "infrastructure-components.yaml", root, "config/capp/default"},
	}
	if kubeadm {
		providers = append(providers,
			provider{"kubeadm", "BootstrapProvider", "bootstrap-kubeadm", capi, "bootstrap-components.yaml", capiDir, "bootstrap/kubeadm/config/default"},
			provider{"kubeadm", "ControlPlaneProvider", "control-plane-kubeadm", capi, "control-plane-components.yaml", capiDir, "controlplane/kubeadm/config/default"})
	}
	var cfg strings.Builder
	cfg.WriteString("providers:\n")
	for _, p := range providers {
		components, err := RunTool(p.dir, nil, kustomize, "build", p.kustomization)
		if err != nil {
			return "", err
		}
		metadata, err := os.ReadFile(filepath.Join(p.dir, "metadata.yaml"))
		if err != nil {
			return "", err
		}
		release := filepath.Join(dir, p.label, p.version)
		if err := os.MkdirAll(release, 0o755); err != nil {
			return "", err
		}
		for name, data := range map[string][]byte{p.file: components, "metadata.yaml": metadata} {
			if err := os.WriteFile(filepath.Join(release, name), data, 0o644); err != nil {
				return "", err
			}
		}
		fmt.Fprintf(&cfg, "- name: %s\n  type: %s\n  url: file://%s\n", p.name, p.typ, filepath.Join(release, p.file))
	}
	config = filepath.Join(filepath.Dir(dir), "clusterctl.yaml")
	return config, os.WriteFile(config, []byte(cfg.String()), 0o644)
}

// DeleteWebhookConfigurations deletes every validating and mutating webhook
// configuration but those named in keep: no Pod runs in envtest, so nothing
// serves the webhooks `clusterctl init` registered (failurePolicy Fail), and
// they would refuse every object they cover. Without them the API server
// still checks each object against its CRD's schema and CEL rules.
func (e *Environment) DeleteWebhookConfigurations(ctx context.Context, keep ...string) error {
	for _, kind := range []string{"ValidatingWebhookConfigurationList", "MutatingWebhookConfigurationList"} {
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind}}
		if err := e.Client.List(ctx, list); err != nil {
			return err
		}
		for i := range list.Items {
			if slices.Contains(keep, list.Items[i].GetName()) {
				continue
			}
			if err := e.Client.Delete(ctx, &list.Items[i]); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

// IPAMWebhookConfiguration is the name `clusterctl init` gives the IPAM
// provider's validating webhook configuration: config/ipam/default's name
// prefix on config/ipam/webhook's.
const IPAMWebhookConfiguration = "ipam-metal-vrf-validating-webhook-configuration"

// ServeIPAMWebhooks points the IPAM provider's validating webhooks, as
// `clusterctl init` installed them, at an IPAM manager running in this
// process, and deletes every other webhook configuration (see
// DeleteWebhookConfigurations): the provider's webhooks then guard what
// `clusterctl move` writes, as on a real management cluster. IPAMOptions
// then carries the webhook server's host, port and certificates. envtest's
// own webhook installer makes them: a serving certificate for 127.0.0.1
// signed by a CA of its own, in a temporary folder Stop removes, and each
// webhook's clientConfig turned from the Service into
// https://127.0.0.1:<port>/<the Service's path> trusting that CA.
func (e *Environment) ServeIPAMWebhooks(ctx context.Context) error {
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: IPAMWebhookConfiguration}, hook); err != nil {
		return fmt.Errorf("reading the IPAM provider's webhook configuration: %w", err)
	}
	e.env.WebhookInstallOptions = envtest.WebhookInstallOptions{
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{hook},
		LocalServingHost:   "127.0.0.1",
	}
	if err := e.env.WebhookInstallOptions.PrepWithoutInstalling(); err != nil {
		return err
	}
	if err := e.Client.Update(ctx, hook); err != nil {
		return err
	}
	return e.DeleteWebhookConfigurations(ctx, IPAMWebhookConfiguration)
}

// RunTool runs a program in dir, with env as its whole environment
// (beside PATH) when not nil, and returns its standard output, or an error
// showing its standard error.
func RunTool(dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if env != nil {
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// Tool is the path of a program `make test` builds into bin/tools and names
// in $envVar (e.g. CLUSTERCTL for clusterctl).
func Tool(envVar, name string) (string, error) {
	path := os.Getenv(envVar)
	if path == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		path = filepath.Join(root, "bin", "tools", name)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found at %s: run 'make test', which builds it into bin/tools and sets $%s", name, path, envVar)
	}
	return path, nil
}
