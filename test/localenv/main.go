// Command localenv is what `make run` starts: the whole project on one
// machine with nothing installed. It runs a real kube-apiserver and etcd
// (envtest) with CAPI's and the project's CRDs and webhooks, the Equinix Metal
// API simulator seeded with a small world, and both managers (IPAM and
// CAPP) and Cluster API's own core manager; applies the sample pools and
// claims of config/samples/ipam and the demo cluster of
// config/samples/localenv, whose MachineDeployment the core manager turns
// into machines; prints what every claim and each machine's networks got,
// and each machine's device as the simulator shows it; plays each machine's
// node reporting its network configured; and writes a kubeconfig so kubectl
// and clusterctl can look around. With --once it exits after printing.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	cappcontrollers "github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// simulatorKey is the API key the simulator accepts, on top of the seed's.
const simulatorKey = "localenv-token"

// How long the run waits for a machine to be provisioned, and for the
// machine to see its node's report. The provider looks at a node's report
// every 15 seconds.
const (
	provisionTimeout = 90 * time.Second
	reportTimeout    = time.Minute
)

func main() {
	once := flag.Bool("once", false, "exit once the machine's node has reported and everything is printed (for CI and smoke tests)")
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
	if err := run(ctx, *once, *kubeconfig, logs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "localenv:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, once bool, kubeconfig string, logs, out io.Writer) (err error) {
	fmt.Fprintln(out, "Starting kube-apiserver and etcd ...")
	env, err := testenv.Start(testenv.Options{Webhooks: true, CAPPCRDs: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()

	// Short delays keep the whole run under a minute or two while every
	// state (queued, provisioning, batches in flight) is still passed
	// through.
	simulator, err := simtest.Start(sim.Options{
		APIKeys:              []string{simulatorKey},
		DeviceProvisionDelay: 6 * time.Second,
		BatchDelay:           2 * time.Second,
	}, nil)
	if err != nil {
		return fmt.Errorf("starting the Metal API simulator: %w", err)
	}
	defer simulator.Close()
	simURL := simulator.URL

	// The credentials Secrets of the samples name the simulator: the one
	// Metal API endpoint the managers allow.
	ipamOpts := env.IPAMOptions(4)
	ipamOpts.MetalEndpoints = []string{simURL}
	stopIPAM, err := env.StartIPAM(ctx, ipamOpts)
	if err != nil {
		return fmt.Errorf("starting the IPAM manager: %w", err)
	}
	defer stopIPAM()
	cappOpts := env.CAPPOptions(2, "")
	cappOpts.MetalEndpoints = []string{simURL}
	stopCAPP, err := env.StartCAPP(ctx, cappOpts)
	if err != nil {
		return fmt.Errorf("starting the CAPP manager: %w", err)
	}
	defer stopCAPP()
	stopCore, err := env.StartCAPICore(logs)
	if err != nil {
		return fmt.Errorf("starting Cluster API's core manager: %w", err)
	}
	defer stopCore()

	applied, err := apply(ctx, env.Client, simURL, filepath.Join(env.Root, "config", "samples", "ipam"), filepath.Join(env.Root, "config", "samples", "localenv"))
	if err != nil {
		return err
	}
	if err := printClaims(ctx, env.Client, applied["IPAddressClaim"], out); err != nil {
		return err
	}
	keys, err := deploymentMachines(ctx, env.Client, applied["MachineDeployment"], out)
	if err != nil {
		return err
	}
	machines, err := printMachines(ctx, env.Client, keys, out)
	if err != nil {
		return err
	}
	if err := printDevices(ctx, simURL, machines, out); err != nil {
		return err
	}
	if err := playNodes(ctx, env.Client, simulator, machines, out); err != nil {
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
	fmt.Fprintf(out, "  kubectl --kubeconfig %s get cluster-api -A   # Clusters, Machines, PacketMachines, ...\n", kubeconfig)
	fmt.Fprintf(out, "  go run sigs.k8s.io/cluster-api/cmd/clusterctl describe cluster demo --kubeconfig %s --show-conditions all\n", kubeconfig)
	for _, pm := range machines {
		fmt.Fprintf(out, "  kubectl --kubeconfig %s get secret -n %s %s -o jsonpath='{.data.%s}' | base64 -d   # rendered user-data\n",
			kubeconfig, pm.Namespace, pm.Status.UserDataSecretName, cappcontrollers.UserDataKey)
	}
	fmt.Fprintf(out, "\nMetal API simulator: %s (token %s; see docs/metal.md)\n", simURL, simulatorKey)
	for _, pm := range machines {
		fmt.Fprintf(out, "  curl -s -H 'X-Auth-Token: %s' '%s/metal/v1/devices/%s'\n",
			simulatorKey, simURL, device.DeviceID(pm.Spec.ProviderID))
	}
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

// create creates obj, after pointing a credentials Secret at the simulator.
func create(ctx context.Context, c client.Client, obj *unstructured.Unstructured, simURL string) error {
	if _, found, _ := unstructured.NestedString(obj.Object, "stringData", "baseURL"); found && obj.GetKind() == "Secret" {
		if err := unstructured.SetNestedField(obj.Object, simURL, "stringData", "baseURL"); err != nil {
			return err
		}
	}
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// deploymentMachines waits until Cluster API's core manager has made every
// replica of the MachineDeployments a Machine with its PacketMachine, prints
// which, and returns the PacketMachines' keys.
func deploymentMachines(ctx context.Context, c client.Client, deployments []client.ObjectKey, out io.Writer) ([]client.ObjectKey, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	table := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "\nMACHINEDEPLOYMENT\tMACHINE\tPACKETMACHINE")
	var keys []client.ObjectKey
	for _, key := range deployments {
		md := &clusterv1.MachineDeployment{}
		machines := &clusterv1.MachineList{}
		if err := poll(ctx, func() bool {
			if c.Get(ctx, key, md) != nil || c.List(ctx, machines, client.InNamespace(key.Namespace),
				client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: key.Name}) != nil {
				return false
			}
			made := 0
			for _, m := range machines.Items {
				if m.Spec.InfrastructureRef.Name != "" {
					made++
				}
			}
			return made == int(ptr.Deref(md.Spec.Replicas, 0))
		}); err != nil {
			return nil, fmt.Errorf("MachineDeployment %s: Cluster API's core manager made %d of its Machines: %w",
				key, len(machines.Items), err)
		}
		slices.SortFunc(machines.Items, func(a, b clusterv1.Machine) int { return strings.Compare(a.Name, b.Name) })
		for _, m := range machines.Items {
			pm := client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}
			fmt.Fprintf(table, "%s\t%s\t%s\n", key, m.Name, pm.Name)
			keys = append(keys, pm)
		}
	}
	return keys, table.Flush()
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

// printMachines waits until every PacketMachine is provisioned (its device
// active, every port carrying its VLANs) and prints its networks' addresses;
// it returns the machines as last read.
func printMachines(ctx context.Context, c client.Client, machines []client.ObjectKey, out io.Writer) ([]*infrav1.PacketMachine, error) {
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	table := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "\nPACKETMACHINE\tINTERFACE\tADDRESS\tGATEWAY\tCLAIM")
	var read []*infrav1.PacketMachine
	for _, key := range machines {
		pm := &infrav1.PacketMachine{}
		if err := poll(ctx, func() bool {
			return c.Get(ctx, key, pm) == nil && ptr.Deref(pm.Status.Initialization.Provisioned, false)
		}); err != nil {
			return nil, fmt.Errorf("PacketMachine %s was not provisioned (status.initialization.provisioned) within %s; its conditions: %s: %w",
				key, provisionTimeout, conditionsOf(pm), err)
		}
		for _, port := range pm.Status.Ports {
			for _, network := range port.Networks {
				fmt.Fprintf(table, "%s\t%s.%d\t%s/%d\t%s\t%s\n", key, port.Name, network.VXLAN,
					network.Address, network.Prefix, network.Gateway, firstOf(network.ClaimName, "(static)"))
			}
		}
		read = append(read, pm)
	}
	return read, table.Flush()
}

// printDevices prints each machine's device and its ports as the simulator
// answers them through the Metal client: the device's state and network
// type (one for the whole device: hybrid once a NIC is out of the bond),
// each port's mode, and the VLANs it carries.
func printDevices(ctx context.Context, simURL string, machines []*infrav1.PacketMachine, out io.Writer) error {
	api, err := metal.NewClient(metal.Config{APIKey: simulatorKey, BaseURL: simURL, ProjectID: simtest.Project})
	if err != nil {
		return err
	}
	table := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "\nPACKETMACHINE\tDEVICE\tSTATE\tNETWORK TYPE\tPORT\tMODE\tVLANS")
	for _, pm := range machines {
		dev, err := api.GetDevice(ctx, device.DeviceID(pm.Spec.ProviderID))
		if err != nil {
			return fmt.Errorf("reading the device of PacketMachine %s: %w", pm.Name, err)
		}
		vxlans, err := vxlansByID(ctx, api, dev.Metro.GetCode())
		if err != nil {
			return err
		}
		for _, port := range dev.GetNetworkPorts() {
			var tags []string
			for _, vn := range port.GetVirtualNetworks() {
				tags = append(tags, vxlans[path.Base(vn.GetHref())])
			}
			fmt.Fprintf(table, "%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pm.Namespace, pm.Name, dev.GetId(), dev.GetState(),
				port.GetNetworkType(), port.GetName(), portMode(port), firstOf(strings.Join(tags, ","), "-"))
		}
	}
	return table.Flush()
}

// portMode names what a port does: bond0 bonded with its Layer 3
// addresses and tagged VLANs is hybrid-bonded; a NIC is in the bond or out
// of it (hybrid unbonded, carrying VLANs of its own).
func portMode(port metalv1.Port) string {
	bonded := port.Data.GetBonded()
	switch {
	case port.GetType() == metalv1.PORTTYPE_NETWORK_BOND_PORT && bonded && len(port.GetVirtualNetworks()) > 0:
		return "hybrid-bonded"
	case port.GetType() == metalv1.PORTTYPE_NETWORK_BOND_PORT && bonded:
		return "bonded"
	case port.GetType() == metalv1.PORTTYPE_NETWORK_BOND_PORT:
		return "no bonded NIC"
	case bonded:
		return "in bond0"
	default:
		return "out of bond0"
	}
}

// vxlansByID maps the IDs of the project's VLANs in metro to their tags.
func vxlansByID(ctx context.Context, api *metal.Client, metro string) (map[string]string, error) {
	list, err := api.ListVirtualNetworks(ctx, metro)
	if err != nil {
		return nil, fmt.Errorf("listing the VLANs of metro %s: %w", metro, err)
	}
	out := map[string]string{}
	for _, vn := range list {
		out[vn.GetId()] = strconv.Itoa(int(vn.GetVxlan()))
	}
	return out, nil
}

// playNodes plays each machine's node once its network script would have
// run: bound to the loopback address, it reads its metadata as the script
// does, posts succeeded (network_configuration_success) to the
// user_state_url found there, and waits for NodeNetworkConfigured.
func playNodes(ctx context.Context, c client.Client, simulator *simtest.Sim, machines []*infrav1.PacketMachine, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	for _, pm := range machines {
		id := device.DeviceID(pm.Spec.ProviderID)
		if err := simulator.BindNode(netip.MustParseAddr("127.0.0.1"), id); err != nil {
			return err
		}
		var md struct {
			UserStateURL string `json:"user_state_url"`
		}
		if err := nodeCall(ctx, http.MethodGet, simulator.URL+"/metadata", nil, &md); err != nil {
			return fmt.Errorf("reading the metadata of device %s: %w", id, err)
		}
		event := map[string]any{"state": device.UserStateSucceeded, "code": 1001, "message": "network_configuration_success"}
		if err := nodeCall(ctx, http.MethodPost, md.UserStateURL, event, nil); err != nil {
			return fmt.Errorf("posting the user state of device %s: %w", id, err)
		}
		fmt.Fprintf(out, "\nNode of device %s: posted %s (network_configuration_success) to %s\n", id, device.UserStateSucceeded, md.UserStateURL)

		key := client.ObjectKeyFromObject(pm)
		if err := poll(ctx, func() bool {
			return c.Get(ctx, key, pm) == nil && conditions.IsTrue(pm, infrav1.NodeNetworkConfiguredCondition)
		}); err != nil {
			return fmt.Errorf("PacketMachine %s did not turn %s True within %s; its conditions: %s: %w",
				key, infrav1.NodeNetworkConfiguredCondition, reportTimeout, conditionsOf(pm), err)
		}
		fmt.Fprintf(out, "PacketMachine %s: %s=True (%s), %s=%s\n", key, infrav1.NodeNetworkConfiguredCondition,
			conditions.GetMessage(pm, infrav1.NodeNetworkConfiguredCondition), infrav1.ReadyCondition, conditionStatus(pm, infrav1.ReadyCondition))
	}
	return nil
}

// nodeCall sends in (when not nil) as JSON and decodes the answer into
// reply (when not nil).
func nodeCall(ctx context.Context, method, url string, in, reply any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(msg))
	}
	if reply == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(reply)
}

// conditionsOf lists the machine's conditions as Type=Status (Reason:
// message), in the order they are set.
func conditionsOf(pm *infrav1.PacketMachine) string {
	var parts []string
	for _, c := range pm.Status.Conditions {
		part := fmt.Sprintf("%s=%s (%s", c.Type, c.Status, c.Reason)
		if c.Message != "" && c.Status != metav1.ConditionTrue {
			part += ": " + c.Message
		}
		parts = append(parts, part+")")
	}
	if len(parts) == 0 {
		return "none yet"
	}
	return strings.Join(parts, ", ")
}

func conditionStatus(pm *infrav1.PacketMachine, conditionType string) metav1.ConditionStatus {
	if c := conditions.Get(pm, conditionType); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// waitBound waits until the claim names its IPAddress and returns both.
func waitBound(ctx context.Context, c client.Client, key client.ObjectKey) (*ipamv1.IPAddress, *ipamv1.IPAddressClaim, error) {
	claim := &ipamv1.IPAddressClaim{}
	address := &ipamv1.IPAddress{}
	err := poll(ctx, func() bool {
		return c.Get(ctx, key, claim) == nil && claim.Status.AddressRef.Name != "" &&
			c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: claim.Status.AddressRef.Name}, address) == nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim %s was not bound: %w", key, err)
	}
	return address, claim, nil
}

// poll checks done every 100ms until it holds or ctx ends.
func poll(ctx context.Context, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
