package clusterctl

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// The infrastructure provider as clusterctl knows it: --infrastructure
	// packet, labelled infrastructure-packet, upstream CAPP's names.
	infraLabel     = "infrastructure-packet"
	infraNamespace = "cluster-api-provider-packet-system"
	infraImage     = "registry.example/metal-vrf/capp:test"
)

// TestClusterctlInitInstallsTheInfrastructureProvider runs `clusterctl init
// --infrastructure packet --ipam metal-vrf` on an empty API server, from a
// local repository holding what `make release` publishes plus Cluster API's
// own core, kubeadm bootstrap and kubeadm control-plane components, built
// from the pinned Cluster API module the way its release builds them. Then
// every flavor of templates/ is rendered with `clusterctl generate cluster`
// and the API server accepts every rendered object (server-side dry run: no
// controller runs here).
func TestClusterctlInitInstallsTheInfrastructureProvider(t *testing.T) {
	ctx := context.Background()
	kustomize, clusterctl := tool(t, "KUSTOMIZE", "kustomize"), tool(t, "CLUSTERCTL", "clusterctl")
	// The in-cluster provider's CRDs, for the incluster flavor's pool.
	env, err := testenv.Start(testenv.Options{InClusterCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	root := env.Root

	infra := run(t, root, nil, kustomize, "build", "config/capp/default")
	for _, obj := range decode(t, infra) {
		if got := obj.GetLabels()["cluster.x-k8s.io/provider"]; got != infraLabel {
			t.Errorf("%s: label cluster.x-k8s.io/provider is %q in infrastructure-components.yaml, want %q", id(obj), got, infraLabel)
		}
	}
	// The local repository, <dir>/<provider label>/<version>/, and a
	// clusterctl configuration that points every provider init needs at it.
	home := t.TempDir()
	repo := filepath.Join(home, "repository")
	configPath, err := testenv.WriteClusterctlRepository(root, repo, kustomize, true)
	if err != nil {
		t.Fatal(err)
	}
	// clusterctl looks for a provider's templates beside its components.
	templates, err := filepath.Glob(filepath.Join(root, "templates", "cluster-template*.yaml"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("no templates/cluster-template*.yaml (%v)", err)
	}
	for _, path := range templates {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(repo, infraLabel, version, filepath.Base(path)), data)
	}
	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctlEnv := func(extra ...string) []string {
		return append([]string{
			"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
			"CLUSTERCTL_DISABLE_VERSIONCHECK=true",
		}, extra...)
	}

	checkCredentialVariables(t, root, clusterctl, configPath, ctlEnv)

	// clusterctl installs cert-manager unless it finds it working, which it
	// checks by creating an Issuer and a Certificate. With cert-manager's
	// CRDs (from its module) that succeeds, so nothing is downloaded; no
	// object here needs cert-manager to act.
	if err := testenv.InstallCertManagerCRDs(env.Config); err != nil {
		t.Fatal(err)
	}

	// The command users run. On a cluster without Cluster API, init adds the
	// core provider and the kubeadm bootstrap and control-plane providers
	// itself, here from the local repository.
	run(t, root, ctlEnv("PACKET_API_KEY=upstream-token", "CAPP_METAL_VRF_IMAGE="+infraImage),
		clusterctl, "init", "--kubeconfig", kubeconfig, "--config", configPath,
		"--infrastructure", "packet", "--ipam", providerName)

	checkInventory(ctx, t, env.Client, map[string]string{
		"cluster-api":           "capi-system",
		"bootstrap-kubeadm":     "capi-kubeadm-bootstrap-system",
		"control-plane-kubeadm": "capi-kubeadm-control-plane-system",
		providerLabel:           namespace,
		infraLabel:              infraNamespace,
	})
	checkInfraCRDs(ctx, t, env.Client, root)
	checkInfraManager(ctx, t, env.Client)

	// No webhook server runs here, so the webhooks the providers installed
	// (Cluster API's defaulting and validation, the pools' validation, all
	// failurePolicy Fail) would refuse every object, dry run or not. Without
	// them the API server still checks each object against its CRD's schema
	// and CEL rules, which is what the templates must satisfy.
	if err := env.DeleteWebhookConfigurations(ctx); err != nil {
		t.Fatal(err)
	}

	ns, err := env.NewNamespace(ctx, "flavors")
	if err != nil {
		t.Fatal(err)
	}
	// A key whose comment YAML would cut off if the templates did not quote it.
	const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests me@example # not a YAML comment"
	vars := ctlEnv("PROJECT_ID=2bd4b0f3-8ad4-4a8c-9a0e-7c0b7f6a5d11", "METRO=da",
		"SSH_KEY="+sshKey, "KUBERNETES_VERSION=v1.34.1")
	for flavor, want := range map[string]struct {
		port, poolKind string
	}{
		"":                {"bond0", "MetalVRFIPPool"},
		"hybrid-unbonded": {"eth1", "MetalVRFIPPool"},
		"incluster":       {"bond0", "InClusterIPPool"},
	} {
		name := "default"
		if flavor != "" {
			name = flavor
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"generate", "cluster", "demo-" + name, "--kubeconfig", kubeconfig, "--config", configPath,
				"--target-namespace", ns, "--infrastructure", "packet"}
			if flavor != "" {
				args = append(args, "--flavor", flavor)
			}
			// Only the variables without a default are required, and the
			// template reads no others than these. clusterctl supplies
			// CLUSTER_NAME, KUBERNETES_VERSION and the machine counts from its
			// arguments, so it lists them as optional.
			listed := string(run(t, root, vars, clusterctl, append(args, "--list-variables")...))
			required, optional := listedVariables(listed)
			if want := []string{"METRO", "PROJECT_ID", "SSH_KEY"}; !slices.Equal(required, want) {
				t.Errorf("required variables %v, want %v", required, want)
			}
			if want := []string{"CCM_IMAGE", "CLUSTER_NAME", "CONTROLPLANE_NODE_TYPE", "CONTROL_PLANE_MACHINE_COUNT", "KUBERNETES_VERSION",
				"METAL_CREDENTIALS_SECRET", "NODE_NETWORK_ADDRESSES", "NODE_NETWORK_GATEWAY", "NODE_NETWORK_PREFIX", "NODE_OS", "NODE_SOFTWARE", "NODE_VXLAN",
				"POD_CIDR", "SERVICE_CIDR", "WORKER_MACHINE_COUNT", "WORKER_NODE_TYPE"}; !slices.Equal(optional, want) {
				t.Errorf("optional variables %v, want %v", optional, want)
			}

			rendered := run(t, root, vars, clusterctl, args...)
			if strings.Contains(string(rendered), "${") {
				t.Errorf("unsubstituted variables left:\n%s", rendered)
			}
			objs := decode(t, rendered)
			checkFlavor(t, objs, "demo-"+name, want.port, want.poolKind, sshKey)
			checkAddons(t, objs, "demo-"+name)
			for _, obj := range objs {
				if obj.GetNamespace() != ns {
					t.Errorf("%s is not in the target namespace %s", id(obj), ns)
				}
				// Strict: a field the CRD does not know is an error, not a
				// warning the API server drops the field with.
				if err := env.Client.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
					t.Errorf("the API server rejected %s: %v", id(obj), err)
				}
			}
		})
	}
}

// listedVariables returns the names `clusterctl generate cluster
// --list-variables` prints under "Required Variables:" and "Optional
// Variables:", each in the order printed (sorted).
func listedVariables(listed string) (required, optional []string) {
	var into *[]string
	for _, line := range strings.Split(listed, "\n") {
		switch strings.TrimSpace(line) {
		case "Required Variables:":
			into = &required
			continue
		case "Optional Variables:":
			into = &optional
			continue
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok && into != nil {
			*into = append(*into, strings.Fields(name)[0])
		}
	}
	return required, optional
}

// checkCredentialVariables renders the infrastructure components with each
// way of passing the token: METAL_API_KEY wins over upstream's
// PACKET_API_KEY, either alone is enough, and neither is required (the
// PacketClusters may all carry their own credentials).
func checkCredentialVariables(t *testing.T, root, clusterctl, config string, ctlEnv func(...string) []string) {
	t.Helper()
	for _, c := range []struct {
		env          []string
		key, baseURL string
	}{
		{[]string{"PACKET_API_KEY=upstream"}, "upstream", "https://api.equinix.com"},
		{[]string{"METAL_API_KEY=metal", "PACKET_API_KEY=upstream"}, "metal", "https://api.equinix.com"},
		{[]string{"METAL_API_KEY=metal", "METAL_API_URL=http://127.0.0.1:8099"}, "metal", "http://127.0.0.1:8099"},
		{nil, "", "https://api.equinix.com"},
	} {
		out := run(t, root, ctlEnv(c.env...), clusterctl, "generate", "provider", "--infrastructure", "packet", "--config", config)
		secret := find(t, decode(t, out), "Secret", "cluster-api-provider-packet-manager-credentials")
		key, url := field(secret.Object, "stringData", "apiKey"), field(secret.Object, "stringData", "apiURL")
		if key != c.key || url != c.baseURL {
			t.Errorf("with %v the credentials Secret holds apiKey %q, apiURL %q; want %q, %q", c.env, key, url, c.key, c.baseURL)
		}
	}
}

// checkInventory checks clusterctl's record of each installed provider: the
// namespace it went to.
func checkInventory(ctx context.Context, t *testing.T, c client.Client, want map[string]string) {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "clusterctl.cluster.x-k8s.io", Version: "v1alpha3", Kind: "ProviderList"})
	if err := c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range list.Items {
		got[p.GetName()] = p.GetNamespace()
	}
	for name, ns := range want {
		if got[name] != ns {
			t.Errorf("clusterctl's inventory has provider %s in namespace %q, want %q (all: %v)", name, got[name], ns, got)
		}
	}
}

// checkInfraCRDs checks the installed CAPP CRDs against config/capp/crd/bases:
// the contract label lists every served version, and the provider label is set.
func checkInfraCRDs(ctx context.Context, t *testing.T, c client.Client, root string) {
	t.Helper()
	bases, err := filepath.Glob(filepath.Join(root, "config", "capp", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/capp/crd/bases (%v)", err)
	}
	for _, path := range bases {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, base := range decode(t, data) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(base.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKey{Name: base.GetName()}, crd); err != nil {
				t.Errorf("CRD %s: %v", base.GetName(), err)
				continue
			}
			var served []string
			for _, v := range items(crd.Object, "spec", "versions") {
				if v["served"] == true {
					served = append(served, field(v, "name"))
				}
			}
			for k, v := range map[string]string{"cluster.x-k8s.io/v1beta2": strings.Join(served, "_"), "cluster.x-k8s.io/provider": infraLabel} {
				if got := crd.GetLabels()[k]; got != v {
					t.Errorf("CRD %s: label %s is %q, want %q", crd.GetName(), k, got, v)
				}
			}
		}
	}
}

// checkInfraManager checks the installed manager: the container clusterctl
// expects, leader election, probes, the image variable, its permissions,
// and the token reaching it from the Secret clusterctl filled in.
func checkInfraManager(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	get := func(kind, ns, name string) *unstructured.Unstructured {
		t.Helper()
		obj := &unstructured.Unstructured{}
		gv := map[string]string{"Deployment": "apps/v1", "Secret": "v1", "ServiceAccount": "v1", "Service": "v1",
			"ClusterRoleBinding": "rbac.authorization.k8s.io/v1", "ClusterRole": "rbac.authorization.k8s.io/v1",
			"RoleBinding": "rbac.authorization.k8s.io/v1", "Role": "rbac.authorization.k8s.io/v1"}[kind]
		obj.SetAPIVersion(gv)
		obj.SetKind(kind)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			t.Fatalf("%s %s/%s: %v", kind, ns, name, err)
		}
		return obj
	}
	deploy := get("Deployment", infraNamespace, "cluster-api-provider-packet-controller-manager")
	pod, _, _ := unstructured.NestedMap(deploy.Object, "spec", "template", "spec")
	containers := items(pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(containers))
	}
	ctr := containers[0]
	args, _, _ := unstructured.NestedStringSlice(ctr, "args")
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"container name", field(ctr, "name"), "manager"},
		{"--leader-elect in the args", slices.Contains(args, "--leader-elect"), true},
		{"image", field(ctr, "image"), infraImage},
		{"liveness probe", field(ctr, "livenessProbe", "httpGet", "path"), "/healthz"},
		{"readiness probe", field(ctr, "readinessProbe", "httpGet", "path"), "/readyz"},
	} {
		if check.got != check.want {
			t.Errorf("manager Deployment: %s is %v, want %v", check.what, check.got, check.want)
		}
	}

	// Each variable comes from a key of a Secret that exists in the
	// namespace, what kubelet would hand the manager, but GOMEMLIMIT, the
	// container's memory limit.
	envs := map[string]string{}
	for _, e := range items(ctr, "env") {
		if field(e, "name") == "GOMEMLIMIT" {
			if got := field(e, "valueFrom", "resourceFieldRef", "resource"); got != "limits.memory" {
				t.Errorf("env GOMEMLIMIT comes from %q, want limits.memory", got)
			}
			continue
		}
		ref, _, _ := unstructured.NestedMap(e, "valueFrom", "secretKeyRef")
		var secret corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: infraNamespace, Name: field(ref, "name")}, &secret); err != nil {
			t.Errorf("env %s: Secret %v: %v", field(e, "name"), ref, err)
			continue
		}
		envs[field(e, "name")] = string(secret.Data[field(ref, "key")])
	}
	if want := map[string]string{"METAL_API_KEY": "upstream-token", "METAL_API_URL": "https://api.equinix.com"}; !maps.Equal(envs, want) {
		t.Errorf("the manager's environment from its Secret is %v, want %v", envs, want)
	}

	sa := field(pod, "serviceAccountName")
	get("ServiceAccount", infraNamespace, sa)
	for _, b := range []*unstructured.Unstructured{
		get("ClusterRoleBinding", "", "cluster-api-provider-packet-manager-rolebinding"),
		get("RoleBinding", infraNamespace, "cluster-api-provider-packet-leader-election-rolebinding"),
	} {
		ns := ""
		if field(b.Object, "roleRef", "kind") == "Role" {
			ns = infraNamespace
		}
		get(field(b.Object, "roleRef", "kind"), ns, field(b.Object, "roleRef", "name"))
		subjects := items(b.Object, "subjects")
		if len(subjects) != 1 || field(subjects[0], "name") != sa || field(subjects[0], "namespace") != infraNamespace {
			t.Errorf("%s binds %v, want the ServiceAccount %s/%s", id(b), subjects, infraNamespace, sa)
		}
	}
}

// checkFlavor checks that a rendered flavor is one whole cluster: every
// reference between its objects resolves, and the machines' VLAN addresses
// come from the pool of the flavor on the expected port, and the SSH key
// arrives whole.
func checkFlavor(t *testing.T, objs []*unstructured.Unstructured, cluster, port, poolKind, sshKey string) {
	t.Helper()
	ref := func(obj *unstructured.Unstructured, path ...string) {
		t.Helper()
		r, _, _ := unstructured.NestedMap(obj.Object, path...)
		target := find(t, objs, field(r, "kind"), field(r, "name"))
		if group := strings.Split(target.GetAPIVersion(), "/")[0]; field(r, "apiGroup") != group {
			t.Errorf("%s: %s names apiGroup %q, the object's is %q", id(obj), strings.Join(path, "."), field(r, "apiGroup"), group)
		}
	}
	c := find(t, objs, "Cluster", cluster)
	ref(c, "spec", "infrastructureRef")
	ref(c, "spec", "controlPlaneRef")
	kcp := find(t, objs, "KubeadmControlPlane", cluster+"-control-plane")
	ref(kcp, "spec", "machineTemplate", "spec", "infrastructureRef")
	var templates int
	for _, obj := range objs {
		switch obj.GetKind() {
		case "MachineDeployment":
			ref(obj, "spec", "template", "spec", "bootstrap", "configRef")
			ref(obj, "spec", "template", "spec", "infrastructureRef")
			if field(obj.Object, "spec", "clusterName") != cluster {
				t.Errorf("%s belongs to cluster %q", id(obj), field(obj.Object, "spec", "clusterName"))
			}
		case "PacketMachineTemplate":
			templates++
			if keys, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "template", "spec", "sshKeys"); !slices.Equal(keys, []string{sshKey}) {
				t.Errorf("%s has sshKeys %q, want [%q]", id(obj), keys, sshKey)
			}
			// The default NODE_OS is a stock image: its nodes need the install.
			if got := field(obj.Object, "spec", "template", "spec", "nodeSoftware"); got != "Install" {
				t.Errorf("%s has nodeSoftware %q, want Install", id(obj), got)
			}
			ports := items(obj.Object, "spec", "template", "spec", "ports")
			if len(ports) != 1 || field(ports[0], "name") != port {
				t.Errorf("%s has ports %v, want one, %s", id(obj), ports, port)
				continue
			}
			for _, n := range items(ports[0], "networks") {
				pool, _, _ := unstructured.NestedMap(n, "addressFromPool")
				if field(pool, "kind") != poolKind {
					t.Errorf("%s draws from a %s, want a %s", id(obj), field(pool, "kind"), poolKind)
				}
				find(t, objs, field(pool, "kind"), field(pool, "name"))
			}
		}
	}
	if templates != 2 {
		t.Errorf("%d PacketMachineTemplates, want 2 (control plane and workers)", templates)
	}
}

// checkAddons checks that a rendered flavor installs our cloud controller
// manager and a CNI through ClusterResourceSets that select its Cluster;
// that the manager's token comes from the Secret the PacketCluster reads its
// own from (the template holds no token); and that its manifest is whole,
// with the default image.
func checkAddons(t *testing.T, objs []*unstructured.Unstructured, cluster string) {
	t.Helper()
	labels := find(t, objs, "Cluster", cluster).GetLabels()
	credentials := field(find(t, objs, "PacketCluster", cluster).Object, "spec", "credentialsRef", "name")
	if credentials != "metal-credentials" {
		t.Errorf("the PacketCluster reads its token from Secret %q, want metal-credentials", credentials)
	}
	for crs, want := range map[string][]string{
		cluster + "-ccm": {"Secret/" + credentials, "ConfigMap/" + cluster + "-ccm"},
		cluster + "-cni": {"ConfigMap/" + cluster + "-cni"},
	} {
		obj := find(t, objs, "ClusterResourceSet", crs)
		selector, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "clusterSelector", "matchLabels")
		for k, v := range selector {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s; the Cluster's labels are %v", id(obj), k, v, labels)
			}
		}
		if len(selector) == 0 {
			t.Errorf("%s selects no Cluster", id(obj))
		}
		var got []string
		for _, r := range items(obj.Object, "spec", "resources") {
			got = append(got, field(r, "kind")+"/"+field(r, "name"))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s applies %v, want %v", id(obj), got, want)
		}
	}
	manifest := field(find(t, objs, "ConfigMap", cluster+"-ccm").Object, "data", "ccm.yaml")
	ccm := find(t, decode(t, []byte(manifest)), "Deployment", "metal-vrf-ccm")
	containers := items(ccm.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 || field(containers[0], "image") != "ghcr.io/metal-vrf/metal-vrf-ccm:dev" {
		t.Errorf("the cloud controller manager's containers %v, want one with the default image", containers)
	}
	for _, obj := range objs {
		if obj.GetKind() == "Secret" {
			t.Errorf("the flavor renders %s: the token's Secret is the user's", id(obj))
		}
	}
}
