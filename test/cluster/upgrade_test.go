package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// sourcesNamespace holds the upgrade's pools of every source and their
// claims, apart from the flow's namespace, whose claims are all the
// machines'.
const sourcesNamespace = "sources"

// TestUpgrade (make test-upgrade) installs the previous release of both
// providers with clusterctl, brings up the flow's machines and a bound claim
// on a pool of every source, then upgrades both providers with `clusterctl
// upgrade apply` to this tree's build. Nothing may change: the same
// IPAddresses with the same addresses, every claim bound to the same one,
// every machine on the same device; the CRDs store only their storage
// version. Then a claim on each pool and a fourth machine get addresses no
// one holds: the upgraded managers know the ledger the old ones wrote.
func TestUpgrade(t *testing.T) {
	isolated(t, "TestUpgrade", func(ctx context.Context, t *testing.T, c *cluster) {
		previous := os.Getenv("PREVIOUS_RELEASE")
		c.addRelease(t, os.Getenv("CLUSTER_PREVIOUS"), previous)
		c.clusterctl(t, "init", "--infrastructure", "packet:"+previous, "--ipam", "metal-vrf:"+previous)
		c.waitAvailable(ctx, t)
		c.runsRelease(ctx, t, previous)
		c.allowSimulator(ctx, t)

		f := newFlow(t, c)
		f.create(ctx, t)
		f.waitMachines(ctx, t, 3)
		pools := f.poolsOfEverySource(ctx, t)
		claims := f.claimEach(ctx, t, pools, "before")
		before := f.ledger(ctx, t)
		t.Logf("on %s: %d IPAddresses, %d machines on their devices", previous, len(before.addresses), len(before.devices))

		start := time.Now()
		c.clusterctl(t, "upgrade", "apply",
			"--ipam", "ipam-metal-vrf-system/metal-vrf:"+testenv.LocalVersion,
			"--infrastructure", "cluster-api-provider-packet-system/packet:"+testenv.LocalVersion)
		c.waitAvailable(ctx, t)
		c.runsRelease(ctx, t, "test")
		t.Logf("BENCHMARK clusterctl upgrade apply to every Deployment Available: %s", time.Since(start).Round(time.Second))

		// A claim bound on each pool, and a fourth machine up, show the new
		// managers have read the ledger; only then is the comparison final.
		claims = append(claims, f.claimEach(ctx, t, pools, "after")...)
		f.scale(ctx, t, 4)
		f.waitMachines(ctx, t, 4)
		f.sourcesBound(ctx, t, claims)
		after := f.ledger(ctx, t)
		if missing := before.missingFrom(after); len(missing) > 0 {
			t.Fatalf("the upgrade changed what the previous release had handed out:\n  %s", strings.Join(missing, "\n  "))
		}
		t.Logf("after the upgrade: the %d IPAddresses and %d devices unchanged; %d IPAddresses and %d devices now",
			len(before.addresses), len(before.devices), len(after.addresses), len(after.devices))
		// clusterctl deleted the fence's binding with the old components:
		// the API server's fence has gone stale (kubernetes#130887), and the
		// leader's records went past it (docs/reliability.md).
		t.Logf("records the IPAM manager created past the API server's stale fence: %d", staleFenceRecords(t))
		t.Run("every CRD stores only its storage version, and converts through a webhook where it serves several", func(t *testing.T) {
			checkStoredVersions(ctx, t, c.k8s)
		})
		f.scaleToZero(ctx, t)
	})
}

// addRelease adds the release in dir (what `make release` wrote for it) to
// the local repository as version, beside this tree's build: its components,
// metadata and cluster templates (`clusterctl generate cluster` reads the
// installed version's).
func (c *cluster) addRelease(t *testing.T, dir, version string) {
	t.Helper()
	templates, _ := filepath.Glob(filepath.Join(dir, "cluster-template*.yaml"))
	files := map[string][]string{
		"ipam-metal-vrf":        {"ipam-components.yaml", "metadata.yaml"},
		"infrastructure-packet": append([]string{"infrastructure-components.yaml", "metadata.yaml"}, templates...),
	}
	for label, names := range files {
		for _, name := range names {
			name = filepath.Base(name)
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			release := filepath.Join(c.dir, repositoryDir, label, version)
			if err := os.MkdirAll(release, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(release, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// allowSimulator lets the previous release's IPAM manager reach the
// simulator: its components do not pass METAL_API_URL on (v0.2.0's do), so
// the test does what an operator of it does, --metal-endpoints.
func (c *cluster) allowSimulator(ctx context.Context, t *testing.T) {
	t.Helper()
	key := client.ObjectKey{Namespace: "ipam-metal-vrf-system", Name: "ipam-metal-vrf-controller-manager"}
	d := &appsv1.Deployment{}
	if err := c.k8s.Get(ctx, key, d); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--metal-endpoints=%s"}]`, simURL)
	if err := c.k8s.Patch(ctx, d, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 3*time.Minute, "the IPAM manager rolled out with --metal-endpoints", func() error {
		if err := c.k8s.Get(ctx, key, d); err != nil {
			return err
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != s.Replicas || s.AvailableReplicas != s.Replicas {
			return fmt.Errorf("status %+v", s)
		}
		// The old Pod, until it is gone, may still be behind the webhook's
		// Service: a pool's admission then timed out in CI.
		pods := &corev1.PodList{}
		if err := c.k8s.List(ctx, pods, client.InNamespace(key.Namespace)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("Pod %s is terminating", p.Name)
			}
		}
		return nil
	})
	c.waitAvailable(ctx, t)
}

// runsRelease checks that our two managers' Pods run the images tagged tag.
func (c *cluster) runsRelease(ctx context.Context, t *testing.T, tag string) {
	t.Helper()
	for _, ns := range []string{"ipam-metal-vrf-system", "cluster-api-provider-packet-system"} {
		waitFor(ctx, t, 3*time.Minute, ns+"'s Pods run the images tagged "+tag, func() error {
			pods := &corev1.PodList{}
			if err := c.k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(pods.Items) == 0 {
				return fmt.Errorf("no Pod")
			}
			for _, p := range pods.Items {
				for _, container := range p.Spec.Containers {
					if !strings.HasSuffix(container.Image, ":"+tag) {
						return fmt.Errorf("Pod %s runs %s", p.Name, container.Image)
					}
				}
			}
			return nil
		})
	}
}

// poolsOfEverySource creates, in sourcesNamespace, a MetalVRFIPPool of each
// source (explicit addresses, the simulator's VRF, a PacketCluster network)
// and a GlobalMetalVRFIPPool.
func (f *flow) poolsOfEverySource(ctx context.Context, t *testing.T) []client.Object {
	const credentials = "metal-credentials"
	objects := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sourcesNamespace}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: sourcesNamespace, Name: credentials},
			StringData: map[string]string{"apiKey": simtest.APIKey, "baseURL": simURL + "/metal/v1"},
		},
		// Nothing owns this PacketCluster, so CAPP leaves it alone; the
		// pool reads its network.
		&infrav1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: sourcesNamespace, Name: "networks"},
			Spec: infrav1.PacketClusterSpec{ProjectID: simtest.Project, Metro: simtest.Metro, Networks: []infrav1.NetworkSpec{
				{Name: "storage", IPAddresses: []string{"10.68.0.0/29"}, Assignment: infrav1.AssignmentClusterAPI},
			}},
		},
	}
	pools := []client.Object{
		&v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: sourcesNamespace, Name: "explicit"},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.67.0.0/29"}, Prefix: ptr.To[int32](29), Gateway: "10.67.0.1"},
		},
		&v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: sourcesNamespace, Name: "vrf"},
			Spec: v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
				ID: simtest.VRF, CredentialsRef: v1alpha1.SecretReference{Name: credentials},
			}},
		},
		&v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: sourcesNamespace, Name: "network"},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "networks", Network: "storage"}},
		},
		&v1alpha1.GlobalMetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "upgraded"},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.69.0.0/29"}, Prefix: ptr.To[int32](29), Gateway: "10.69.0.1"},
		},
	}
	for _, obj := range append(objects, pools...) {
		if err := f.k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	return pools
}

// claimEach creates a claim named <pool>-<suffix> on each pool.
func (f *flow) claimEach(ctx context.Context, t *testing.T, pools []client.Object, suffix string) []*ipamv1.IPAddressClaim {
	var claims []*ipamv1.IPAddressClaim
	for _, pool := range pools {
		kind := v1alpha1.MetalVRFIPPoolKind
		if pool.GetNamespace() == "" {
			kind = v1alpha1.GlobalMetalVRFIPPoolKind
		}
		claim := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: sourcesNamespace, Name: pool.GetName() + "-" + suffix},
			Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
				APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool.GetName(),
			}},
		}
		if err := f.k8s.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		claims = append(claims, claim)
	}
	f.sourcesBound(ctx, t, claims)
	return claims
}

// sourcesBound waits until every claim is bound, and fails for an address
// two claims of the sources' namespace hold.
func (f *flow) sourcesBound(ctx context.Context, t *testing.T, claims []*ipamv1.IPAddressClaim) {
	waitFor(ctx, t, 3*time.Minute, fmt.Sprintf("%d claims on the pools of every source bound", len(claims)), func() error {
		for _, claim := range claims {
			if err := f.k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
				return err
			}
			if claim.Status.AddressRef.Name == "" {
				return fmt.Errorf("claim %s not bound: %v", claim.Name, claim.Status.Conditions)
			}
		}
		return nil
	})
	addresses := &ipamv1.IPAddressList{}
	if err := f.k8s.List(ctx, addresses, client.InNamespace(sourcesNamespace)); err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	for _, a := range addresses.Items {
		if other, taken := holder[a.Spec.Address]; taken {
			t.Fatal(&heldTwiceError{address: a.Spec.Address, claims: []string{other, a.Spec.ClaimRef.Name}})
		}
		holder[a.Spec.Address] = a.Spec.ClaimRef.Name
	}
}

// ledger is what the providers have handed out: each IPAddress (by
// namespace/name: its UID and address), each claim's bound IPAddress, each
// PacketMachine's device.
type ledger struct {
	addresses, claims, devices map[string]string
}

func (f *flow) ledger(ctx context.Context, t *testing.T) ledger {
	l := ledger{addresses: map[string]string{}, claims: map[string]string{}, devices: map[string]string{}}
	addresses := &ipamv1.IPAddressList{}
	claims := &ipamv1.IPAddressClaimList{}
	machines := &infrav1.PacketMachineList{}
	for _, list := range []client.ObjectList{addresses, claims, machines} {
		if err := f.k8s.List(ctx, list); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range addresses.Items {
		l.addresses[a.Namespace+"/"+a.Name] = fmt.Sprintf("%s %s/%d gateway %s (UID %s)", a.Spec.Address, a.Spec.Address, ptr.Deref(a.Spec.Prefix, 0), a.Spec.Gateway, a.UID)
	}
	for _, c := range claims.Items {
		l.claims[c.Namespace+"/"+c.Name] = fmt.Sprintf("bound to %q (UID %s)", c.Status.AddressRef.Name, c.UID)
	}
	devices, err := f.metal.ListDevices(ctx, metal.DeviceFilter{Tag: device.ClusterTagPrefix + flowCluster})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, d := range devices {
		ids[device.ProviderID(d.GetId())] = true
	}
	for _, m := range machines.Items {
		id := m.Spec.ProviderID
		if !ids[id] {
			t.Fatalf("PacketMachine %s names the device %q, which the simulator does not hold (it holds %v)", m.Name, id, slices.Sorted(maps.Keys(ids)))
		}
		l.devices[m.Namespace+"/"+m.Name] = id
	}
	if len(devices) != len(machines.Items) {
		t.Fatalf("%d devices for %d PacketMachines", len(devices), len(machines.Items))
	}
	return l
}

// missingFrom lists each entry of l that later does not hold unchanged.
func (l ledger) missingFrom(later ledger) []string {
	var missing []string
	for _, part := range []struct {
		what          string
		before, after map[string]string
	}{{"IPAddress", l.addresses, later.addresses}, {"claim", l.claims, later.claims}, {"PacketMachine", l.devices, later.devices}} {
		for _, key := range slices.Sorted(maps.Keys(part.before)) {
			if now, ok := part.after[key]; !ok || now != part.before[key] {
				missing = append(missing, fmt.Sprintf("%s %s: was %s, now %q", part.what, key, part.before[key], now))
			}
		}
	}
	return missing
}

// checkStoredVersions checks our CRDs after the upgrade: each stores its
// objects in its storage version only (an object left in a version the CRD
// no longer serves cannot be read), and a CRD that serves several versions
// converts between them with a webhook served by its provider.
func checkStoredVersions(ctx context.Context, t *testing.T, k8s client.Client) {
	if err := apiextensionsv1.AddToScheme(k8s.Scheme()); err != nil {
		t.Fatal(err)
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := k8s.List(ctx, crds); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, crd := range crds.Items {
		// clusterctl labels each component with its provider.
		if provider := crd.Labels[clusterv1.ProviderNameLabel]; provider != "ipam-metal-vrf" && provider != "infrastructure-packet" {
			continue
		}
		checked++
		var storage string
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storage = v.Name
			}
		}
		if !slices.Equal(crd.Status.StoredVersions, []string{storage}) {
			t.Errorf("CRD %s: stored versions %v, want only the storage version %s", crd.Name, crd.Status.StoredVersions, storage)
		}
		if len(crd.Spec.Versions) > 1 && (crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.WebhookConverter ||
			crd.Spec.Conversion.Webhook == nil || crd.Spec.Conversion.Webhook.ClientConfig == nil || crd.Spec.Conversion.Webhook.ClientConfig.Service == nil) {
			t.Errorf("CRD %s serves %d versions without a conversion webhook: %+v", crd.Name, len(crd.Spec.Versions), crd.Spec.Conversion)
		}
	}
	if checked < 5 {
		t.Errorf("checked %d of our CRDs, want the 5 (two pools, three Packet kinds)", checked)
	}
}

// staleFenceRecords counts the IPAM manager's log lines that tell of a
// record created past the API server's stale fence.
func staleFenceRecords(t *testing.T) int {
	logs, _ := filepath.Glob(filepath.Join("/var/log/pods", "ipam-metal-vrf-system_*", "*", "*.log"))
	n := 0
	for _, log := range logs {
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(data), "allocation fence refused a record of this leader")
	}
	return n
}
