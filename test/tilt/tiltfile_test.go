package tilt

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// tiltfile runs Cluster API's Tiltfile, from the pinned module, with the
// part of Tilt's API it calls: what Tilt would do with the machine (build,
// push, apply) is recorded instead, for the test to check and do itself.
// Tilt's own checks that the Tiltfile can trip (a label Kubernetes would
// refuse, two resources or images of one name) are made here as Tilt makes
// them, so that they fail the run as they would fail `tilt up`.
type tiltfile struct {
	// dir is the Cluster API checkout the Tiltfile sits in: its relative
	// paths (tilt-settings.yaml, .tiltbuild/yaml) are read and written there.
	dir string
	// capi is the pinned Cluster API module's source, where tilt-prepare
	// finds the providers the Tiltfile defines itself.
	capi      string
	kustomize string

	// providers is the Tiltfile's providers map once it ran.
	providers map[string]map[string]any
	// builtIn are the providers the Tiltfile defines itself, as the
	// Tiltfile's providers map held them before it read tilt-provider.yaml.
	builtIn map[string]map[string]any
	// providerFiles are the tilt-provider files the Tiltfile read.
	providerFiles []string
	// prepared is what tilt-prepare did (prepare_test.go).
	prepared *prepared

	localResources map[string]localResource
	images         map[string]dockerBuild
	// yamls are the YAML streams k8s_yaml was given, in order.
	yamls     []k8sYAML
	resources map[string]k8sResource
}

type localResource struct {
	cmd    string
	deps   []string
	labels []string
}

type dockerBuild struct {
	context string
	only    string
	// syncs maps each live_update sync's local path to its path in the container.
	syncs map[string]string
	runs  []string
}

type k8sYAML struct {
	// source is the file, or the Tiltfile's read_file path for a blob.
	source string
	data   []byte
}

type k8sResource struct {
	workload string
	objects  []string
}

// blob is Tilt's type for file contents and command output: k8s_yaml takes
// a string for a path and a blob for YAML.
type blob struct {
	text   string
	source string
}

func (b blob) String() string        { return b.text }
func (b blob) Type() string          { return "blob" }
func (b blob) Freeze()               {}
func (b blob) Truth() starlark.Bool  { return len(b.text) > 0 }
func (b blob) Hash() (uint32, error) { return starlark.String(b.text).Hash() }

// run executes the Tiltfile. Tilt's Starlark dialect allows sets, top-level
// control flow, global reassignment and recursion
// (internal/tiltfile/starkit in Tilt v0.34.0).
func (tf *tiltfile) run() error {
	src, err := os.ReadFile(filepath.Join(tf.capi, "Tiltfile"))
	if err != nil {
		return err
	}
	tf.localResources = map[string]localResource{}
	tf.images = map[string]dockerBuild{}
	tf.resources = map[string]k8sResource{}
	thread := &starlark.Thread{
		Name:  "Tiltfile",
		Print: func(*starlark.Thread, string) {},
		Load: func(_ *starlark.Thread, module string) (starlark.StringDict, error) {
			if module != "ext://uibutton" {
				return nil, fmt.Errorf("the Tiltfile loads %s, which this test does not provide", module)
			}
			return starlark.StringDict{
				"cmd_button": noop("cmd_button"),
				"text_input": noop("text_input"),
				"location":   starlarkstruct.FromStringDict(starlark.String("location"), starlark.StringDict{}),
			}, nil
		},
	}
	opts := &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}
	globals, err := starlark.ExecFileOptions(opts, thread, filepath.Join(tf.capi, "Tiltfile"), src, tf.builtins())
	var evalErr *starlark.EvalError
	if errors.As(err, &evalErr) {
		return errors.New(evalErr.Backtrace())
	} else if err != nil {
		return err
	}
	tf.providers, err = providerConfigs(globals["providers"])
	return err
}

// providerConfigs reads the Tiltfile's providers map.
func providerConfigs(v starlark.Value) (map[string]map[string]any, error) {
	d, ok := v.(*starlark.Dict)
	if !ok {
		return nil, errors.New("the Tiltfile has no providers map")
	}
	g, err := toGo(d)
	if err != nil {
		return nil, err
	}
	providers := map[string]map[string]any{}
	for name, config := range g.(map[string]any) {
		providers[name], _ = config.(map[string]any)
	}
	return providers, nil
}

// path resolves a path of the Tiltfile, relative to its folder.
func (tf *tiltfile) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(tf.dir, p)
}

func (tf *tiltfile) builtins() starlark.StringDict {
	b := func(name string, fn func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error)) *starlark.Builtin {
		return starlark.NewBuiltin(name, fn)
	}
	return starlark.StringDict{
		"version_settings":   noop("version_settings"),
		"allow_k8s_contexts": noop("allow_k8s_contexts"),
		"default_registry":   noop("default_registry"),
		"trigger_mode":       noop("trigger_mode"),
		// TRIGGER_MODE_MANUAL is only passed back to Tilt.
		"TRIGGER_MODE_MANUAL": starlark.MakeInt(1),
		"fail": b("fail", func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return nil, fmt.Errorf("the Tiltfile failed: %v", args)
		}),
		"os": starlarkstruct.FromStringDict(starlark.String("os"), starlark.StringDict{
			// The test's own environment does not reach the Tiltfile: what it
			// reads (CAPI_KIND_CLUSTER_NAME, proxies) takes its default.
			"getenv": b("getenv", func(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
				var key string
				var def starlark.Value = starlark.None
				if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "key", &key, "default?", &def); err != nil {
					return nil, err
				}
				return def, nil
			}),
			"putenv": noop("putenv"),
			"path": starlarkstruct.FromStringDict(starlark.String("path"), starlark.StringDict{
				"exists": b("exists", func(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
					var p string
					if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "path", &p); err != nil {
						return nil, err
					}
					_, err := os.Stat(tf.path(p))
					return starlark.Bool(err == nil), nil
				}),
				"basename": b("basename", func(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
					var p string
					if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "path", &p); err != nil {
						return nil, err
					}
					return starlark.String(filepath.Base(p)), nil
				}),
			}),
		}),
		"shlex": starlarkstruct.FromStringDict(starlark.String("shlex"), starlark.StringDict{
			"quote": b("quote", func(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
				var s string
				if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "s", &s); err != nil {
					return nil, err
				}
				return starlark.String("'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"), nil
			}),
		}),
		"read_yaml":          b("read_yaml", tf.readYAML),
		"read_file":          b("read_file", tf.readFile),
		"decode_yaml_stream": b("decode_yaml_stream", decodeYAMLStream),
		"listdir":            b("listdir", tf.listdir),
		"include": b("include", func(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
			return nil, fmt.Errorf("include%v: the test's Cluster API checkout has no tilt.d", args)
		}),
		"local":          b("local", tf.local),
		"local_resource": b("local_resource", tf.localResource),
		"docker_build":   b("docker_build", tf.dockerBuild),
		"custom_build": b("custom_build", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return nil, errors.New("custom_build is the podman path; this test's engine is docker")
		}),
		"sync": b("sync", func(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var src, dst string
			if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "local_path", &src, "remote_path", &dst); err != nil {
				return nil, err
			}
			return starlarkstruct.FromStringDict(starlark.String("sync"), starlark.StringDict{"src": starlark.String(src), "dst": starlark.String(dst)}), nil
		}),
		"run": b("run", func(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var cmd string
			if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "cmd", &cmd); err != nil {
				return nil, err
			}
			return starlarkstruct.FromStringDict(starlark.String("run"), starlark.StringDict{"cmd": starlark.String(cmd)}), nil
		}),
		"port_forward": noop("port_forward"),
		"link":         noop("link"),
		"k8s_yaml":     b("k8s_yaml", tf.k8sYAML),
		"k8s_resource": b("k8s_resource", tf.k8sResource),
	}
}

// noop is a Tilt function whose effect (UI, settings of Tilt itself) this
// test has nothing to check of.
func noop(name string) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return starlark.None, nil
	})
}

func (tf *tiltfile) readYAML(thread *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var p string
	var def starlark.Value = starlark.None
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "paths", &p, "default?", &def); err != nil {
		return nil, err
	}
	if filepath.Base(p) == "tilt-provider.yaml" || filepath.Base(p) == "tilt-provider.json" {
		tf.providerFiles = append(tf.providerFiles, p)
		// The caller, load_provider_tilt_files, is about to add the file's
		// providers to the global providers map: what it holds now are the
		// Tiltfile's own, which ours must not replace.
		if tf.builtIn == nil {
			if caller, ok := thread.DebugFrame(1).Callable().(*starlark.Function); ok {
				var err error
				if tf.builtIn, err = providerConfigs(caller.Globals()["providers"]); err != nil {
					return nil, err
				}
			}
			if tf.builtIn == nil {
				return nil, errors.New("the Tiltfile read tilt-provider.yaml outside load_provider_tilt_files, or without a global providers map")
			}
		}
	}
	data, err := os.ReadFile(tf.path(p))
	if errors.Is(err, os.ErrNotExist) {
		return def, nil
	} else if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("read_yaml %s: %w", p, err)
	}
	return toStarlark(v)
}

func (tf *tiltfile) readFile(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var p string
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "file_path", &p); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(tf.path(p))
	if err != nil {
		return nil, err
	}
	return blob{text: string(data), source: p}, nil
}

func decodeYAMLStream(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "yaml", &v); err != nil {
		return nil, err
	}
	objs, err := decodeStream([]byte(text(v)))
	if err != nil {
		return nil, err
	}
	var list []starlark.Value
	for _, obj := range objs {
		sv, err := toStarlark(obj.Object)
		if err != nil {
			return nil, err
		}
		list = append(list, sv)
	}
	return starlark.NewList(list), nil
}

// listdir lists a folder's files by absolute path, as Tilt's does; a
// missing folder (the checkout's tilt.d, which git ignores) has none.
func (tf *tiltfile) listdir(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var p string
	var recursive bool
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "dir", &p, "recursive?", &recursive); err != nil {
		return nil, err
	}
	if recursive {
		return nil, errors.New("listdir(recursive=True) is not modelled by this test")
	}
	entries, err := os.ReadDir(tf.path(p))
	if errors.Is(err, os.ErrNotExist) {
		return starlark.NewList(nil), nil
	} else if err != nil {
		return nil, err
	}
	var files []starlark.Value
	for _, e := range entries {
		if !e.IsDir() {
			files = append(files, starlark.String(filepath.Join(tf.path(p), e.Name())))
		}
	}
	return starlark.NewList(files), nil
}

// local runs the commands the Tiltfile runs while it loads. Those that ask
// about the machine get the answers of a machine set up as Cluster API's
// book says (kubectl installed, Docker, a kind cluster with a local
// registry from `make kind-cluster`); `go env` runs; tilt-prepare is
// prepare_test.go's. Any other command fails the run, so that a Tiltfile
// that starts to depend on something new is noticed when CAPI is bumped.
func (tf *tiltfile) local(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var cmd string
	var quiet, echoOff bool
	var env *starlark.Dict
	var dir, commandBat string
	var stdin starlark.Value
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "command", &cmd, "quiet?", &quiet, "command_bat?", &commandBat,
		"echo_off?", &echoOff, "env?", &env, "dir?", &dir, "stdin?", &stdin); err != nil {
		return nil, err
	}
	switch {
	case cmd == "command -v kubectl || true":
		return blob{text: "/usr/local/bin/kubectl\n"}, nil
	case cmd == "docker version || podman version":
		return blob{text: "Server: Docker Engine - Community\n"}, nil
	case cmd == "go env GOOS" || cmd == "go env GOARCH":
		out, err := exec.Command("go", "env", strings.TrimPrefix(cmd, "go env ")).Output()
		return blob{text: string(out)}, err
	case cmd == "kubectl get cm -n kube-public local-registry-hosting || true":
		return blob{text: "NAME                     DATA   AGE\nlocal-registry-hosting   1      1m\n"}, nil
	case strings.HasPrefix(cmd, "mkdir -p "):
		// The binary's folder in the provider's tree: the test builds into
		// a folder of its own instead (see buildManager).
		return blob{}, nil
	case strings.HasPrefix(cmd, "make -B tilt-prepare && ./hack/tools/bin/tilt-prepare "):
		substitutions := map[string]string{}
		if env != nil {
			v, err := toGo(env)
			if err != nil {
				return nil, err
			}
			for k, val := range v.(map[string]any) {
				s, ok := val.(string)
				if !ok {
					return nil, fmt.Errorf("kustomize_substitutions: %s is %T, not a string", k, val)
				}
				substitutions[k] = s
			}
		}
		p, err := tf.prepare(strings.Fields(strings.TrimPrefix(cmd, "make -B tilt-prepare && ./hack/tools/bin/tilt-prepare ")), substitutions)
		if err != nil {
			return nil, fmt.Errorf("tilt-prepare: %w", err)
		}
		tf.prepared = p
		return blob{}, nil
	}
	return nil, fmt.Errorf("the Tiltfile runs %q, which this test does not know", cmd)
}

// tiltLabels checks labels as Tilt does (internal/tiltfile/value/label.go):
// each a qualified name and a label value, without a prefix.
func tiltLabels(v starlark.Value) ([]string, error) {
	if v == nil || v == starlark.None {
		return nil, nil
	}
	labels, err := stringList(v)
	if err != nil {
		return nil, err
	}
	for _, l := range labels {
		if errs := append(validation.IsQualifiedName(l), validation.IsValidLabelValue(l)...); len(errs) > 0 || strings.Contains(l, "/") {
			return nil, fmt.Errorf("invalid label %q: %s", l, strings.Join(errs, ", "))
		}
	}
	return labels, nil
}

func (tf *tiltfile) localResource(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var name string
	var cmd, deps, labels, env, triggerMode, allowParallel, autoInit starlark.Value
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "name", &name, "cmd?", &cmd, "deps?", &deps, "labels?", &labels,
		"allow_parallel?", &allowParallel, "env?", &env, "auto_init?", &autoInit, "trigger_mode?", &triggerMode); err != nil {
		return nil, err
	}
	if _, dup := tf.localResources[name]; dup {
		return nil, fmt.Errorf("local_resource named %q already exists", name)
	}
	r := localResource{}
	var err error
	if r.labels, err = tiltLabels(labels); err != nil {
		return nil, err
	}
	if s, ok := cmd.(starlark.String); ok {
		r.cmd = string(s)
	}
	if deps != nil {
		if r.deps, err = stringList(deps); err != nil {
			return nil, err
		}
	}
	tf.localResources[name] = r
	return starlark.None, nil
}

func (tf *tiltfile) dockerBuild(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var ref, context, dockerfile, target, only string
	var buildArgs *starlark.Dict
	var liveUpdate *starlark.List
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "ref", &ref, "context", &context, "dockerfile_contents?", &dockerfile,
		"build_args?", &buildArgs, "target?", &target, "only?", &only, "live_update?", &liveUpdate); err != nil {
		return nil, err
	}
	if _, dup := tf.images[ref]; dup {
		return nil, fmt.Errorf("image for ref %q has already been defined", ref)
	}
	d := dockerBuild{context: context, only: only, syncs: map[string]string{}}
	if liveUpdate != nil {
		for i := range liveUpdate.Len() {
			step, ok := liveUpdate.Index(i).(*starlarkstruct.Struct)
			if !ok {
				return nil, fmt.Errorf("live_update step %v", liveUpdate.Index(i))
			}
			switch step.Constructor().String() {
			case `"sync"`:
				src, _ := step.Attr("src")
				dst, _ := step.Attr("dst")
				d.syncs[text(src)] = text(dst)
			case `"run"`:
				cmd, _ := step.Attr("cmd")
				d.runs = append(d.runs, text(cmd))
			}
		}
	}
	tf.images[ref] = d
	return starlark.None, nil
}

func (tf *tiltfile) k8sYAML(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	var allowDuplicates bool
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "yaml", &v, "allow_duplicates?", &allowDuplicates); err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case blob:
		tf.yamls = append(tf.yamls, k8sYAML{source: v.source, data: []byte(v.text)})
	case starlark.String:
		data, err := os.ReadFile(tf.path(string(v)))
		if err != nil {
			return nil, err
		}
		tf.yamls = append(tf.yamls, k8sYAML{source: string(v), data: data})
	default:
		return nil, fmt.Errorf("k8s_yaml of a %s", v.Type())
	}
	return starlark.None, nil
}

func (tf *tiltfile) k8sResource(_ *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var workload, newName string
	var objects, labels, deps, portForwards, links, extraPodSelectors starlark.Value
	if err := starlark.UnpackArgs(fn.Name(), args, kwargs, "workload?", &workload, "new_name?", &newName, "objects?", &objects,
		"labels?", &labels, "resource_deps?", &deps, "port_forwards?", &portForwards, "links?", &links,
		"extra_pod_selectors?", &extraPodSelectors); err != nil {
		return nil, err
	}
	if _, dup := tf.resources[newName]; dup {
		return nil, fmt.Errorf("k8s_resource named %q already exists", newName)
	}
	r := k8sResource{workload: workload}
	if _, err := tiltLabels(labels); err != nil {
		return nil, err
	}
	if objects != nil {
		var err error
		if r.objects, err = stringList(objects); err != nil {
			return nil, err
		}
	}
	tf.resources[newName] = r
	return starlark.None, nil
}

// text is a string or a blob's text.
func text(v starlark.Value) string {
	if s, ok := starlark.AsString(v); ok {
		return s
	}
	if b, ok := v.(blob); ok {
		return b.text
	}
	return v.String()
}

// stringList is a list of strings.
func stringList(v starlark.Value) ([]string, error) {
	iterable, ok := v.(starlark.Iterable)
	if !ok {
		return nil, fmt.Errorf("%s is not a list", v.Type())
	}
	it := iterable.Iterate()
	defer it.Done()
	var out []string
	var item starlark.Value
	for it.Next(&item) {
		s, ok := starlark.AsString(item)
		if !ok {
			return nil, fmt.Errorf("%s in a list of strings", item.Type())
		}
		out = append(out, s)
	}
	return out, nil
}

// toStarlark turns decoded YAML into Starlark values, whole numbers into
// ints as Tilt's read_yaml does.
func toStarlark(v any) (starlark.Value, error) {
	switch v := v.(type) {
	case nil:
		return starlark.None, nil
	case bool:
		return starlark.Bool(v), nil
	case string:
		return starlark.String(v), nil
	case int64:
		return starlark.MakeInt64(v), nil
	case float64:
		if v == float64(int64(v)) {
			return starlark.MakeInt64(int64(v)), nil
		}
		return starlark.Float(v), nil
	case []any:
		list := make([]starlark.Value, 0, len(v))
		for _, item := range v {
			sv, err := toStarlark(item)
			if err != nil {
				return nil, err
			}
			list = append(list, sv)
		}
		return starlark.NewList(list), nil
	case map[string]any:
		d := starlark.NewDict(len(v))
		for k, item := range v {
			sv, err := toStarlark(item)
			if err != nil {
				return nil, err
			}
			if err := d.SetKey(starlark.String(k), sv); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("YAML value of type %T", v)
}

// toGo turns Starlark data back into Go values.
func toGo(v starlark.Value) (any, error) {
	switch v := v.(type) {
	case starlark.NoneType:
		return nil, nil
	case starlark.Bool:
		return bool(v), nil
	case starlark.String:
		return string(v), nil
	case starlark.Int:
		i, _ := v.Int64()
		return i, nil
	case *starlark.List:
		out := make([]any, 0, v.Len())
		for i := range v.Len() {
			item, err := toGo(v.Index(i))
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		return out, nil
	case *starlark.Dict:
		out := map[string]any{}
		for _, item := range v.Items() {
			k, ok := starlark.AsString(item[0])
			if !ok {
				return nil, fmt.Errorf("dict key %s", item[0])
			}
			val, err := toGo(item[1])
			if err != nil {
				return nil, err
			}
			out[k] = val
		}
		return out, nil
	}
	return nil, fmt.Errorf("starlark value of type %s", v.Type())
}
