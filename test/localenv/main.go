// Command localenv is what `make run` starts: the whole project on one
// machine with nothing installed. It runs a real kube-apiserver and etcd
// (envtest) with CAPI's and the project's CRDs and webhooks, the Equinix Metal
// API simulator seeded with a small world, and the IPAM manager; applies the
// samples in config/samples; prints what every claim got; and writes a
// kubeconfig so kubectl can look around. With --once it exits after printing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// simulatorKey is the API key the simulator accepts, on top of the seed's.
const simulatorKey = "localenv-token"

func main() {
	once := flag.Bool("once", false, "exit after printing the claims (for CI and smoke tests)")
	kubeconfig := flag.String("kubeconfig-out", "bin/localenv/kubeconfig", "where to write a kubeconfig for kubectl (relative to the repository root)")
	verbose := flag.Bool("v", false, "show the managers' logs")
	flag.Parse()

	logs := io.Discard
	if *verbose {
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs)))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *once, *kubeconfig, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "localenv:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, once bool, kubeconfig string, out io.Writer) (err error) {
	fmt.Fprintln(out, "Starting kube-apiserver and etcd ...")
	env, err := testenv.Start(testenv.Options{Webhooks: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()

	simURL, stopSim, err := startSimulator(ctx, filepath.Join(env.Root, "shared", "metal", "sim", "testdata", "example-seed.yaml"))
	if err != nil {
		return err
	}
	defer stopSim()

	stopIPAM, err := env.StartIPAM(ctx, env.IPAMOptions(4))
	if err != nil {
		return fmt.Errorf("starting the IPAM manager: %w", err)
	}
	defer stopIPAM()

	samples := filepath.Join(env.Root, "config", "samples", "ipam")
	claims, err := apply(ctx, env.Client, samples)
	if err != nil {
		return err
	}
	if err := printClaims(ctx, env.Client, claims, out); err != nil {
		return err
	}

	if !filepath.IsAbs(kubeconfig) {
		kubeconfig = filepath.Join(env.Root, kubeconfig)
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	fmt.Fprintf(out, "\nkubeconfig: %s\n  kubectl --kubeconfig %s get metalvrfippools,globalmetalvrfippools,ipaddressclaims,ipaddresses.ipam.cluster.x-k8s.io -A\n", kubeconfig, kubeconfig)
	fmt.Fprintf(out, "Metal API simulator: %s (METAL_API_KEY=%s; see docs/metal.md)\n", simURL, simulatorKey)
	if once {
		return nil
	}
	fmt.Fprintln(out, "\nRunning until interrupted (Ctrl-C).")
	<-ctx.Done()
	return nil
}

// startSimulator serves the Metal API simulator on a free loopback port.
func startSimulator(ctx context.Context, seedPath string) (url string, stop func(), err error) {
	seed, err := sim.LoadSeed(seedPath)
	if err != nil {
		return "", nil, err
	}
	server := sim.New(sim.Options{APIKeys: []string{simulatorKey}, DeviceProvisionDelay: 10 * time.Second, BatchDelay: 2 * time.Second})
	if err := server.Seed(seed); err != nil {
		return "", nil, fmt.Errorf("seeding the simulator from %s: %w", seedPath, err)
	}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	httpServer := &http.Server{Handler: server, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = httpServer.Serve(listener) }()
	return "http://" + listener.Addr().String(), func() { _ = httpServer.Close() }, nil
}

// apply creates every object of the YAML files in dir (the kustomization
// aside) and returns the IPAddressClaims among them.
func apply(ctx context.Context, c client.Client, dir string) ([]client.ObjectKey, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var claims []client.ObjectKey
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		objects, err := readObjects(file)
		if err != nil {
			return nil, err
		}
		for _, obj := range objects {
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("applying %s %s from %s: %w", obj.GetKind(), obj.GetName(), file, err)
			}
			if obj.GetKind() == "IPAddressClaim" {
				claims = append(claims, client.ObjectKeyFromObject(obj))
			}
		}
	}
	return claims, nil
}

// readObjects decodes the documents of a multi-document YAML file.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	decoder := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objects []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(obj.Object) > 0 {
			objects = append(objects, obj)
		}
	}
}

// printClaims waits for every claim to be bound and prints what it got.
func printClaims(ctx context.Context, c client.Client, claims []client.ObjectKey, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	table := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "\nCLAIM\tPOOL\tADDRESS\tPREFIX\tGATEWAY")
	for _, key := range claims {
		address, claim, err := waitBound(ctx, c, key)
		if err != nil {
			return err
		}
		fmt.Fprintf(table, "%s\t%s/%s\t%s\t%d\t%s\n", key, claim.Spec.PoolRef.Kind, claim.Spec.PoolRef.Name,
			address.Spec.Address, *address.Spec.Prefix, address.Spec.Gateway)
	}
	return table.Flush()
}

// waitBound waits until the claim names its IPAddress and returns both.
func waitBound(ctx context.Context, c client.Client, key client.ObjectKey) (*ipamv1.IPAddress, *ipamv1.IPAddressClaim, error) {
	claim := &ipamv1.IPAddressClaim{}
	address := &ipamv1.IPAddress{}
	for {
		if err := c.Get(ctx, key, claim); err == nil && claim.Status.AddressRef.Name != "" {
			err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: claim.Status.AddressRef.Name}, address)
			if err == nil {
				return address, claim, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("claim %s was not bound: %w", key, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
