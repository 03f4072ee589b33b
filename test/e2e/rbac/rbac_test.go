// Package rbac runs both managers with nothing but the ClusterRoles `make
// generate` writes from their RBAC markers (config/ipam/rbac/role.yaml,
// config/capp/rbac/role.yaml), each as a ServiceAccount bound to its role,
// on a real kube-apiserver (which authorizes with RBAC), against the Metal
// API simulator. They must do their work with it, and nothing about Secrets
// beyond what docs/install.md says.
package rbac

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// systemNamespace holds the managers' ServiceAccounts, as a provider's
// namespace does once installed.
const systemNamespace = "rbac-system"

// The managers' identities: the user names the API server gives their
// ServiceAccounts' tokens.
var (
	ipamUser = testenv.ServiceAccount(systemNamespace, testenv.IPAMAccount)
	cappUser = testenv.ServiceAccount(systemNamespace, testenv.CAPPAccount)
)

var (
	env      *testenv.Environment
	metalSim *simtest.Sim
	setupErr error
)

func TestMain(m *testing.M) { testenv.RunMain(m, start, &setupErr) }

// start starts the simulator, the API server, and each manager as its
// ServiceAccount; stops holds what stops them, in order of start.
func start(ctx context.Context) (stops []func(), err error) {
	metalSim, err = simtest.Start(sim.Options{}, nil)
	if err != nil {
		return nil, err
	}
	stops = append(stops, metalSim.Close)
	env, err = testenv.Start(testenv.Options{CAPPCRDs: true})
	if err != nil {
		return stops, err
	}
	stops = append(stops, func() { _ = env.Stop() })
	ipamOpts := env.IPAMOptions(2)
	ipamOpts.MetalRetry = metal.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	ipamOpts.MetalEndpoints = []string{metalSim.URL}
	cappOpts := env.CAPPOptions(2, "")
	// No fallback token: the PacketCluster's credentialsRef is the only way
	// to the Metal API.
	cappOpts.Getenv = func(string) string { return "" }
	cappOpts.MetalEndpoints = []string{metalSim.URL}
	// As installed: the allocation records live in the IPAM manager's own
	// namespace, where the leader election Role lets it keep Leases.
	managers, err := env.StartAsInstalled(ctx, systemNamespace, ipamOpts, cappOpts)
	return append(stops, managers...), err
}

func requireEnv(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("the environment did not start: %v", setupErr)
	}
}

// eventually polls check until it returns nil; after the guard it fails the
// test with check's last error. The guard only stops a stuck test.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) {
			last = check()
			return last == nil, nil
		})
	if err != nil {
		t.Fatalf("%s: %v", what, errors.Join(err, last))
	}
}

// credentials creates the Secret of the simulator's project token.
func credentials(t *testing.T, ns, name string) {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"apiKey": simtest.APIKey, "baseURL": metalSim.URL},
	}
	if err := env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// vrfPool creates a MetalVRFIPPool of the simulator's VRF (its Metal
// Gateway subnets) whose credentials are the Secret metal.
func vrfPool(t *testing.T, ns string) *v1alpha1.MetalVRFIPPool {
	t.Helper()
	credentials(t, ns, "metal")
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
		Spec: v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
			ID: simtest.VRF, CredentialsRef: v1alpha1.SecretReference{Name: "metal"},
			ProjectID: simtest.Project, Metro: simtest.Metro, ReservationIDs: []string{simtest.NodesReservation},
		}},
	}
	if err := env.Client.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestIPAMManagerResolvesAVRFPoolWithItsRole: the pool's credentials Secret
// is read, the VRF resolved, a claim bound.
func TestIPAMManagerResolvesAVRFPoolWithItsRole(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, err := env.NewNamespace(ctx, "ipam")
	if err != nil {
		t.Fatal(err)
	}
	pool := vrfPool(t, ns)
	eventually(t, "the pool resolves its VRF", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		if c := conditions.Get(pool, v1alpha1.SourcesResolvedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("SourcesResolved: %+v", c)
		}
		return nil
	})
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name,
		}},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim is bound", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.AddressRef.Name == "" {
			return errors.New("not bound")
		}
		return nil
	})
}

// TestCAPPManagerRendersAMachineWithItsRole: a machine with a network from a
// VRF pool gets its claim bound (by the IPAM manager as its ServiceAccount)
// and its user-data rendered into a Secret it controls.
func TestCAPPManagerRendersAMachineWithItsRole(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, err := env.NewNamespace(ctx, "capp")
	if err != nil {
		t.Fatal(err)
	}
	vrfPool(t, ns)
	pm := machine(t, ns, "m1")
	eventually(t, "the user-data is rendered", func() error { return rendered(ctx, pm) })
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pm.Status.UserDataSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(secret, pm) {
		t.Errorf("the user-data Secret's owners are %v, want the PacketMachine controlling it", secret.OwnerReferences)
	}
}

func rendered(ctx context.Context, pm *infrav1.PacketMachine) error {
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pm), pm); err != nil {
		return err
	}
	if c := conditions.Get(pm, infrav1.BootstrapDataRenderedCondition); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("BootstrapDataRendered: %+v", c)
	}
	// The patch helper writes the conditions before the rest of the status.
	if pm.Status.UserDataSecretName == "" {
		return errors.New("status.userDataSecretName is not written yet")
	}
	return nil
}

// TestCAPPManagerLeavesAForeignUserDataSecretAlone: RBAC lets the CAPP
// manager patch any Secret, so the check is in its code: a Secret of the
// user-data's name that the PacketMachine does not control stays untouched,
// and the machine says why it waits.
func TestCAPPManagerLeavesAForeignUserDataSecretAlone(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, err := env.NewNamespace(ctx, "capp")
	if err != nil {
		t.Fatal(err)
	}
	vrfPool(t, ns)
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controllers.UserDataSecretName("m2")},
		// The type the manager writes: a Secret's type is immutable, so
		// another type alone would keep a careless manager out.
		Type:       clusterv1.ClusterSecretType,
		StringData: map[string]string{"value": "someone else's"},
	}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	pm := machine(t, ns, "m2")
	eventually(t, "the machine reports the conflict", func() error {
		after := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), after); err != nil {
			return err
		}
		if after.ResourceVersion != foreign.ResourceVersion {
			t.Fatalf("the foreign Secret was written: resourceVersion %s, was %s; owners %v, data %q",
				after.ResourceVersion, foreign.ResourceVersion, after.OwnerReferences, after.Data["value"])
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pm), pm); err != nil {
			return err
		}
		if c := conditions.Get(pm, infrav1.BootstrapDataRenderedCondition); c == nil || c.Reason != infrav1.UserDataSecretConflictReason {
			return fmt.Errorf("BootstrapDataRendered: %+v", c)
		}
		return nil
	})
}

// TestManagersCannotReadEverySecret asks the API server, as each manager's
// ServiceAccount, for what its role must not allow: listing or watching
// Secrets (even their metadata), and any write to a Secret the IPAM manager
// makes, or an update or delete by the CAPP manager. Getting one Secret
// works for both: the identity is the manager's, not one refused everything.
func TestManagersCannotReadEverySecret(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, err := env.NewNamespace(ctx, "secrets")
	if err != nil {
		t.Fatal(err)
	}
	credentials(t, ns, "metal")
	key := client.ObjectKey{Namespace: ns, Name: "metal"}
	scheme := env.Client.Scheme()

	type call struct {
		name string
		do   func(c client.Client) error
	}
	secret := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metal"}}
	}
	list := call{"list Secrets in all namespaces", func(c client.Client) error { return c.List(ctx, &corev1.SecretList{}) }}
	listNS := call{"list Secrets in a namespace", func(c client.Client) error {
		return c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns))
	}}
	listMeta := call{"list Secrets' metadata", func(c client.Client) error {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
		return c.List(ctx, l)
	}}
	watch := call{"watch Secrets", func(c client.Client) error {
		w, err := c.(client.WithWatch).Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns))
		if err == nil {
			w.Stop()
		}
		return err
	}}
	update := call{"update a Secret", func(c client.Client) error {
		s := secret()
		if err := env.Client.Get(ctx, key, s); err != nil {
			return err
		}
		return c.Update(ctx, s)
	}}
	remove := call{"delete a Secret", func(c client.Client) error { return c.Delete(ctx, secret()) }}
	create := call{"create a Secret", func(c client.Client) error {
		return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "x-"}})
	}}
	patch := call{"patch a Secret", func(c client.Client) error {
		return c.Patch(ctx, secret(), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`)))
	}}

	for _, m := range []struct {
		name      string
		user      rest.ImpersonationConfig
		forbidden []call
	}{
		{"ipam", ipamUser, []call{list, listNS, listMeta, watch, update, remove, create, patch}},
		{"capp", cappUser, []call{list, listNS, listMeta, watch, update, remove}},
	} {
		t.Run(m.name, func(t *testing.T) {
			c, err := client.NewWithWatch(env.ConfigAs(m.user), client.Options{Scheme: scheme})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, key, &corev1.Secret{}); err != nil {
				t.Errorf("get a Secret: %v, want it allowed", err)
			}
			for _, call := range m.forbidden {
				if err := call.do(c); !apierrors.IsForbidden(err) {
					t.Errorf("%s: %v, want Forbidden", call.name, err)
				}
			}
		})
	}
}

// machine creates a Cluster with its PacketCluster (credentials in the
// Secret metal, the user's endpoint), and a Machine with its bootstrap data
// and its PacketMachine, one network from the pool nodes, as CAPI and a
// bootstrap provider would.
func machine(t *testing.T, ns, name string) *infrav1.PacketMachine {
	t.Helper()
	ctx := context.Background()
	pc := &infrav1.PacketCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster", Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"}},
		Spec: infrav1.PacketClusterSpec{
			ProjectID: simtest.Project, Metro: simtest.Metro,
			CredentialsRef:       &corev1.LocalObjectReference{Name: "metal"},
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "192.0.2.10", Port: 6443},
		},
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster"},
		Spec: clusterv1.ClusterSpec{
			Paused:            ptr.To(false),
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: pc.Name},
		},
	}
	bootstrap, m := testenv.BootstrappedMachine(ns, cluster.Name, name, "#cloud-config\nruncmd: [kubeadm join]\n")
	for _, obj := range []client.Object{pc, cluster, bootstrap, m} {
		if err := env.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	pm := &infrav1.PacketMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID,
			}},
		},
		Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Ports: []infrav1.Port{
			{Name: "bond0", Networks: []infrav1.Network{{
				VXLAN: simtest.NodesVXLAN, AddressType: infrav1.AddressTypeInternal,
				AddressFromPool: &corev1.TypedLocalObjectReference{
					APIGroup: ptr.To(v1alpha1.GroupVersion.Group), Kind: v1alpha1.MetalVRFIPPoolKind, Name: "nodes",
				},
			}}},
		}},
	}
	if err := env.Client.Create(ctx, pm); err != nil {
		t.Fatal(err)
	}
	return pm
}
