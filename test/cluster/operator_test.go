package cluster_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterctlcluster "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// operatorNamespace is where the operator's config/default installs it.
const operatorNamespace = "capi-operator-system"

// The operator's API and what it reads from a provider's ConfigMaps
// (sigs.k8s.io/cluster-api-operator/api/v1alpha2): the version a ConfigMap
// holds is this label's (else the ConfigMap's name), and components above
// the API server's 1 MiB limit for a ConfigMap go gzipped in binaryData
// under the compressed annotation.
const (
	operatorAPIVersion   = "operator.cluster.x-k8s.io/v1alpha2"
	versionLabel         = "provider.cluster.x-k8s.io/version"
	compressedAnnotation = "provider.cluster.x-k8s.io/compressed"
	configMapLimit       = 1 << 20
	// componentsLabel is the label the provider objects' fetchConfig
	// selects their ConfigMaps by (the operator's documentation's).
	componentsLabel = "provider-components"
	// variablesSecret holds, in CAPP's namespace, the variables its
	// components name (the operator's configSecret).
	variablesSecret = "metal-vrf-variables"
)

// operatorProvider is a provider the operator installs from ConfigMaps: the
// kind and name of its object, the namespace `clusterctl init` installs it
// into (the object's, so the checks of TestCluster apply), and the folder of
// the local clusterctl repository holding its release and the file of its
// components there.
type operatorProvider struct {
	kind, name, namespace, label, components string
	// capi marks Cluster API's own providers, whose images the test's
	// clusterctl configuration overrides (writeRepository); ours name the
	// images the Makefile built.
	capi bool
	// variables marks the provider whose components name variables
	// (METAL_API_KEY, METAL_API_URL): CAPP's.
	variables bool
}

var operatorProviders = []operatorProvider{
	{"CoreProvider", "cluster-api", "capi-system", "cluster-api", "core-components.yaml", true, false},
	{"BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system", "bootstrap-kubeadm", "bootstrap-components.yaml", true, false},
	{"ControlPlaneProvider", "kubeadm", "capi-kubeadm-control-plane-system", "control-plane-kubeadm", "control-plane-components.yaml", true, false},
	{"IPAMProvider", "metal-vrf", "ipam-metal-vrf-system", "ipam-metal-vrf", "ipam-components.yaml", false, false},
	{"InfrastructureProvider", "packet", "cluster-api-provider-packet-system", "infrastructure-packet", "infrastructure-components.yaml", false, true},
}

// TestOperator installs what TestCluster installs with `clusterctl init`
// the declarative way, with cluster-api-operator (make test-operator;
// docs/install.md): cert-manager as clusterctl installs it, the operator
// from its module's manifests, then ConfigMaps holding each provider's
// components and metadata (what works without reaching GitHub) and one
// provider object each. Then the providers must be Ready, their webhooks
// answer and the flow of TestCluster run on them.
func TestOperator(t *testing.T) {
	isolated(t, "TestOperator", func(ctx context.Context, t *testing.T, c *cluster) {
		start := time.Now()
		installCertManager(ctx, t, c)
		installOperator(ctx, t, c)
		t.Logf("BENCHMARK cert-manager and the operator Available: %s", time.Since(start).Round(time.Second))

		start = time.Now()
		for _, p := range operatorProviders {
			createOperatorProvider(ctx, t, c, p)
		}
		waitProvidersReady(ctx, t, c.k8s)
		c.waitAvailable(ctx, t)
		t.Logf("BENCHMARK provider objects created to every Deployment Available: %s", time.Since(start).Round(time.Second))

		t.Run("the webhooks' certificates are cert-manager's", func(t *testing.T) { checkCertificates(ctx, t, c.k8s) })
		t.Run("webhooks refuse through their Services", func(t *testing.T) { checkWebhooks(ctx, t, c.k8s, c.cfg) })
		t.Run("the flow: a MachineDeployment of the default flavor on the simulator", func(t *testing.T) {
			f := newFlow(t, c)
			// The operator does not write clusterctl's inventory, where
			// clusterctl finds the installed version of a provider: its
			// user names the version.
			f.infrastructure = "packet:" + c.onlyVersion(t, "infrastructure-packet")
			f.create(ctx, t)
			f.waitMachines(ctx, t, 3)
			t.Log("3 machines on active devices, bond0 carrying VLAN 1001, their claims bound")
			t.Run("scale to 0 and delete the Cluster", func(t *testing.T) { f.scaleToZero(ctx, t) })
		})
	})
}

// installCertManager installs cert-manager as `clusterctl init` does, with
// clusterctl's own code and the test's clusterctl configuration (cert-manager's
// components from the local repository, its images from the local
// registry), and waits until it issues a certificate. The operator needs it
// for its webhook's certificate, as the providers do for theirs.
func installCertManager(ctx context.Context, t *testing.T, c *cluster) {
	config, err := clusterctlconfig.New(ctx, c.configPath)
	if err != nil {
		t.Fatal(err)
	}
	cm := clusterctlcluster.New(clusterctlcluster.Kubeconfig{Path: c.kubeconfig}, config).CertManager()
	if err := cm.EnsureInstalled(ctx); err != nil {
		t.Fatalf("installing cert-manager: %v", err)
	}
}

// installOperator pushes the operator's image and creates the objects of
// its manifests the Makefile rendered, then waits for its Deployment.
func installOperator(ctx context.Context, t *testing.T, c *cluster) {
	// Its namespace is the cluster's from now on: its Pod's logs are
	// printed if the test fails, its Deployment waited for with the others.
	c.namespaces = append(c.namespaces, operatorNamespace)
	pushImage(ctx, t, os.Getenv("OPERATOR_IMAGE"))
	objects, err := testenv.ReadObjects(os.Getenv("OPERATOR_COMPONENTS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		if err := c.k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	c.waitAvailableIn(ctx, t, "the operator's Deployment is Available", []string{operatorNamespace})
}

// createOperatorProvider creates, in the provider's namespace, the
// ConfigMap of its release in the local repository, the Secret of the
// variables ours need, and the provider object that installs it.
func createOperatorProvider(ctx context.Context, t *testing.T, c *cluster, p operatorProvider) {
	release := filepath.Join(c.dir, repositoryDir, p.label)
	version := c.onlyVersion(t, p.label)
	components, err := os.ReadFile(filepath.Join(release, version, p.components))
	if err != nil {
		t.Fatal(err)
	}
	metadata, err := os.ReadFile(filepath.Join(release, version, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace}}
	if err := c.k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.k8s.Create(ctx, componentsConfigMap(t, p, version, components, metadata)); err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{
		"version":     version,
		"fetchConfig": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{componentsLabel: p.name}}},
	}
	if p.capi {
		// The operator's own image override, per container, to what
		// clusterctl's configuration overrides Cluster API's images to.
		spec["deployment"] = map[string]any{"containers": []any{
			map[string]any{"name": "manager", "imageUrl": capiImage(t, components)}}}
	}
	if p.variables {
		if err := c.k8s.Create(ctx, variables(p.namespace, c.ctlEnv)); err != nil {
			t.Fatal(err)
		}
		// Without its namespace, which the operator's mutating webhook
		// defaults to the provider's: the install depends on the webhook.
		spec["configSecret"] = map[string]any{"name": variablesSecret}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": operatorAPIVersion, "kind": p.kind,
		"metadata": map[string]any{"namespace": p.namespace, "name": p.name},
		"spec":     spec,
	}}
	obj = createAdmitted(ctx, t, c.k8s, obj)
	if ns, ok, _ := unstructured.NestedString(obj.Object, "spec", "configSecret", "namespace"); p.variables && (!ok || ns != p.namespace) {
		t.Errorf("%s %s: spec.configSecret.namespace %q after the operator's webhook, want %q", p.kind, p.name, ns, p.namespace)
	}
}

// onlyVersion is the version of the one release in the provider's folder
// (its clusterctl label) of the local repository.
func (c *cluster) onlyVersion(t *testing.T, label string) string {
	dir := filepath.Join(c.dir, repositoryDir, label)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("%s holds %d releases, want one", dir, len(entries))
	}
	return entries[0].Name()
}

// componentsConfigMap is the ConfigMap a provider object's fetchConfig
// selects: its components (gzipped past the API server's limit, as Cluster
// API's core components are) and metadata, labelled with their version.
func componentsConfigMap(t *testing.T, p operatorProvider, version string, components, metadata []byte) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: p.name + "-" + version,
			Labels: map[string]string{componentsLabel: p.name, versionLabel: version}},
		Data: map[string]string{"metadata": string(metadata)},
	}
	if len(components)+len(metadata) < configMapLimit {
		cm.Data["components"] = string(components)
		return cm
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(components); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{compressedAnnotation: "true"}
	cm.BinaryData = map[string][]byte{"components": gz.Bytes()}
	return cm
}

// capiImage is the image clusterctl's image override for Cluster API's
// providers (writeRepository) makes of the manager image the components
// name: the same name in capiImageRepository, at Cluster API's version.
func capiImage(t *testing.T, components []byte) string {
	objects, err := testenv.DecodeObjects(bytes.NewReader(components))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		if obj.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			container, _ := c.(map[string]any)
			if image, ok := container["image"].(string); ok && container["name"] == "manager" {
				name, _, _ := strings.Cut(path.Base(image), ":")
				return capiImageRepository + "/" + name + ":" + os.Getenv("CAPI_VERSION")
			}
		}
	}
	t.Fatal("no Deployment with a manager container in the components")
	return ""
}

// variables is the configSecret of CAPP: the variables its components
// name, as `clusterctl init` reads them from its environment.
func variables(namespace string, env []string) *corev1.Secret {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: variablesSecret},
		StringData: map[string]string{},
	}
	for _, kv := range env {
		if name, value, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "METAL_") {
			secret.StringData[name] = value
		}
	}
	return secret
}

// createAdmitted creates obj through the operator's webhooks and returns
// what the API server stored, retrying while the API server cannot call
// them yet: their certificate reaches the webhook configurations and the
// Pod's mounted Secret at different moments.
func createAdmitted(ctx context.Context, t *testing.T, k8s client.Client, obj *unstructured.Unstructured) *unstructured.Unstructured {
	var created *unstructured.Unstructured
	waitFor(ctx, t, 3*time.Minute, "the operator's webhooks admit "+obj.GetKind()+" "+obj.GetName(), func() error {
		created = obj.DeepCopy()
		err := k8s.Create(ctx, created)
		if err != nil && !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("creating %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		return err
	})
	return created
}

// finalReasons are the operator's condition reasons that waiting does not
// mend: the provider's ConfigMaps, components, metadata or object are
// wrong.
var finalReasons = map[string]bool{
	"ComponentsFetchError": true, "ComponentsCustomizationError": true, "ComponentsPatchError": true,
	"ComponentsImageOverrideError": true, "CAPIVersionIncompatibility": true, "UnknownProvider": true,
	"FetchConfigValidationError": true, "IncorrectVersionFormat": true,
}

// waitProvidersReady waits until every provider object reports its version
// installed and is Ready (the operator's health check: its Deployment is
// Available), and fails at once for a reason that will not change.
func waitProvidersReady(ctx context.Context, t *testing.T, k8s client.Client) {
	waitFor(ctx, t, 10*time.Minute, "every provider object installed and Ready", func() error {
		var errs []error
		for _, p := range operatorProviders {
			obj := &unstructured.Unstructured{}
			obj.SetAPIVersion(operatorAPIVersion)
			obj.SetKind(p.kind)
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.name}, obj); err != nil {
				return err
			}
			errs = append(errs, providerReady(t, obj))
		}
		return errors.Join(errs...)
	})
}

// providerReady tells whether the provider object is installed at its
// version and Ready.
func providerReady(t *testing.T, obj *unstructured.Unstructured) error {
	what := obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	status := map[string]string{}
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		typ, _ := cond["type"].(string)
		status[typ], _ = cond["status"].(string)
		if reason, _ := cond["reason"].(string); status[typ] == "False" && finalReasons[reason] {
			t.Fatalf("%s: %s False: %s: %v", what, typ, reason, cond["message"])
		}
	}
	want, _, _ := unstructured.NestedString(obj.Object, "spec", "version")
	installed, _, _ := unstructured.NestedString(obj.Object, "status", "installedVersion")
	if installed != want || status["ProviderInstalled"] != "True" || status["Ready"] != "True" {
		return fmt.Errorf("%s: installed version %q (want %q), conditions %v", what, installed, want, conditions)
	}
	return nil
}
