// Package clusterctl checks the IPAM provider's clusterctl packaging end to
// end: config/ipam/default is built the way `make release` builds it, served
// from a local clusterctl repository, rendered by clusterctl (built from the
// pinned Cluster API module) and every rendered object is created on a real
// kube-apiserver; the opt-in admission policy released beside it takes
// effect; and `clusterctl init` installs the components on a kube-apiserver
// of the oldest Kubernetes minor Cluster API supports (oldest_test.go).
package clusterctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// The provider as clusterctl knows it: --ipam metal-vrf, labelled ipam-metal-vrf.
	providerName  = "metal-vrf"
	providerLabel = "ipam-metal-vrf"
	namespace     = "ipam-metal-vrf-system"
	// The working tree's version in local repositories.
	version = testenv.LocalVersion
	// An image that is not the default, to check the image variable.
	image = "registry.example/metal-vrf/ipam:test"
)

func TestClusterctlInstallsTheProvider(t *testing.T) {
	ctx := context.Background()
	kustomize, clusterctl := tool(t, "KUSTOMIZE", "kustomize"), tool(t, "CLUSTERCTL", "clusterctl")
	// The policy comes from the released file below, not from testenv.
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	root := env.Root

	// What `make release` publishes.
	components := run(t, root, nil, kustomize, "build", "config/ipam/default")
	metadata, err := os.ReadFile(filepath.Join(root, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// clusterctl adds the provider label itself, so only the released file
	// shows whether the packaging sets it.
	for _, obj := range decode(t, components) {
		if got := obj.GetLabels()["cluster.x-k8s.io/provider"]; got != providerLabel {
			t.Errorf("%s: label cluster.x-k8s.io/provider is %q in ipam-components.yaml, want %q", id(obj), got, providerLabel)
		}
	}

	// A local repository <dir>/<provider label>/<version>/ and a clusterctl
	// configuration naming it, in a home of their own.
	home := t.TempDir()
	release := filepath.Join(home, "repository", providerLabel, version)
	write(t, filepath.Join(release, "ipam-components.yaml"), components)
	write(t, filepath.Join(release, "metadata.yaml"), metadata)
	config := filepath.Join(home, "clusterctl.yaml")
	write(t, config, fmt.Appendf(nil, "providers:\n- name: %s\n  url: file://%s\n  type: IPAMProvider\n",
		providerName, filepath.Join(release, "ipam-components.yaml")))
	rendered := run(t, root, []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"CLUSTERCTL_DISABLE_VERSIONCHECK=true", "IPAM_METAL_VRF_IMAGE=" + image,
	}, clusterctl, "generate", "provider", "--ipam", providerName+":"+version, "--config", config)
	objs := decode(t, rendered)

	checkCRDs(t, root, objs)
	checkManager(t, objs)
	checkWiring(t, objs)

	// cert-manager's own CRDs, so that its objects are checked as strictly
	// as a cluster with cert-manager checks them.
	if err := testenv.InstallCertManagerCRDs(env.Config); err != nil {
		t.Fatal(err)
	}
	// testenv installed the pool CRDs from config/ipam/crd/bases; remove them
	// so that the rendered CRDs are created, not updated.
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			deleteAndWait(ctx, t, env.Client, obj)
		}
	}

	// Every object is created: the Namespace first, then the CRDs, then the rest.
	rank := func(o *unstructured.Unstructured) int {
		switch o.GetKind() {
		case "Namespace":
			return 0
		case "CustomResourceDefinition":
			return 1
		}
		return 2
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	for _, obj := range objs {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("the API server rejected %s: %v", id(obj), err)
		}
	}
}

// checkCRDs checks that the rendered CRDs are exactly those of
// config/ipam/crd/bases, with the labels clusterctl and Cluster API read.
func checkCRDs(t *testing.T, root string, objs []*unstructured.Unstructured) {
	t.Helper()
	rendered := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			rendered[obj.GetName()] = obj
		}
	}
	bases, err := filepath.Glob(filepath.Join(root, "config", "ipam", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/ipam/crd/bases (%v)", err)
	}
	for _, path := range bases {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, base := range decode(t, data) {
			crd, ok := rendered[base.GetName()]
			if !ok {
				t.Errorf("CRD %s of %s is not in the components", base.GetName(), filepath.Base(path))
				continue
			}
			delete(rendered, base.GetName())
			if !reflect.DeepEqual(crd.Object["spec"], base.Object["spec"]) {
				t.Errorf("CRD %s: the spec differs from %s", crd.GetName(), filepath.Base(path))
			}
			// The contract label lists every served version.
			var served []string
			for _, v := range items(crd.Object, "spec", "versions") {
				if v["served"] == true {
					served = append(served, field(v, "name"))
				}
			}
			for k, v := range map[string]string{"cluster.x-k8s.io/v1beta2": strings.Join(served, "_"), "clusterctl.cluster.x-k8s.io/move-hierarchy": ""} {
				if got, ok := crd.GetLabels()[k]; !ok || got != v {
					t.Errorf("CRD %s: label %s is %q (set: %t), want %q", crd.GetName(), k, got, ok, v)
				}
			}
		}
	}
	for name := range rendered {
		t.Errorf("CRD %s is in the components but not in config/ipam/crd/bases", name)
	}
}

// checkManager checks the manager Deployment: the container clusterctl
// expects, leader election, probes, the image variable, a non-root Pod.
func checkManager(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	pod, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "ipam-metal-vrf-controller-manager").Object, "spec", "template", "spec")
	containers := items(pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(containers))
	}
	c := containers[0]
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	nonRoot, _, _ := unstructured.NestedBool(pod, "securityContext", "runAsNonRoot")
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"container name", field(c, "name"), "manager"},
		{"--leader-elect in the args", slices.Contains(args, "--leader-elect"), true},
		{"image", field(c, "image"), image},
		{"liveness probe", field(c, "livenessProbe", "httpGet", "path"), "/healthz"},
		{"readiness probe", field(c, "readinessProbe", "httpGet", "path"), "/readyz"},
		{"runAsNonRoot", nonRoot, true},
	} {
		if check.got != check.want {
			t.Errorf("manager Deployment: %s is %v, want %v", check.what, check.got, check.want)
		}
	}
}

// checkWiring checks the references between objects that kustomize's name
// prefix and namespace rewrite: a broken one is accepted by the API server
// but leaves the provider without its permissions, webhook or certificate.
func checkWiring(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	pod, _, _ := unstructured.NestedMap(find(t, objs, "Deployment", "ipam-metal-vrf-controller-manager").Object, "spec", "template", "spec")
	sa := field(pod, "serviceAccountName")
	find(t, objs, "ServiceAccount", sa)
	for _, binding := range objs {
		if kind := binding.GetKind(); kind != "ClusterRoleBinding" && kind != "RoleBinding" {
			continue
		}
		find(t, objs, field(binding.Object, "roleRef", "kind"), field(binding.Object, "roleRef", "name"))
		subjects := items(binding.Object, "subjects")
		if len(subjects) != 1 || field(subjects[0], "name") != sa || field(subjects[0], "namespace") != namespace {
			t.Errorf("%s binds %v, want the ServiceAccount %s/%s", id(binding), subjects, namespace, sa)
		}
	}

	vwc := find(t, objs, "ValidatingWebhookConfiguration", "ipam-metal-vrf-validating-webhook-configuration")
	skipsManager := false
	for _, wh := range items(vwc.Object, "webhooks") {
		if ns := field(wh, "clientConfig", "service", "namespace"); ns != namespace {
			t.Errorf("webhook %s calls a Service in namespace %q, want %q", field(wh, "name"), ns, namespace)
		}
		find(t, objs, "Service", field(wh, "clientConfig", "service", "name"))
		// The IPAddress webhook spares the manager's own creations, named
		// by its ServiceAccount's username.
		for _, cond := range items(wh, "matchConditions") {
			skipsManager = skipsManager || field(cond, "expression") == "request.userInfo.username != 'system:serviceaccount:"+namespace+":"+sa+"'"
		}
	}
	if !skipsManager {
		t.Errorf("%s: no webhook skips the requests of the manager's ServiceAccount %s/%s", id(vwc), namespace, sa)
	}
	certRef := strings.SplitN(vwc.GetAnnotations()["cert-manager.io/inject-ca-from"], "/", 2)
	if len(certRef) != 2 || certRef[0] != namespace {
		t.Fatalf("%s: cert-manager.io/inject-ca-from is %v, want %s/<certificate>", id(vwc), certRef, namespace)
	}
	cert := find(t, objs, "Certificate", certRef[1])
	find(t, objs, "Issuer", field(cert.Object, "spec", "issuerRef", "name"))
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if want := "ipam-metal-vrf-webhook-service." + namespace + ".svc"; !slices.Contains(dnsNames, want) {
		t.Errorf("%s: dnsNames %v lack %s", id(cert), dnsNames, want)
	}
	var secrets []string
	for _, v := range items(pod, "volumes") {
		secrets = append(secrets, field(v, "secret", "secretName"))
	}
	if secret := field(cert.Object, "spec", "secretName"); !slices.Contains(secrets, secret) {
		t.Errorf("the manager mounts the Secrets %v, not the webhook certificate's %s", secrets, secret)
	}
}

// tool returns the program $env names (set by `make test`), or the one in
// bin/tools, and fails the test when there is none.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	path, err := testenv.Tool(env, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs a program in dir with extra environment variables and returns its
// standard output; it fails the test, showing standard error, when the
// program fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	out, err := testenv.RunTool(dir, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deleteAndWait deletes obj and waits until it is gone.
func deleteAndWait(ctx context.Context, t *testing.T, c client.Client, obj *unstructured.Unstructured) {
	t.Helper()
	if err := c.Delete(ctx, obj.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopy())
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("%s was not deleted: %v", id(obj), err)
	}
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.DecodeObjects(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decoding YAML: %v", err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, obj := range objs {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	t.Fatalf("the components have no %s %q", kind, name)
	return nil
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func id(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetKind() + " " + obj.GetName()
	}
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// field returns the string at path in o, or "".
func field(o map[string]any, path ...string) string {
	s, _, _ := unstructured.NestedString(o, path...)
	return s
}

// items returns the list of objects at path in o.
func items(o map[string]any, path ...string) []map[string]any {
	list, _, _ := unstructured.NestedSlice(o, path...)
	var maps []map[string]any
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			maps = append(maps, m)
		}
	}
	return maps
}
