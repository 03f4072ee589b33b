// Command imagebuild assembles the project's container images from static Go
// binaries, without a container engine, and pushes them to a registry.
//
//	imagebuild build -ref REF -out ARCHIVE -entrypoint /manager \
//	    -binary linux/amd64=PATH -binary linux/arm64=PATH [-label k=v ...]
//	imagebuild push -archive ARCHIVE [-ref REF] [-insecure]
//
// An image is one layer: the binary, a CA bundle, /etc/passwd and /etc/group
// naming the non-root user 65532, and an empty /tmp; no shell, no package
// manager. Every timestamp is SOURCE_DATE_EPOCH and every entry is written in
// a fixed order, so the same binaries give the same digests. The archive is
// an OCI image layout in a tar file: podman (oci-archive:) and containerd
// (ctr images import) read it.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonRoot is the user the images run as; the manifests' runAsUser matches it.
const nonRoot = "65532"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: imagebuild build|push [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// keyValues collects repeated -flag key=value arguments in order.
type keyValues [][2]string

func (kv *keyValues) String() string { return fmt.Sprint(*kv) }

func (kv *keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	*kv = append(*kv, [2]string{k, v})
	return nil
}

func build(args []string) error {
	fset := flag.NewFlagSet("build", flag.ExitOnError)
	ref := fset.String("ref", "", "the image's name, recorded in the archive (registry/repository:tag)")
	out := fset.String("out", "", "the OCI archive to write")
	entrypoint := fset.String("entrypoint", "/manager", "where the binary goes in the image; the image runs it")
	caBundle := fset.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates to put at /etc/ssl/certs/ca-certificates.crt")
	var binaries, labels keyValues
	fset.Var(&binaries, "binary", "os/arch=path of a static binary, once per platform")
	fset.Var(&labels, "label", "key=value of an OCI label (repeatable)")
	_ = fset.Parse(args)
	if *ref == "" || *out == "" || len(binaries) == 0 {
		return errors.New("build needs -ref, -out and at least one -binary")
	}
	if _, err := name.ParseReference(*ref); err != nil {
		return fmt.Errorf("-ref %q: %w", *ref, err)
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	cas, err := os.ReadFile(*caBundle)
	if err != nil {
		return fmt.Errorf("-ca-bundle: %w", err)
	}
	annotations := map[string]string{}
	for _, l := range labels {
		annotations[l[0]] = l[1]
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range binaries {
		platform, err := v1.ParsePlatform(b[0])
		if err != nil {
			return fmt.Errorf("-binary %s: %w", b[0], err)
		}
		img, err := platformImage(*platform, b[1], *entrypoint, cas, annotations, created)
		if err != nil {
			return fmt.Errorf("-binary %s=%s: %w", b[0], b[1], err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: platform},
		})
	}
	idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	return writeArchive(*out, *ref, idx, created)
}

// sourceDateEpoch is the time every entry and config carries: the commit's
// time, given by the Makefile, so that a rebuild of a commit is identical.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set (the Makefile sets it from the commit)")
	}
	secs, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func platformImage(platform v1.Platform, binary, entrypoint string, cas []byte, labels map[string]string, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	files := []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:" + nonRoot + ":\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + nonRoot + ":" + nonRoot + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: cas},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, owner: 65532},
		{name: "tmp/", mode: 0o1777},
		{name: strings.TrimPrefix(entrypoint, "/"), mode: 0o755, data: bin},
	}
	layerTar, err := tarFiles(files, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "imagebuild " + entrypoint},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	cfg.Created = v1.Time{Time: created}
	cfg.Config.User = nonRoot + ":" + nonRoot
	cfg.Config.Entrypoint = []string{entrypoint}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cfg.Config.Labels = labels
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

type file struct {
	name  string // relative; a trailing slash makes a directory
	mode  int64
	owner int
	data  []byte
}

// tarFiles writes files as a tar stream with fixed owners and times, sorted
// by name so that the order never depends on the caller.
func tarFiles(files []file, modTime time.Time) ([]byte, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.owner,
			Gid:     f.owner,
			ModTime: modTime,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(f.name, "/") {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes idx as an OCI image layout and tars it into out. The
// layout's index.json names the image twice: containerd's import reads
// io.containerd.image.name, the OCI tools the tag in ref.name.
func writeArchive(out, ref string, idx v1.ImageIndex, created time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          parsed.Name(),
		"org.opencontainers.image.ref.name": parsed.Identifier(),
	})); err != nil {
		return err
	}
	var files []file
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			files = append(files, file{name: rel + "/", mode: 0o755})
			return nil
		}
		data, err := os.ReadFile(path)
		files = append(files, file{name: rel, mode: 0o644, data: data})
		return err
	})
	if err != nil {
		return err
	}
	archive, err := tarFiles(files, created)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, archive, 0o644); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", out, parsed.Name(), digest)
	return os.Rename(tmp, out)
}

func push(args []string) error {
	fset := flag.NewFlagSet("push", flag.ExitOnError)
	archive := fset.String("archive", "", "an OCI archive written by build")
	ref := fset.String("ref", "", "where to push (registry/repository:tag); the name the archive records when empty")
	insecure := fset.Bool("insecure", false, "talk plain HTTP to the registry (a local one)")
	_ = fset.Parse(args)
	if *archive == "" {
		return errors.New("push needs -archive")
	}
	dir, err := os.MkdirTemp("", "imagebuild-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := untar(*archive, dir); err != nil {
		return fmt.Errorf("-archive %s: %w", *archive, err)
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return err
	}
	manifest, err := root.IndexManifest()
	if err != nil {
		return err
	}
	if len(manifest.Manifests) != 1 {
		return fmt.Errorf("-archive %s holds %d images, want 1", *archive, len(manifest.Manifests))
	}
	idx, err := root.ImageIndex(manifest.Manifests[0].Digest)
	if err != nil {
		return err
	}
	if *ref == "" {
		*ref = manifest.Manifests[0].Annotations["io.containerd.image.name"]
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	target, err := name.ParseReference(*ref, opts...)
	if err != nil {
		return fmt.Errorf("-ref %q: %w", *ref, err)
	}
	if err := remote.WriteIndex(target, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return err
	}
	digest, _ := idx.Digest()
	fmt.Printf("pushed %s@%s\n", target.Name(), digest)
	return nil
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.Clean("/"+hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected entry type %c", hdr.Name, hdr.Typeflag)
		}
	}
}
