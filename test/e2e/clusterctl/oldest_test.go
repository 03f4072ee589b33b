package clusterctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	ipamv1alpha1 "github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// The oldest Kubernetes minor Cluster API v1.14 supports on a management
	// cluster (the support matrix in its book, docs/book/src/reference/
	// versions.md); `make test` builds its kube-apiserver into
	// bin/envtest-<oldestKubeVersion> and sets $OLDEST_KUBEBUILDER_ASSETS.
	oldestKubeVersion = "v1.33.3"
	oldestKubeMinor   = "33"

	capiModule = "sigs.k8s.io/cluster-api"
)

// provider is one provider's release in a local clusterctl repository.
type provider struct {
	// Type is clusterctl's provider type (IPAMProvider, InfrastructureProvider, ...).
	Type, Name, Label, Version string
	// ComponentsFile is the components file's name in the release folder.
	ComponentsFile       string
	Components, Metadata []byte
}

// TestClusterctlInitOnOldestKubernetes installs the released components with
// `clusterctl init --ipam metal-vrf` and `clusterctl init --infrastructure
// packet` on a kube-apiserver of the oldest
// Kubernetes minor Cluster API supports, which serves none of the kinds that
// arrived later: clusterctl fails when one of them is in the components.
// Then the manager, on the CRDs clusterctl installed, binds a claim.
func TestClusterctlInitOnOldestKubernetes(t *testing.T) {
	ctx := context.Background()
	kustomize := tool(t, "KUSTOMIZE", "kustomize")
	env := startOldest(t)
	root := env.Root

	metadata, err := os.ReadFile(filepath.Join(root, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Both providers' default components: the rule holds for each.
	clusterctlInitOnOldest(t, env, provider{
		Type: "IPAMProvider", Name: providerName, Label: providerLabel, Version: version,
		ComponentsFile: "ipam-components.yaml",
		Components:     run(t, root, nil, kustomize, "build", "config/ipam/default"),
		Metadata:       metadata,
	}, provider{
		Type: "InfrastructureProvider", Name: "packet", Label: infraLabel, Version: version,
		ComponentsFile: "infrastructure-components.yaml",
		Components:     run(t, root, nil, kustomize, "build", "config/capp/default"),
		Metadata:       metadata,
	})

	// No Pod runs in envtest, so nothing serves the webhooks the providers
	// registered (failurePolicy Fail): take them away before writing pools
	// and claims.
	installed := client.HasLabels{"cluster.x-k8s.io/provider"}
	for _, obj := range []client.Object{&admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}} {
		if err := env.Client.DeleteAllOf(ctx, obj, installed); err != nil {
			t.Fatal(err)
		}
	}
	stop, err := env.StartIPAM(ctx, env.IPAMOptions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	ns, err := env.NewNamespace(ctx, "oldest")
	if err != nil {
		t.Fatal(err)
	}
	pool := &ipamv1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"},
		Spec:       ipamv1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: ptr.To(int32(24))},
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim"},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: ipamv1alpha1.GroupVersion.Group, Kind: ipamv1alpha1.MetalVRFIPPoolKind, Name: pool.Name,
		}},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for claim.Status.AddressRef.Name == "" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			t.Fatal(err)
		}
	}
	if claim.Status.AddressRef.Name == "" {
		t.Fatalf("the claim was not bound within 30s: %+v", claim.Status)
	}
	if controllerutil.ContainsFinalizer(claim, ipamutil.ReleaseAddressFinalizer) {
		t.Errorf("the bound claim has %s: its release hangs on its IPAddress's finalizer", ipamutil.ReleaseAddressFinalizer)
	}
}

// startOldest starts an empty API server of the oldest supported minor.
func startOldest(t *testing.T) *testenv.Environment {
	t.Helper()
	assets := os.Getenv("OLDEST_KUBEBUILDER_ASSETS")
	if assets == "" {
		wd, _ := os.Getwd()
		assets = filepath.Join(wd, "..", "..", "..", "bin", "envtest-"+oldestKubeVersion)
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("no kube-apiserver %s in %s: run 'make test', which builds it there and sets $OLDEST_KUBEBUILDER_ASSETS", oldestKubeVersion, assets)
	}
	env, err := testenv.Start(testenv.Options{Empty: true, Assets: assets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.Major != "1" || info.Minor != oldestKubeMinor {
		t.Fatalf("the API server in %s is Kubernetes %s (%s.%s), want 1.%s", assets, info.GitVersion, info.Major, info.Minor, oldestKubeMinor)
	}
	return env
}

// clusterctlInitOnOldest runs `clusterctl init` on env (an empty API server
// from startOldest) from a local repository holding Cluster API's core
// provider, built from the pinned module, and the given providers, as a user
// does: first the core provider (the kubeadm providers are left out, they
// come only from GitHub), then each provider on its own, e.g.
// `clusterctl init --ipam metal-vrf`. It fails the test when clusterctl does,
// e.g. on a kind the API server does not serve.
func clusterctlInitOnOldest(t *testing.T, env *testenv.Environment, providers ...provider) {
	t.Helper()
	kustomize, clusterctl := tool(t, "KUSTOMIZE", "kustomize"), tool(t, "CLUSTERCTL", "clusterctl")
	root := env.Root

	// clusterctl checks that cert-manager works by creating a Certificate
	// and an Issuer; with cert-manager's CRDs those are accepted, and
	// clusterctl goes on without installing cert-manager from GitHub.
	if err := testenv.InstallCertManagerCRDs(env.Config); err != nil {
		t.Fatal(err)
	}

	capiDir := strings.TrimSpace(string(run(t, root, nil, "go", "list", "-m", "-f", "{{.Dir}}", capiModule)))
	capiVersion := strings.TrimSpace(string(run(t, root, nil, "go", "list", "-m", "-f", "{{.Version}}", capiModule)))
	capiMetadata, err := os.ReadFile(filepath.Join(capiDir, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	core := provider{
		Type: "CoreProvider", Name: "cluster-api", Label: "cluster-api", Version: capiVersion,
		ComponentsFile: "core-components.yaml",
		Components:     run(t, root, nil, kustomize, "build", filepath.Join(capiDir, "core", "config", "default")),
		Metadata:       capiMetadata,
	}

	home := t.TempDir()
	var config strings.Builder
	config.WriteString("providers:\n")
	for _, p := range append([]provider{core}, providers...) {
		release := filepath.Join(home, "repository", p.Label, p.Version)
		write(t, filepath.Join(release, p.ComponentsFile), p.Components)
		write(t, filepath.Join(release, "metadata.yaml"), p.Metadata)
		fmt.Fprintf(&config, "- name: %s\n  url: file://%s\n  type: %s\n", p.Name, filepath.Join(release, p.ComponentsFile), p.Type)
	}
	configFile := filepath.Join(home, "clusterctl.yaml")
	write(t, configFile, []byte(config.String()))
	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}

	clusterctlEnv := []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"CLUSTERCTL_DISABLE_VERSIONCHECK=true", "IPAM_METAL_VRF_IMAGE=" + image, "CAPP_METAL_VRF_IMAGE=" + infraImage,
	}
	init := func(args ...string) {
		t.Helper()
		run(t, root, clusterctlEnv, clusterctl, append([]string{"init", "--config", configFile, "--kubeconfig", kubeconfig}, args...)...)
	}
	init("--core", core.Name, "--bootstrap", "-", "--control-plane", "-")
	finalizeNamespace(t, env, "cert-manager-test")
	flags := map[string]string{"IPAMProvider": "--ipam", "InfrastructureProvider": "--infrastructure"}
	for _, p := range providers {
		flag, ok := flags[p.Type]
		if !ok {
			t.Fatalf("no clusterctl init flag for a provider of type %s", p.Type)
		}
		init(flag, p.Name)
		finalizeNamespace(t, env, "cert-manager-test")
	}

	// clusterctl records what it installed in its inventory.
	inventory := &unstructured.UnstructuredList{}
	inventory.SetAPIVersion("clusterctl.cluster.x-k8s.io/v1alpha3")
	inventory.SetKind("ProviderList")
	if err := env.Client.List(context.Background(), inventory); err != nil {
		t.Fatal(err)
	}
	for _, p := range providers {
		if !slices.ContainsFunc(inventory.Items, func(o unstructured.Unstructured) bool {
			return field(o.Object, "providerName") == p.Name && field(o.Object, "type") == p.Type && field(o.Object, "version") == p.Version
		}) {
			t.Errorf("clusterctl's inventory has no %s %s %s", p.Type, p.Name, p.Version)
		}
	}
}

// finalizeNamespace does the namespace controller's part, which envtest
// lacks, for a namespace clusterctl deleted: every init checks cert-manager
// by creating objects in cert-manager-test and deleting the namespace, and
// the next init could not create them in a namespace left terminating.
func finalizeNamespace(t *testing.T, env *testenv.Environment, name string) {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finalizing namespace %s: %v", name, err)
	}
}
