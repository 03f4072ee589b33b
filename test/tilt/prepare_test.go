package tilt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drone/envsubst/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// What follows is Cluster API's tilt-prepare
// (hack/tools/internal/tilt-prepare/main.go at v1.14.0, the last tag of the
// series whose Tiltfile the pinned v1.14.2 module ships; hack/tools is a
// module of its own that is not published, so it cannot be imported): the
// Tiltfile runs it once, with kustomize_substitutions in its environment, to
// render every enabled provider into .tiltbuild/yaml/<name>.provider.yaml,
// which the Tiltfile then reads and applies. Only the steps that shape
// what reaches the cluster are kept, each as tilt-prepare does it; those
// that act on the machine (building CAPI's tools, installing cert-manager,
// loading images into kind) are recorded instead.

// defaultProviderVersion is the version tilt-prepare gives a Provider whose
// tilt-provider.yaml names none.
const defaultProviderVersion = "v1.14.99"

// tiltSettings is the part of tilt-settings.yaml tilt-prepare reads.
type tiltSettings struct {
	Debug                    map[string]any      `json:"debug,omitempty"`
	ExtraArgs                map[string][]string `json:"extra_args,omitempty"`
	DeployCertManager        *bool               `json:"deploy_cert_manager,omitempty"`
	DeployObservability      []string            `json:"deploy_observability,omitempty"`
	EnableProviders          []string            `json:"enable_providers,omitempty"`
	AllowedContexts          []string            `json:"allowed_contexts,omitempty"`
	ProviderRepos            []string            `json:"provider_repos,omitempty"`
	AdditionalKustomizations map[string]string   `json:"additional_kustomizations,omitempty"`
}

type tiltProvider struct {
	Name   string              `json:"name,omitempty"`
	Config *tiltProviderConfig `json:"config,omitempty"`
}

// tiltProviderConfig is the part of a provider's config tilt-prepare
// reads; the Tiltfile reads the rest.
type tiltProviderConfig struct {
	Context           *string  `json:"context,omitempty"`
	Version           *string  `json:"version,omitempty"`
	LiveReloadDeps    []string `json:"live_reload_deps,omitempty"`
	ApplyProviderYaml *bool    `json:"apply_provider_yaml,omitempty"`
	KustomizeFolder   *string  `json:"kustomize_folder,omitempty"`
	KustomizeOptions  []string `json:"kustomize_options,omitempty"`

	hardCodedProvider bool
}

// prepared is what tilt-prepare did.
type prepared struct {
	settings tiltSettings
	// rendered holds each enabled provider's objects as written to
	// .tiltbuild/yaml/<name>.provider.yaml.
	rendered map[string][]unstructured.Unstructured
	// kustomizeFolders holds the folder each provider was rendered from.
	kustomizeFolders map[string]string
	// certManager tells that tilt-prepare would install cert-manager.
	certManager bool
}

func (tf *tiltfile) prepare(args []string, substitutions map[string]string) (*prepared, error) {
	settingsFile := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--tilt-settings-file" {
			settingsFile = args[i+1]
		}
	}
	data, err := os.ReadFile(tf.path(settingsFile))
	if err != nil {
		return nil, err
	}
	p := &prepared{rendered: map[string][]unstructured.Unstructured{}, kustomizeFolders: map[string]string{}}
	if err := yaml.Unmarshal(data, &p.settings); err != nil {
		return nil, fmt.Errorf("failed to unmarshal tilt-settings content: %w", err)
	}
	ts := p.settings
	// These change the managers' Deployments (a debugger, other arguments)
	// or add other components; the settings the test runs with are those
	// docs/contributing.md shows, which use none of them.
	if len(ts.Debug) > 0 || len(ts.ExtraArgs) > 0 || len(ts.DeployObservability) > 0 || len(ts.AdditionalKustomizations) > 0 {
		return nil, errors.New("debug, extra_args, deploy_observability and additional_kustomizations are not modelled by this test")
	}

	// The clusterctl CRDs, for the Provider objects.
	crds, err := tf.kustomizeBuild("./cmd/clusterctl/config/crd/", "--enable-helm", "--load-restrictor=LoadRestrictionsNone")
	if err != nil {
		return nil, err
	}
	if err := tf.write("clusterctl.crd.yaml", crds); err != nil {
		return nil, err
	}
	p.certManager = ts.DeployCertManager == nil || *ts.DeployCertManager

	// The providers the Tiltfile defines itself, by their folder in Cluster API.
	providers := map[string]tiltProviderConfig{
		"core":                  {Context: ptr.To("core"), hardCodedProvider: true},
		"kubeadm-bootstrap":     {Context: ptr.To("bootstrap/kubeadm"), hardCodedProvider: true},
		"kubeadm-control-plane": {Context: ptr.To("controlplane/kubeadm"), hardCodedProvider: true},
		"docker":                {Context: ptr.To("test/infrastructure/docker"), hardCodedProvider: true},
		"test-extension":        {Context: ptr.To("test/extension"), hardCodedProvider: true},
	}
	for _, repo := range ts.ProviderRepos {
		configs, err := loadTiltProvider(repo)
		if err != nil {
			return nil, fmt.Errorf("failed to load tilt-provider.yaml/json from %s: %w", repo, err)
		}
		for name, config := range configs {
			providers[name] = config
		}
	}
	enabled := ts.EnableProviders
	if !slices.Contains(enabled, "core") {
		enabled = append(enabled, "core")
	}
	for _, name := range enabled {
		config, ok := providers[name]
		if !ok {
			return nil, fmt.Errorf("failed to obtain config for the provider %s, please add the providers path to the provider_repos list in tilt-settings.yaml/json file", name)
		}
		if !ptr.Deref(config.ApplyProviderYaml, true) {
			continue
		}
		folder := path.Join(*config.Context, ptr.Deref(config.KustomizeFolder, "config/default"))
		objs, err := tf.workload(config, folder, substitutions)
		if err != nil {
			return nil, fmt.Errorf("[%s] %w", name, err)
		}
		out, err := utilyaml.FromUnstructured(objs)
		if err != nil {
			return nil, err
		}
		if err := tf.write(name+".provider.yaml", out); err != nil {
			return nil, err
		}
		p.rendered[name] = objs
		p.kustomizeFolders[name] = folder
	}
	return p, nil
}

// loadTiltProvider reads a repository's tilt-provider file as tilt-prepare
// does: a list only when the file's first character says so.
func loadTiltProvider(repo string) (map[string]tiltProviderConfig, error) {
	file := filepath.Join(repo, "tilt-provider.yaml")
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(repo, "tilt-provider.json")
	}
	content, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("unable to find a tilt-provider.yaml|json file under %s", repo)
	}
	var ps []tiltProvider
	if bytes.HasPrefix(content, []byte("[")) || bytes.HasPrefix(content, []byte("-")) {
		if err := yaml.Unmarshal(content, &ps); err != nil {
			return nil, fmt.Errorf("failed to read provider path %s tilt file: %w", file, err)
		}
	} else {
		var p tiltProvider
		if err := yaml.Unmarshal(content, &p); err != nil {
			return nil, fmt.Errorf("failed to read provider path %s tilt file: %w", file, err)
		}
		ps = append(ps, p)
	}
	configs := map[string]tiltProviderConfig{}
	for _, p := range ps {
		if p.Config == nil {
			return nil, fmt.Errorf("tilt-provider.yaml/json file from %s does not contain a config section for provider %s", repo, p.Name)
		}
		config := *p.Config
		config.Context = ptr.To(filepath.Join(repo, ptr.Deref(p.Config.Context, ".")))
		configs[p.Name] = config
	}
	return configs, nil
}

// workload is tilt-prepare's workloadTask: kustomize, envsubst with the
// substitutions, the Deployment changed for live updates, the Provider
// object clusterctl would have written, and clusterctl's label on every
// object.
func (tf *tiltfile) workload(config tiltProviderConfig, folder string, substitutions map[string]string) ([]unstructured.Unstructured, error) {
	out, err := tf.kustomizeBuild(append(append([]string{}, config.KustomizeOptions...), folder)...)
	if err != nil {
		return nil, err
	}
	// tilt-prepare substitutes from its whole environment: the
	// substitutions and whatever the user's shell exports. Only the
	// substitutions reach it here, so that the result does not depend on
	// the machine.
	substituted, err := envsubst.Eval(string(out), func(name string) string { return substitutions[name] })
	if err != nil {
		return nil, fmt.Errorf("failed to do envsubst on kustomized output: %w", err)
	}
	objs, err := utilyaml.ToUnstructured([]byte(substituted))
	if err != nil {
		return nil, fmt.Errorf("failed parse components yaml: %w", err)
	}
	prepareWorkload(objs, config.LiveReloadDeps, config.hardCodedProvider)
	provider, err := providerObject(config.Version, objs)
	if err != nil {
		return nil, err
	}
	objs = append(objs, *provider)
	for i := range objs {
		labels := objs[i].GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[clusterctlv1.ClusterctlLabel] = ""
		objs[i].SetLabels(labels)
	}
	return objs, nil
}

// binaryName and containerName are the manager's binary and container as
// the Tiltfile and tilt-prepare name them, for every provider.
const (
	binaryName    = "manager"
	containerName = "manager"
)

// prepareWorkload is tilt-prepare's change of the provider's Namespace and
// Deployments, without a debugger or extra arguments: the manager
// container runs the binary under Tilt's restart wrapper, without the
// security contexts that would stop the live update from replacing it.
func prepareWorkload(objs []unstructured.Unstructured, liveReloadDeps []string, hardCoded bool) {
	for i := range objs {
		if _, ok := objs[i].GetLabels()[clusterv1.ProviderNameLabel]; !ok {
			continue
		}
		switch objs[i].GetKind() {
		case "Namespace":
			labels := objs[i].GetLabels()
			labels["pod-security.kubernetes.io/enforce"] = "privileged"
			objs[i].SetLabels(labels)
		case "Deployment":
			spec := objs[i].Object["spec"].(map[string]any)
			podSpec := spec["template"].(map[string]any)["spec"].(map[string]any)
			for _, c := range podSpec["containers"].([]any) {
				container := c.(map[string]any)
				if container["name"] != containerName {
					continue
				}
				cmd := []any{"/" + binaryName}
				if len(liveReloadDeps) > 0 || hardCoded {
					cmd = []any{"sh", "/start.sh", "/" + binaryName}
				}
				delete(container, "securityContext")
				delete(podSpec, "securityContext")
				container["command"] = cmd
				spec["replicas"] = int64(1)
			}
		}
	}
}

// providerObject is the clusterctl Provider tilt-prepare adds: named after
// the provider label of the first Namespace, in it, its type from the
// label's prefix.
func providerObject(version *string, objs []unstructured.Unstructured) (*unstructured.Unstructured, error) {
	namespace, label := "", ""
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			namespace, label = o.GetName(), o.GetLabels()[clusterv1.ProviderNameLabel]
			break
		}
	}
	if label == "" {
		return nil, fmt.Errorf("could not find any Namespace object with label %s and therefore failed to deduce provider name and type", clusterv1.ProviderNameLabel)
	}
	typ, name := clusterctlv1.CoreProviderType, label
	for prefix, t := range map[string]clusterctlv1.ProviderType{
		"infrastructure-":    clusterctlv1.InfrastructureProviderType,
		"bootstrap-":         clusterctlv1.BootstrapProviderType,
		"control-plane-":     clusterctlv1.ControlPlaneProviderType,
		"ipam-":              clusterctlv1.IPAMProviderType,
		"runtime-extension-": clusterctlv1.RuntimeExtensionProviderType,
		"addon-":             clusterctlv1.AddonProviderType,
	} {
		if strings.HasPrefix(label, prefix) {
			typ, name = t, strings.TrimPrefix(label, prefix)
		}
	}
	obj := map[string]any{
		"apiVersion": clusterctlv1.GroupVersion.String(),
		"kind":       "Provider",
		"metadata": map[string]any{
			"name":      label,
			"namespace": namespace,
			"labels": map[string]any{
				clusterv1.ProviderNameLabel:      label,
				clusterctlv1.ClusterctlLabel:     "",
				clusterctlv1.ClusterctlCoreLabel: clusterctlv1.ClusterctlCoreLabelInventoryValue,
			},
		},
		"providerName": name,
		"type":         string(typ),
		"version":      ptr.Deref(version, defaultProviderVersion),
	}
	// The object must be a Provider as clusterctl's types read it.
	var check clusterctlv1.Provider
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, &check, true); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func (tf *tiltfile) kustomizeBuild(args ...string) ([]byte, error) {
	return testenv.RunTool(tf.capi, nil, tf.kustomize, append([]string{"build"}, args...)...)
}

// write writes a file of tilt-prepare's output, .tiltbuild/yaml/<name>.
func (tf *tiltfile) write(name string, data []byte) error {
	file := filepath.Join(tf.dir, ".tiltbuild", "yaml", name)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
