// Command localenv is what `make run` starts: the whole project on one
// machine with nothing installed. It runs a real kube-apiserver and etcd
// (envtest) with CAPI's and the project's CRDs and webhooks, the Equinix Metal
// API simulator seeded with a small world, and both managers (IPAM and
// CAPP); applies the sample pools and claims of config/samples/ipam and the
// demo machine of config/samples/localenv; prints what every claim and the
// machine's networks got; and writes a kubeconfig so kubectl can look
// around. With --once it exits after printing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	cappcontrollers "github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
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
	env, err := testenv.Start(testenv.Options{Webhooks: true, CAPPCRDs: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()

	simulator, err := simtest.Start(sim.Options{APIKeys: []string{simulatorKey}, DeviceProvisionDelay: 10 * time.Second, BatchDelay: 2 * time.Second}, nil)
	if err != nil {
		return fmt.Errorf("starting the Metal API simulator: %w", err)
	}
	defer simulator.Close()
	simURL := simulator.URL

	stopIPAM, err := env.StartIPAM(ctx, env.IPAMOptions(4))
	if err != nil {
		return fmt.Errorf("starting the IPAM manager: %w", err)
	}
	defer stopIPAM()
	stopCAPP, err := env.StartCAPP(ctx, env.CAPPOptions(2, ""))
	if err != nil {
		return fmt.Errorf("starting the CAPP manager: %w", err)
	}
	defer stopCAPP()

	applied, err := apply(ctx, env.Client, simURL, filepath.Join(env.Root, "config", "samples", "ipam"), filepath.Join(env.Root, "config", "samples", "localenv"))
	if err != nil {
		return err
	}
	if err := printClaims(ctx, env.Client, applied["IPAddressClaim"], out); err != nil {
		return err
	}
	userData, err := printMachines(ctx, env.Client, applied["PacketMachine"], out)
	if err != nil {
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
	for _, secret := range userData {
		fmt.Fprintf(out, "  kubectl --kubeconfig %s get secret -n %s %s -o jsonpath='{.data.%s}' | base64 -d   # rendered user-data\n",
			kubeconfig, secret.Namespace, secret.Name, cappcontrollers.UserDataKey)
	}
	fmt.Fprintf(out, "Metal API simulator: %s (METAL_API_KEY=%s; see docs/metal.md)\n", simURL, simulatorKey)
	if once {
		return nil
	}
	fmt.Fprintln(out, "\nRunning until interrupted (Ctrl-C).")
	<-ctx.Done()
	return nil
}

// apply creates every object of the YAML files in dirs (kustomizations
// aside) and returns their keys by kind. It points the samples' Metal
// credentials at the simulator, and plays CAPI's Machine controller for the
// PacketMachines: each is owned by the Machine of its name.
func apply(ctx context.Context, c client.Client, simURL string, dirs ...string) (map[string][]client.ObjectKey, error) {
	applied := map[string][]client.ObjectKey{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		for _, file := range files {
			if filepath.Base(file) == "kustomization.yaml" {
				continue
			}
			objects, err := testenv.ReadObjects(file)
			if err != nil {
				return nil, err
			}
			for _, obj := range objects {
				if err := create(ctx, c, obj, simURL); err != nil {
					return nil, fmt.Errorf("applying %s %s from %s: %w", obj.GetKind(), obj.GetName(), file, err)
				}
				applied[obj.GetKind()] = append(applied[obj.GetKind()], client.ObjectKeyFromObject(obj))
			}
		}
	}
	return applied, nil
}

// create creates obj, after pointing a credentials Secret at the simulator
// or giving a PacketMachine its owning Machine.
func create(ctx context.Context, c client.Client, obj *unstructured.Unstructured, simURL string) error {
	if _, found, _ := unstructured.NestedString(obj.Object, "stringData", "baseURL"); found && obj.GetKind() == "Secret" {
		if err := unstructured.SetNestedField(obj.Object, simURL, "stringData", "baseURL"); err != nil {
			return err
		}
	}
	if obj.GetKind() == "PacketMachine" {
		machine := &clusterv1.Machine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), machine); err != nil {
			return fmt.Errorf("reading its Machine: %w", err)
		}
		obj.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
		}})
	}
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
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

// printMachines waits until every PacketMachine's networks have their
// addresses and prints them; it returns the Secrets holding the rendered
// user-data.
func printMachines(ctx context.Context, c client.Client, machines []client.ObjectKey, out io.Writer) ([]client.ObjectKey, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	table := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "\nPACKETMACHINE\tINTERFACE\tADDRESS\tGATEWAY\tCLAIM")
	var secrets []client.ObjectKey
	for _, key := range machines {
		pm := &infrav1.PacketMachine{}
		if err := poll(ctx, fmt.Sprintf("PacketMachine %s has no user-data", key), func() bool {
			return c.Get(ctx, key, pm) == nil && pm.Status.UserDataSecretName != ""
		}); err != nil {
			return nil, err
		}
		for _, port := range pm.Status.Ports {
			for _, network := range port.Networks {
				fmt.Fprintf(table, "%s\t%s.%d\t%s/%d\t%s\t%s\n", key, port.Name, network.VXLAN,
					network.Address, network.Prefix, network.Gateway, network.ClaimName)
			}
		}
		secrets = append(secrets, client.ObjectKey{Namespace: key.Namespace, Name: pm.Status.UserDataSecretName})
	}
	return secrets, table.Flush()
}

// waitBound waits until the claim names its IPAddress and returns both.
func waitBound(ctx context.Context, c client.Client, key client.ObjectKey) (*ipamv1.IPAddress, *ipamv1.IPAddressClaim, error) {
	claim := &ipamv1.IPAddressClaim{}
	address := &ipamv1.IPAddress{}
	err := poll(ctx, fmt.Sprintf("claim %s was not bound", key), func() bool {
		return c.Get(ctx, key, claim) == nil && claim.Status.AddressRef.Name != "" &&
			c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: claim.Status.AddressRef.Name}, address) == nil
	})
	return address, claim, err
}

// poll checks done every 100ms until it holds or ctx ends.
func poll(ctx context.Context, failure string, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", failure, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
