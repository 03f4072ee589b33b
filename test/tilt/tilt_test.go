// Package tilt checks tilt-provider.yaml, which Cluster API's Tiltfile
// reads to build, deploy and live-update both providers
// (docs/contributing.md, "Develop with Tilt"). No container engine runs
// here, so `tilt up` cannot; instead the test runs the Tiltfile of the
// pinned Cluster API module, with Tilt's functions recorded
// (tiltfile_test.go) and tilt-prepare's rendering redone
// (prepare_test.go), over the tilt-settings.yaml docs/contributing.md
// shows. Then it does what Tilt would do with what the Tiltfile asked for:
// it builds each manager with the Tiltfile's own `go build` command line,
// checks that the files the live update watches are those the manager is
// built from, that the image Tilt builds and the binary it syncs reach the
// manager's container, and applies every object the Tiltfile deploys to a
// real kube-apiserver.
package tilt

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// repoName is the folder docs/contributing.md clones this repository into,
// beside Cluster API's checkout.
const repoName = "cluster-api-metal-vrf"

func TestTiltfileBuildsAndDeploysTheProviders(t *testing.T) {
	kustomize, err := testenv.Tool("KUSTOMIZE", "kustomize")
	if err != nil {
		t.Fatal(err)
	}
	root := strings.TrimSpace(string(run(t, "", "go", "list", "-m", "-f", "{{.Dir}}")))
	capi := strings.TrimSpace(string(run(t, root, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api")))
	ours := readProviders(t, root, capi)

	// A Cluster API checkout with the documented settings, this repository
	// cloned beside it.
	tf := &tiltfile{dir: t.TempDir(), capi: capi, kustomize: kustomize}
	settings := documentedSettings(t, root)
	if err := os.WriteFile(filepath.Join(tf.dir, "tilt-settings.yaml"), settings, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tf.run(); err != nil {
		t.Fatalf("running Cluster API's Tiltfile: %v", err)
	}
	if want := []string{filepath.Join(root, "tilt-provider.yaml")}; !reflect.DeepEqual(tf.providerFiles, want) {
		t.Fatalf("the Tiltfile read %v, want %v", tf.providerFiles, want)
	}

	deployed := map[string][]*unstructured.Unstructured{}
	for _, y := range tf.yamls {
		objs, err := decodeStream(y.data)
		if err != nil {
			t.Fatalf("k8s_yaml of %s: %v", y.source, err)
		}
		deployed[y.source] = objs
	}
	checkObjectFragments(t, tf, deployed)

	binaries := map[string]string{}
	for _, name := range ours {
		t.Run(name, func(t *testing.T) {
			binaries[name] = checkProvider(t, tf, root, name, deployed)
		})
	}
	// Each provider's binary, and so its image, is its own.
	for a, pa := range binaries {
		for b, pb := range binaries {
			if a < b && pa == pb {
				t.Errorf("providers %s and %s both build and sync %s: each image would get whichever was built last", a, b, pa)
			}
		}
	}
	checkTemplates(t, tf, root)
	if t.Failed() {
		return
	}
	apply(t, tf, deployed)
}

// readProviders reads tilt-provider.yaml: every key of each provider's
// config must be one the Tiltfile or tilt-prepare reads, so that a
// misspelt key fails here rather than being silently ignored. It returns
// the providers' names.
func readProviders(t *testing.T, root, capi string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "tilt-provider.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var providers []struct {
		Name   string         `json:"name"`
		Config map[string]any `json:"config"`
	}
	if err := yaml.UnmarshalStrict(data, &providers); err != nil {
		t.Fatalf("tilt-provider.yaml: %v", err)
	}
	tiltfile, err := os.ReadFile(filepath.Join(capi, "Tiltfile"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, re := range []string{`p\.get\("(\w+)"`, `provider_config\["(\w+)"\]`, `"(\w+)" not in provider_config`} {
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(tiltfile), -1) {
			known[m[1]] = true
		}
	}
	typ := reflect.TypeFor[tiltProviderConfig]()
	for i := range typ.NumField() {
		if tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); tag != "" {
			known[tag] = true
		}
	}
	var names []string
	for _, p := range providers {
		for key := range p.Config {
			if !known[key] {
				t.Errorf("tilt-provider.yaml: provider %s: Cluster API's Tiltfile and tilt-prepare read no key %q", p.Name, key)
			}
		}
		names = append(names, p.Name)
	}
	if len(names) != 2 {
		t.Fatalf("tilt-provider.yaml names providers %v, want both of this repository's", names)
	}
	return names
}

// documentedSettings returns the tilt-settings.yaml of docs/contributing.md,
// its path to this repository made the test's.
func documentedSettings(t *testing.T, root string) []byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "contributing.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Develop with Tilt\n")
	if !ok {
		t.Fatal(`docs/contributing.md has no section "## Develop with Tilt"`)
	}
	_, block, ok := strings.Cut(section, "\n```yaml\n# tilt-settings.yaml\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatal("docs/contributing.md shows no tilt-settings.yaml (a ```yaml block starting with # tilt-settings.yaml)")
	}
	rel := "../" + repoName
	if !strings.Contains(block, rel) {
		t.Fatalf("the documented tilt-settings.yaml does not name this repository as %s", rel)
	}
	return []byte(strings.ReplaceAll(block, rel, root))
}

// checkProvider checks one of our providers as the Tiltfile set it up, and
// returns the path of the binary it builds and syncs.
func checkProvider(t *testing.T, tf *tiltfile, root, name string, deployed map[string][]*unstructured.Unstructured) string {
	if _, ok := tf.builtIn[name]; ok {
		t.Fatalf("the Tiltfile defines a provider %s itself: ours would replace it", name)
	}
	if tf.prepared == nil || !slices.Contains(tf.prepared.settings.EnableProviders, name) {
		t.Fatalf("the documented tilt-settings.yaml does not enable %s", name)
	}
	p := tf.providers[name]
	label, _ := p["label"].(string)
	for builtIn, config := range tf.builtIn {
		if l, _ := config["label"].(string); strings.EqualFold(l, label) {
			t.Errorf("label %s is the Tiltfile's %s's: the two would share resource names", label, builtIn)
		}
	}
	context, _ := p["context"].(string)
	image, _ := p["image"].(string)

	// The binary: the local_resource's command, as Tilt runs it, building
	// into a folder of the test's instead of the provider's tree.
	lr, ok := tf.localResources[strings.ToLower(label)+"_binary"]
	if !ok {
		t.Fatalf("the Tiltfile made no local_resource %s_binary", strings.ToLower(label))
	}
	output := buildManager(t, tf, lr.cmd, context)
	goMain, _ := p["go_main"].(string)
	checkLiveReloadDeps(t, root, context, goMain, lr.deps, output)

	// The image and its live update: the synced file is the one built.
	build, ok := tf.images[image]
	if !ok {
		t.Fatalf("the Tiltfile made no docker_build of %s", image)
	}
	if dst := build.syncs[output]; dst != "/"+binaryName {
		t.Errorf("live_update syncs %v; want %s synced to /%s", build.syncs, output, binaryName)
	}
	if build.context != filepath.Dir(output)+"/" || build.only != filepath.Base(output) {
		t.Errorf("docker_build takes %s from %s; want %s", build.only, build.context, output)
	}
	if !slices.Contains(build.runs, "sh /restart.sh") {
		t.Errorf("live_update runs %v, not Tilt's restart wrapper", build.runs)
	}

	// The Deployment: the Tiltfile's workload for the provider, holding the
	// one container whose image Tilt replaces with the image it built (it
	// matches by name, and by tag too when the image it builds has one);
	// that container is the one tilt-prepare runs under the restart wrapper.
	res, ok := tf.resources[strings.ToLower(label)+"_controller"]
	if !ok {
		t.Fatalf("the Tiltfile made no k8s_resource %s_controller", strings.ToLower(label))
	}
	rendered := deployed[fmt.Sprintf("./.tiltbuild/yaml/%s.provider.yaml", name)]
	deployment := find(rendered, "Deployment", res.workload)
	if deployment == nil || res.workload == "" {
		t.Fatalf("the workload %q of %s_controller is not a Deployment of %s's components", res.workload, strings.ToLower(label), name)
	}
	selector, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		t.Fatalf("image %s: %v", image, err)
	}
	_, exact := selector.(reference.NamedTagged)
	var matches []string
	var seen []string
	for source, objs := range deployed {
		for _, obj := range objs {
			for _, c := range containers(obj) {
				img, _ := c["image"].(string)
				seen = append(seen, img)
				ref, err := reference.ParseNormalizedNamed(img)
				if err != nil {
					t.Errorf("%s in %s: image %q: %v", id(obj), source, img, err)
					continue
				}
				if ref.Name() != selector.Name() || (exact && ref.String() != selector.String()) {
					continue
				}
				matches = append(matches, fmt.Sprintf("%s/%s", id(obj), c["name"]))
				if obj != deployment || c["name"] != containerName {
					t.Errorf("Tilt would put %s into %s's container %s, not the manager", image, id(obj), c["name"])
				} else if !reflect.DeepEqual(c["command"], []any{"sh", "/start.sh", "/" + binaryName}) {
					t.Errorf("the manager runs %v, not under Tilt's restart wrapper: the live update would not restart it", c["command"])
				}
			}
		}
	}
	if len(matches) == 0 {
		slices.Sort(seen)
		t.Errorf("Tilt would build %s and deploy it nowhere: the deployed images are %v", image, slices.Compact(seen))
	}

	// The Provider object, as clusterctl would have recorded it: under
	// the name users give clusterctl (so tilt-settings.yaml and
	// clusterctl init name the providers alike), at a version
	// metadata.yaml maps to Cluster API's contract.
	var provider *unstructured.Unstructured
	for _, obj := range rendered {
		if obj.GetKind() == "Provider" {
			provider = obj
		}
	}
	if provider == nil {
		t.Fatal("tilt-prepare wrote no Provider")
	}
	if got, _, _ := unstructured.NestedString(provider.Object, "providerName"); got != name {
		t.Errorf("the components make provider %s (label %s), not %s", got, provider.GetName(), name)
	}
	version, _, _ := unstructured.NestedString(provider.Object, "version")
	checkVersion(t, root, version)
	return output
}

// buildManager runs the Tiltfile's build command for the provider, with
// its output moved into a folder of the test's, and returns where the
// Tiltfile's command would have written the binary.
func buildManager(t *testing.T, tf *tiltfile, cmd, context string) string {
	prefix := "cd " + context + ";"
	m := regexp.MustCompile(` -o (\S+) `).FindAllStringSubmatchIndex(cmd, -1)
	if !strings.HasPrefix(cmd, prefix) || len(m) != 1 {
		t.Fatalf("the binary's command %q is not `cd <context>;... go build ... -o <binary> ...`", cmd)
	}
	output := filepath.Join(context, cmd[m[0][2]:m[0][3]])
	if filepath.Base(output) != binaryName {
		t.Fatalf("the command builds %s, not %s", output, binaryName)
	}
	binary := filepath.Join(t.TempDir(), binaryName)
	moved := cmd[:m[0][2]] + binary + cmd[m[0][3]:]
	start := time.Now()
	// Tilt runs a local_resource's command with sh -c in the Tiltfile's folder.
	run(t, tf.dir, "sh", "-c", moved)
	t.Logf("built %s in %s: %s", binary, time.Since(start).Round(time.Second), moved)
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatalf("the built manager: %v", err)
	}
	defer f.Close()
	// The image is Linux, and the binary is copied alone into it.
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the built manager is linked dynamically")
		}
	}
	return output
}

// checkLiveReloadDeps checks that the files Tilt watches are exactly what
// the manager is built from: every Go and embedded file of the module's
// packages go_main imports (from the context, where the build runs), go.mod and go.sum, lies in one of them
// (else an edit there would not reach the cluster); each of them holds
// one (else an edit there would rebuild for nothing); none holds the
// binary (else each build would start the next).
func checkLiveReloadDeps(t *testing.T, root, context, goMain string, deps []string, output string) {
	sources := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	listed := run(t, context, "go", "list", "-deps", "-json=Dir,GoFiles,EmbedFiles,Module", goMain)
	decoder := json.NewDecoder(bytes.NewReader(listed))
	for decoder.More() {
		var pkg struct {
			Dir                 string
			GoFiles, EmbedFiles []string
			Module              *struct{ Main bool }
		}
		if err := decoder.Decode(&pkg); err != nil {
			t.Fatal(err)
		}
		if pkg.Module == nil || !pkg.Module.Main {
			continue
		}
		for _, f := range append(pkg.GoFiles, pkg.EmbedFiles...) {
			sources = append(sources, filepath.Join(pkg.Dir, f))
		}
	}
	under := func(path, dep string) bool {
		rel, err := filepath.Rel(dep, path)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	var watched []string
	for _, d := range deps {
		dep := filepath.Clean(d)
		watched = append(watched, dep)
		if _, err := os.Stat(dep); err != nil {
			t.Errorf("live_reload_deps: %v", err)
		}
		if under(output, dep) {
			t.Errorf("live_reload_deps: %s holds the binary %s: every build would trigger the next", d, output)
		}
		if !slices.ContainsFunc(sources, func(s string) bool { return under(s, dep) }) {
			t.Errorf("live_reload_deps: %s holds nothing the manager is built from", d)
		}
	}
	for _, s := range sources {
		if !slices.ContainsFunc(watched, func(dep string) bool { return under(s, dep) }) {
			rel, _ := filepath.Rel(context, s)
			t.Errorf("live_reload_deps: nothing watches %s, which the manager is built from", rel)
		}
	}
}

// checkVersion checks that metadata.yaml has a release series of version.
func checkVersion(t *testing.T, root, version string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var metadata clusterctlv1.Metadata
	if err := yaml.Unmarshal(data, &metadata); err != nil {
		t.Fatal(err)
	}
	var major, minor int32
	if _, err := fmt.Sscanf(version, "v%d.%d.", &major, &minor); err != nil {
		t.Fatalf("the Provider's version %q: %v", version, err)
	}
	for _, s := range metadata.ReleaseSeries {
		if s.Major == major && s.Minor == minor {
			return
		}
	}
	t.Errorf("the Provider's version %s is of no release series of metadata.yaml", version)
}

// checkTemplates checks that the documented template_dirs give the
// infrastructure provider's cluster templates a button each in Tilt's UI:
// a local_resource labelled <label>.templates per cluster-template*.yaml.
func checkTemplates(t *testing.T, tf *tiltfile, root string) {
	t.Helper()
	templates, err := filepath.Glob(filepath.Join(root, "templates", "cluster-template*.yaml"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("no cluster templates in templates/ (%v)", err)
	}
	label, _ := tf.providers["packet"]["label"].(string)
	buttons := 0
	for _, lr := range tf.localResources {
		if slices.Contains(lr.labels, label+".templates") {
			buttons++
		}
	}
	if buttons != len(templates) {
		t.Errorf("Tilt's UI would offer %d of the %d cluster templates: check template_dirs in docs/contributing.md", buttons, len(templates))
	}
}

// checkObjectFragments checks that each object a k8s_resource names is
// deployed: Tilt refuses to start otherwise.
func checkObjectFragments(t *testing.T, tf *tiltfile, deployed map[string][]*unstructured.Unstructured) {
	t.Helper()
	for name, res := range tf.resources {
		for _, fragment := range res.objects {
			parts := strings.Split(fragment, ":")
			found := false
			for _, objs := range deployed {
				for _, obj := range objs {
					ns := obj.GetNamespace()
					if ns == "" {
						ns = "default"
					}
					found = found || (parts[0] == obj.GetName() && (len(parts) < 2 || strings.EqualFold(parts[1], obj.GetKind())) &&
						(len(parts) < 3 || parts[2] == ns))
				}
			}
			if !found {
				t.Errorf("k8s_resource %s names %s, which nothing deploys", name, fragment)
			}
		}
	}
}

// apply applies every object the Tiltfile deploys to a new API server, as
// Tilt does: server-side, Namespaces and CRDs first, the webhook
// configurations last (nothing serves them here). Two providers deploying
// one object differently would overwrite each other: that fails too.
func apply(t *testing.T, tf *tiltfile, deployed map[string][]*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	env, err := testenv.Start(testenv.Options{Empty: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// tilt-prepare installs cert-manager; its Certificate and Issuer CRDs
	// let the API server check our objects of those kinds (no cert-manager
	// runs to issue anything).
	if !tf.prepared.certManager {
		t.Fatal("the documented settings do not install cert-manager, which the IPAM webhook's certificate needs")
	}
	if err := testenv.InstallCertManagerCRDs(env.Config); err != nil {
		t.Fatal(err)
	}

	byID := map[string]*unstructured.Unstructured{}
	sourceOf := map[string]string{}
	var objs []*unstructured.Unstructured
	for source, list := range deployed {
		for _, obj := range list {
			key := id(obj)
			if prev, ok := byID[key]; ok {
				if !reflect.DeepEqual(prev.Object, obj.Object) {
					t.Errorf("%s is deployed by both %s and %s, differently", key, sourceOf[key], source)
				}
				continue
			}
			byID[key], sourceOf[key] = obj, source
			objs = append(objs, obj)
		}
	}
	rank := func(o *unstructured.Unstructured) int {
		switch o.GetKind() {
		case "Namespace":
			return 0
		case "CustomResourceDefinition":
			return 1
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			return 3
		}
		return 2
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	for i, obj := range objs {
		// The CRDs must be served before their objects are applied.
		if rank(obj) == 2 && (i == 0 || rank(objs[i-1]) < 2) {
			waitEstablished(ctx, t, env.Client, objs[:i])
		}
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("tilt"), client.ForceOwnership); err != nil {
			t.Errorf("the API server refused %s (from %s): %v", id(obj), sourceOf[id(obj)], err)
		}
	}
	t.Logf("applied %d objects", len(objs))
}

func waitEstablished(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, obj := range objs {
		if obj.GetKind() != "CustomResourceDefinition" {
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(obj.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKey{Name: obj.GetName()}, crd); err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, cond := range conditions {
				if m, _ := cond.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not established: %v", obj.GetName(), err)
		}
	}
}

// containers are the containers of an object's Pod template.
func containers(obj *unstructured.Unstructured) []map[string]any {
	list, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	init, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "initContainers")
	var out []map[string]any
	for _, c := range append(list, init...) {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// find returns the object of a kind and name that carries a provider
// label, as the Tiltfile's find_object_name looks for it.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, obj := range objs {
		if _, ok := obj.GetLabels()[clusterv1.ProviderNameLabel]; ok && obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	return nil
}

func id(obj *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", obj.GroupVersionKind().GroupKind(), obj.GetNamespace(), obj.GetName())
}

func decodeStream(data []byte) ([]*unstructured.Unstructured, error) {
	return testenv.DecodeObjects(bytes.NewReader(data))
}

// run runs a program with the test's environment in dir and returns its
// standard output.
func run(t *testing.T, dir string, name string, args ...string) []byte {
	t.Helper()
	out, err := testenv.RunTool(dir, nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
