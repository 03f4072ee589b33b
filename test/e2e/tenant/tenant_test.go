// Package tenant runs both managers as installed (each impersonating its
// ServiceAccount bound to its generated role, see test/e2e/rbac) on a real
// kube-apiserver, against the Metal API simulator, while a tenant, a user
// bound to nothing but an edit Role in its own namespace, tries what a team
// sharing the management cluster must not be able to do: read the
// managers' token, point them at an API of its own, keep the device
// creation slots from the other teams, act on another team's device or
// endpoint reservation in the project they share, join another team's
// allocation domain. Each test asserts that the attack
// is refused with a condition naming the field and the value, and that
// nothing reached what it aimed at.
package tenant

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// systemNamespace holds the managers' ServiceAccounts.
const systemNamespace = "tenant-system"

const (
	// tenantUser may edit the objects of its own namespace, nothing more.
	tenantUser = "team-b-user"
	// managerToken is the CAPP manager's own METAL_API_KEY.
	managerToken = "manager-token-of-the-whole-management-cluster"
	// maxCreations is the CAPP manager's --max-device-creations.
	maxCreations = 2
)

var (
	env      *testenv.Environment
	metalSim *simtest.Sim
	// metalClock is metalSim's: its devices provision in an hour of it,
	// which only a test that advances it sees pass.
	metalClock = simtest.NewFakeClock(time.Now())
	// otherSim is a second endpoint the operator allows the IPAM manager,
	// seeded like metalSim: the same project and VRF IDs.
	otherSim *simtest.Sim
	setupErr error
)

func TestMain(m *testing.M) { testenv.RunMain(m, start, &setupErr) }

// start starts the simulator (whose devices stay provisioning, so that
// they hold their creation slots), the API server and both managers as
// their ServiceAccounts, each allowing the simulator as its one Metal API.
func start(ctx context.Context) (stops []func(), err error) {
	metalSim, err = simtest.Start(sim.Options{DeviceProvisionDelay: time.Hour, Clock: metalClock}, nil)
	if err != nil {
		return nil, err
	}
	stops = append(stops, metalSim.Close)
	otherSim, err = simtest.Start(sim.Options{}, nil)
	if err != nil {
		return stops, err
	}
	stops = append(stops, otherSim.Close)
	env, err = testenv.Start(testenv.Options{CAPPCRDs: true, Webhooks: true})
	if err != nil {
		return stops, err
	}
	stops = append(stops, func() { _ = env.Stop() })
	ipamOpts := env.IPAMOptions(2)
	ipamOpts.MetalRetry = metal.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	ipamOpts.MetalEndpoints = []string{metalSim.URL, otherSim.URL}
	cappOpts := env.CAPPOptions(2, "")
	cappOpts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: managerToken, metal.EnvBaseURL: metalSim.URL}[name]
	}
	cappOpts.MetalEndpoints = []string{metalSim.URL}
	cappOpts.MaxDeviceCreations = maxCreations
	cappOpts.MetalRetry = ipamOpts.MetalRetry
	managers, err := env.StartAsInstalled(ctx, systemNamespace, ipamOpts, cappOpts)
	return append(stops, managers...), err
}

// tenant creates a namespace and returns it with a client acting as
// tenantUser, bound there to a Role that edits what a team needs for its
// clusters (Secrets, CAPI's and the providers' objects), and nothing
// elsewhere.
func tenant(t *testing.T) (string, client.Client) {
	t.Helper()
	ctx := context.Background()
	ns, err := env.NewNamespace(ctx, "team-b")
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edit"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: all},
			{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{"clusters", "machines"}, Verbs: all},
			{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"packetclusters", "packetmachines"}, Verbs: all},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"metalvrfippools", "ipaddressclaims", "ipaddresses"}, Verbs: all},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(env.ConfigAs(rest.ImpersonationConfig{UserName: tenantUser}), client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return ns, c
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
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) {
			last = check()
			return last == nil, nil
		})
	if err != nil {
		t.Fatalf("%s: %v", what, errors.Join(err, last))
	}
}

// secret creates a credentials Secret as c.
func secret(t *testing.T, c client.Client, ns, name, token, baseURL string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"apiKey": token, "baseURL": baseURL},
	}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// cluster creates, as c, a Cluster and its PacketCluster in the simulator's
// project, with the credentials Secret credentials (none when empty) and a
// control-plane endpoint of its own, so that only the machines call the
// Metal API; edit, when given, changes the PacketCluster before it is
// created.
func cluster(t *testing.T, c client.Client, ns, name, credentials string, edit ...func(*infrav1.PacketCluster)) *infrav1.PacketCluster {
	t.Helper()
	pc := &infrav1.PacketCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec: infrav1.PacketClusterSpec{
			ProjectID: simtest.Project, Metro: simtest.Metro,
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "192.0.2.10", Port: 6443},
		},
	}
	if credentials != "" {
		pc.Spec.CredentialsRef = &corev1.LocalObjectReference{Name: credentials}
	}
	for _, e := range edit {
		e(pc)
	}
	cl := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			Paused:            ptr.To(false),
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: pc.Name},
		},
	}
	for _, obj := range []client.Object{pc, cl} {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return pc
}

// machine creates, as c, a Machine of cluster with its bootstrap data and
// its PacketMachine (no networks), as CAPI and a bootstrap provider would;
// edit, when given, changes the PacketMachine before it is created.
func machine(t *testing.T, c client.Client, ns, cluster, name string, controlPlane bool, bootstrapData string, edit ...func(*infrav1.PacketMachine)) *infrav1.PacketMachine {
	t.Helper()
	ctx := context.Background()
	bootstrap, m := testenv.BootstrappedMachine(ns, cluster, name, bootstrapData)
	if controlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	for _, obj := range []client.Object{bootstrap, m} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	pm := &infrav1.PacketMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID,
			}},
		},
		Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04"},
	}
	for _, e := range edit {
		e(pm)
	}
	if err := c.Create(ctx, pm); err != nil {
		t.Fatal(err)
	}
	return pm
}

// condition reads obj again and returns its condition of type cond.
func condition(obj client.Object, cond string) (*metav1.Condition, error) {
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	getter, ok := obj.(conditions.Getter)
	if !ok {
		return nil, fmt.Errorf("%T has no conditions", obj)
	}
	c := conditions.Get(getter, cond)
	if c == nil {
		return nil, fmt.Errorf("no condition %s yet", cond)
	}
	return c, nil
}

// TestTenantCannotReadTheManagersToken: bootstrap data written for
// upstream CAPP asks for {{ .apiKey }} on a control-plane machine whose
// PacketCluster names no credentials Secret. The manager's own token must
// not be written into the tenant's user-data Secret; the machine says why
// it renders nothing.
func TestTenantCannotReadTheManagersToken(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, c := tenant(t)
	cluster(t, c, ns, "leak", "")
	pm := machine(t, c, ns, "leak", "cp-0", true, "#cloud-config\nwrite_files:\n- path: /etc/metal-token\n  content: {{ .apiKey }}\n")
	eventually(t, "the machine refuses the manager's token", func() error {
		userData := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.UserDataSecretName(pm.Name)}, userData)
		if err == nil && strings.Contains(string(userData.Data[controllers.UserDataKey]), managerToken) {
			t.Fatalf("the manager's token is in Secret %s/%s, which the tenant reads", ns, userData.Name)
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		cond, err := condition(pm, infrav1.BootstrapDataRenderedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.APIKeyNotAvailableReason || !strings.Contains(cond.Message, "spec.credentialsRef") {
			return fmt.Errorf("BootstrapDataRendered: %s %s %q", cond.Status, cond.Reason, cond.Message)
		}
		return nil
	})

	// With a credentials Secret of its own, the cluster gets its own token,
	// which its namespace already holds.
	const tenantToken = "team-b-own-token"
	secret(t, c, ns, "own", tenantToken, "")
	cluster(t, c, ns, "own", "own")
	own := machine(t, c, ns, "own", "cp-1", true, "#cloud-config\nwrite_files:\n- path: /etc/metal-token\n  content: {{ .apiKey }}\n")
	eventually(t, "the machine renders its cluster's own token", func() error {
		userData := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.UserDataSecretName(own.Name)}, userData); err != nil {
			return err
		}
		if data := string(userData.Data[controllers.UserDataKey]); strings.Contains(data, managerToken) || !strings.Contains(data, tenantToken) {
			return fmt.Errorf("the user-data does not hold the cluster's own token alone:\n%s", data)
		}
		return nil
	})
}

// TestTenantCannotPointTheManagersElsewhere: a credentials Secret names a
// listener of the tenant's in baseURL, for a PacketCluster's machine and
// for a VRF pool. Both are refused with a condition naming the key and the
// value, and the listener hears nothing.
func TestTenantCannotPointTheManagersElsewhere(t *testing.T) {
	requireEnv(t)
	var requests atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"devices":[],"meta":{"total":0}}`))
	}))
	defer listener.Close()
	ns, c := tenant(t)
	secret(t, c, ns, "elsewhere", "team-b-token", listener.URL)
	cluster(t, c, ns, "elsewhere", "elsewhere")
	pm := machine(t, c, ns, "elsewhere", "m-0", false, "#cloud-config\n")
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec: v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
			ID: simtest.VRF, CredentialsRef: v1alpha1.SecretReference{Name: "elsewhere"},
		}},
	}
	if err := c.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	refused := func(cond *metav1.Condition, err error) error {
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.EndpointNotAllowedReason || !strings.Contains(cond.Message, "baseURL") || !strings.Contains(cond.Message, listener.URL) {
			return fmt.Errorf("%s: %s %q; the listener had %d requests", cond.Type, cond.Reason, cond.Message, requests.Load())
		}
		return nil
	}
	eventually(t, "the machine refuses the endpoint", func() error {
		return refused(condition(pm, infrav1.DeviceReadyCondition))
	})
	eventually(t, "the pool refuses the endpoint", func() error {
		return refused(condition(pool, v1alpha1.SourcesResolvedCondition))
	})
	if n := requests.Load(); n != 0 {
		t.Errorf("the tenant's listener got %d requests from the managers", n)
	}
}

// TestTenantCannotKeepTheCreationSlots: a tenant's machines hold every
// creation slot (their devices provisioning) and then vanish without their
// delete path, finalizers removed. Another team's machine, waiting for a
// slot meanwhile, gets one.
func TestTenantCannotKeepTheCreationSlots(t *testing.T) {
	requireEnv(t)
	ns, c := tenant(t)
	secret(t, c, ns, "metal", simtest.APIKey, metalSim.URL)
	cluster(t, c, ns, "greedy", "metal")
	var held []*infrav1.PacketMachine
	for i := range maxCreations {
		pm := machine(t, c, ns, "greedy", fmt.Sprintf("m-%d", i), false, "#cloud-config\n")
		eventually(t, "the tenant's machine has its device in creation", func() error {
			return deviceReadyIs(pm, infrav1.DeviceProvisioningReason, "")
		})
		held = append(held, pm)
	}

	waiting := otherTeamMachine(t)
	eventually(t, "the other team's machine waits for a slot", func() error {
		return deviceReadyIs(waiting, infrav1.WaitingForCreationSlotReason, "")
	})

	for _, pm := range held {
		vanish(t, c, pm)
	}
	eventually(t, "the other team's machine gets a slot", func() error {
		return deviceReadyIs(waiting, infrav1.DeviceProvisioningReason, "")
	})
}

// deviceReadyIs reads pm again and fails unless its DeviceReady condition
// has the reason, and a message containing text.
func deviceReadyIs(pm *infrav1.PacketMachine, reason, text string) error {
	cond, err := condition(pm, infrav1.DeviceReadyCondition)
	if err != nil {
		return err
	}
	if cond.Reason != reason || !strings.Contains(cond.Message, text) {
		return fmt.Errorf("DeviceReady: %s %q; want %s, %q", cond.Reason, cond.Message, reason, text)
	}
	return nil
}

// otherTeamMachine creates, as the operator, a namespace of another team
// with its credentials, a Cluster and one machine of it, which wants a
// creation slot.
func otherTeamMachine(t *testing.T) *infrav1.PacketMachine {
	t.Helper()
	other, err := env.NewNamespace(context.Background(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	secret(t, env.Client, other, "metal", simtest.APIKey, metalSim.URL)
	cluster(t, env.Client, other, "patient", "metal")
	return machine(t, env.Client, other, "patient", "m-0", false, "#cloud-config\n")
}

// TestTenantCannotHoldTheCreationSlotsWithPoweredOffDevices: a tenant's
// machines, as many as there are creation slots, get their devices, which
// become active; the tenant powers them off with its own token. Before, the
// manager took a slot back for each device it saw not active, and held it
// while the device stayed off: another team's machine waited for a slot
// for good. A slot is now held only while a device is queued or
// provisioning, and the other team's machine gets one.
func TestTenantCannotHoldTheCreationSlotsWithPoweredOffDevices(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, c := tenant(t)
	secret(t, c, ns, "metal", simtest.APIKey, metalSim.URL)
	cluster(t, c, ns, "dormant", "metal")
	var machines []*infrav1.PacketMachine
	for i := range maxCreations {
		machines = append(machines, machine(t, c, ns, "dormant", fmt.Sprintf("m-%d", i), false, "#cloud-config\n"))
	}
	eventually(t, "the tenant's devices are active", func() error {
		metalClock.Advance(time.Hour)
		for _, pm := range machines {
			if err := deviceReadyIs(pm, infrav1.DeviceActiveReason, "active"); err != nil {
				return err
			}
		}
		return nil
	})
	api := simtest.SDK(metalSim.URL, simtest.APIKey)
	for _, pm := range machines {
		off := metalv1.DeviceActionInput{Type: metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF}
		if _, err := api.DevicesApi.PerformAction(ctx, device.DeviceID(pm.Spec.ProviderID)).DeviceActionInput(off).Execute(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the manager sees the tenant's devices powered off", func() error {
		for _, pm := range machines {
			if err := deviceReadyIs(pm, infrav1.DeviceProvisioningReason, "inactive"); err != nil {
				return err
			}
		}
		return nil
	})

	waiting := otherTeamMachine(t)
	eventually(t, "the other team's machine gets a slot", func() error {
		return deviceReadyIs(waiting, infrav1.DeviceProvisioningReason, "queued")
	})
}

// vanish removes pm's finalizers and deletes it as c, so that the manager
// never runs its delete path: the delete is made on the version without
// finalizers, and tried again if the manager put its finalizer back first.
func vanish(t *testing.T, c client.Client, pm *infrav1.PacketMachine) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "the tenant's machine vanishes", func() error {
		current := &infrav1.PacketMachine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pm), current); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		current.Finalizers = nil
		if err := c.Update(ctx, current); err != nil {
			return err
		}
		return c.Delete(ctx, current, client.Preconditions{ResourceVersion: ptr.To(current.ResourceVersion)})
	})
}

// TestTenantCannotJoinAnotherTeamsAllocationDomain: a second endpoint the
// operator allows answers with the same project and VRF IDs as the one
// another team's pool reads. That team's claim holds the VRF's first
// address; the tenant's pool, whose Secret names the second endpoint, is an
// allocation domain of its own: its claim gets that same first address, so
// it neither sees which addresses the other team uses nor exhausts them.
func TestTenantCannotJoinAnotherTeamsAllocationDomain(t *testing.T) {
	requireEnv(t)
	other, err := env.NewNamespace(context.Background(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	secret(t, env.Client, other, "metal", simtest.APIKey, metalSim.URL)
	theirs := claimAddress(t, env.Client, other)
	ns, c := tenant(t)
	secret(t, c, ns, "metal", simtest.APIKey, otherSim.URL)
	if ours := claimAddress(t, c, ns); ours != theirs {
		t.Errorf("the tenant's claim got %s, not %s: its pool shares the other team's allocation domain", ours, theirs)
	}
}

// claimAddress creates, as c, a pool of the simulators' VRF gateway subnet
// (credentials in the Secret metal) and a claim of it, and returns the
// address the claim gets.
func claimAddress(t *testing.T, c client.Client, ns string) string {
	t.Helper()
	ctx := context.Background()
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
		Spec: v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
			ID: simtest.VRF, CredentialsRef: v1alpha1.SecretReference{Name: "metal"},
			ProjectID: simtest.Project, Metro: simtest.Metro, ReservationIDs: []string{simtest.NodesReservation},
		}},
	}
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name,
		}},
	}
	for _, obj := range []client.Object{pool, claim} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var address string
	eventually(t, "the claim is bound", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.AddressRef.Name == "" {
			return errors.New("not bound")
		}
		a := &ipamv1.IPAddress{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim.Status.AddressRef.Name}, a); err != nil {
			return err
		}
		address = a.Spec.Address
		return nil
	})
	return address
}

// theirs is the Metal API as another team uses it: the shared project, with
// the simulator's token.
func theirs(t *testing.T) *metal.Client {
	t.Helper()
	api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// theirTags are the tags the provider writes on what another team's
// cluster "prod" in namespace team-a owns, uidTag first.
func theirTags(uidTag string) []string {
	return []string{uidTag, device.ClusterTagPrefix + "prod", device.NamespaceTagPrefix + "team-a"}
}

// TestTenantCannotActOnAnotherTeamsDevice: in the project the teams share,
// another team's machine has a device. The tenant names it in a
// PacketMachine's spec.providerID, then deletes that machine; and tries to
// pass a device of its own off as another machine's with a reserved tag in
// spec.tags. The first is refused with a condition naming the field and
// the value, and the device is neither changed nor deleted; the second is
// refused by the API server naming the tag.
func TestTenantCannotActOnAnotherTeamsDevice(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	api := theirs(t)
	const theirMachineTag = device.MachineTagPrefix + "0b7c2f0e-0000-4000-8000-00000000000a"
	victim, err := api.CreateDevice(ctx, metal.DeviceRequest{
		Tag: theirMachineTag, Tags: theirTags(theirMachineTag)[1:],
		Hostname: "prod-worker-0", Plan: "c3.small.x86", Metro: simtest.Metro, OperatingSystem: "ubuntu_24_04",
	})
	if err != nil {
		t.Fatal(err)
	}
	stolen := "equinixmetal://" + victim.GetId()

	ns, c := tenant(t)
	secret(t, c, ns, "metal", simtest.APIKey, metalSim.URL)
	cluster(t, c, ns, "thief", "metal")
	thief := machine(t, c, ns, "thief", "m-0", false, "#cloud-config\n", func(pm *infrav1.PacketMachine) { pm.Spec.ProviderID = stolen })
	eventually(t, "the machine refuses the device", func() error {
		cond, err := condition(thief, infrav1.DeviceReadyCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.DeviceNotOwnedReason || !strings.Contains(cond.Message, "spec.providerID") || !strings.Contains(cond.Message, stolen) {
			return fmt.Errorf("DeviceReady: %s %s %q", cond.Status, cond.Reason, cond.Message)
		}
		return nil
	})
	if err := c.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tenant's machine is deleted", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(thief), &infrav1.PacketMachine{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
	after, err := api.GetDevice(ctx, victim.GetId())
	if err != nil {
		t.Fatalf("the other team's device is gone after the tenant deleted its machine: %v", err)
	}
	if !slices.Equal(after.GetTags(), victim.GetTags()) || after.GetState() != victim.GetState() {
		t.Errorf("the other team's device changed: tags %v state %s, was tags %v state %s",
			after.GetTags(), after.GetState(), victim.GetTags(), victim.GetState())
	}

	for _, tag := range []string{theirMachineTag, device.ClusterTagPrefix + "prod", "capp:machine-uid:prod-worker-0"} {
		err := c.Create(ctx, &infrav1.PacketMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "impostor"},
			Spec:       infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Tags: []string{"team-b", tag}},
		})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.tags") || !strings.Contains(err.Error(), tag) {
			t.Errorf("a PacketMachine with the tag %s in spec.tags: %v; want it refused naming spec.tags and the tag", tag, err)
		}
	}
}

// TestTenantCannotTakeAnotherTeamsReservation: another team's cluster has
// its endpoint reservation in the shared project. The tenant names it in
// its PacketCluster's reservation annotation, then deletes that cluster.
// The reservation is neither used as the tenant's endpoint nor released.
func TestTenantCannotTakeAnotherTeamsReservation(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	api := theirs(t)
	reserved, err := api.ReservePublicIPv4(ctx, simtest.Metro, theirTags(device.EndpointTagPrefix+"0b7c2f0e-0000-4000-8000-00000000000b"))
	if err != nil {
		t.Fatal(err)
	}
	id := reserved.GetId()

	ns, c := tenant(t)
	secret(t, c, ns, "metal", simtest.APIKey, metalSim.URL)
	pc := cluster(t, c, ns, "thief", "metal", func(pc *infrav1.PacketCluster) {
		pc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{}
		pc.Annotations = map[string]string{infrav1.EndpointReservationAnnotation: id}
	})
	eventually(t, "the cluster refuses the reservation", func() error {
		cond, err := condition(pc, infrav1.ControlPlaneEndpointReadyCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.EndpointReservationNotOwnedReason || !strings.Contains(cond.Message, infrav1.EndpointReservationAnnotation) || !strings.Contains(cond.Message, id) {
			return fmt.Errorf("ControlPlaneEndpointReady: %s %s %q", cond.Status, cond.Reason, cond.Message)
		}
		return nil
	})
	if host := pc.Spec.ControlPlaneEndpoint.Host; host != "" {
		t.Errorf("the tenant's cluster took %s as its endpoint", host)
	}
	if err := c.Delete(ctx, pc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tenant's PacketCluster is deleted", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(pc), &infrav1.PacketCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
	after, err := api.GetIPReservation(ctx, id)
	if err != nil {
		t.Fatalf("the other team's reservation is gone after the tenant deleted its cluster: %v", err)
	}
	if len(after.GetAssignments()) != 0 {
		t.Errorf("the other team's reservation was assigned: %v", after.GetAssignments())
	}
}

// TestOnlyTheManagerMovesAPool: a user who may edit GlobalMetalVRFIPPools
// (not a tenant: those are cluster-scoped) edits where a pool allocates.
// Only the manager, as its ServiceAccount, may: the edits are refused
// naming the annotation, while the manager's own stamp went through and
// its hand-over token is in a Secret of its namespace.
func TestOnlyTheManagerMovesAPool(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	const operator = "pool-operator"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "edit-global-pools"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"globalmetalvrfippools"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operator}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(env.ConfigAs(rest.ImpersonationConfig{UserName: operator}), client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	pool := &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.70.0.2-10.70.0.9"}, Prefix: ptr.To[int32](24), Gateway: "10.70.0.1"},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the manager stamps the pool", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		if pool.Annotations[v1alpha1.AllocatingClusterAnnotation] == "" || pool.Annotations[v1alpha1.HandoverHashAnnotation] == "" {
			return fmt.Errorf("annotations %v", pool.Annotations)
		}
		return nil
	})
	token := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "handover-" + string(pool.UID)}, token); err != nil {
		t.Fatalf("the hand-over token's Secret: %v", err)
	}

	for key, value := range map[string]*string{
		v1alpha1.AllocatingClusterAnnotation: ptr.To("another-management-cluster"),
		v1alpha1.HandoverHashAnnotation:      ptr.To(strings.Repeat("0", 64)),
		v1alpha1.HandoverTokenAnnotation:     ptr.To(systemNamespace + "/handover-forged"),
	} {
		for _, v := range []*string{value, nil} {
			if _, has := pool.Annotations[key]; v == nil && !has {
				continue // nothing to remove: no hand-over yet
			}
			edited := pool.DeepCopy()
			if v == nil {
				delete(edited.Annotations, key)
			} else {
				edited.Annotations[key] = *v
			}
			err := c.Patch(ctx, edited, client.MergeFrom(pool))
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.annotations["+key+"]") || !strings.Contains(err.Error(), "only the IPAM manager") {
				t.Errorf("setting annotation %s to %v: %v; want it refused naming the annotation", key, ptr.Deref(v, "(removed)"), err)
			}
		}
	}
	edited := pool.DeepCopy()
	edited.Annotations["team"] = "platform"
	if err := c.Patch(ctx, edited, client.MergeFrom(pool)); err != nil {
		t.Errorf("an edit of another annotation: %v", err)
	}
}

// TestTenantCannotWriteAnIPAddressOfAPool is the attack of a tenant who,
// with every verb on IPAddresses in its namespace, holds addresses of a
// shared pool without claims: it creates an IPAddress "anchor" of another
// provider's pool, then IPAddresses of the same name naming a shared
// GlobalMetalVRFIPPool of five addresses, each with another one, a claimRef
// to no claim and an owner reference with its own claim's UID. Before the
// IPAddress webhook asked who may (v1alpha1.AssignVerb), each create was
// refused AlreadyExists after the webhook had recorded the address: five
// records without an IPAddress, and the other team's claim PoolExhausted.
// Now each is refused naming spec.poolRef and the verb, as is an IPAddress
// of the tenant's own pool, no record is left, and the other team's claim
// is served the pool's first address.
func TestTenantCannotWriteAnIPAddressOfAPool(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, c := tenant(t)
	shared := sharedPool(t, ns+"-tiny", "10.9.3.0/29", "10.9.3.1")
	own := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.9.4.0/29"}, Prefix: ptr.To[int32](29), Gateway: "10.9.4.1"},
	}
	if err := c.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	held := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "real"},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: own.Name,
		}},
	}
	if err := c.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	address := func(kind, pool, ip, claim string) *ipamv1.IPAddress {
		return &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "anchor", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: held.Name, UID: held.UID,
			}}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: claim},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool},
				Address:  ip, Prefix: ptr.To[int32](29), Gateway: "10.9.3.1",
			},
		}
	}
	// Not a pool of ours: no webhook of ours looks at it.
	anchor := address("InClusterIPPool", "elsewhere", "10.9.5.2", held.Name)
	anchor.Spec.PoolRef.APIGroup = "ipam.cluster.x-k8s.io"
	if err := c.Create(ctx, anchor); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.poolRef") || !strings.Contains(err.Error(), `"`+v1alpha1.AssignVerb+`"`) {
			t.Errorf("%s: %v; want it forbidden naming spec.poolRef and verb %q", what, err, v1alpha1.AssignVerb)
		} else {
			t.Logf("refused: %v", err)
		}
	}
	for i := range 5 {
		ip := fmt.Sprintf("10.9.3.%d", 2+i)
		refused("the tenant's IPAddress of the shared pool with "+ip, c.Create(ctx, address(v1alpha1.GlobalMetalVRFIPPoolKind, shared.Name, ip, fmt.Sprintf("ghost-%d", i))))
	}
	mine := address(v1alpha1.MetalVRFIPPoolKind, own.Name, "10.9.4.6", "ghost-own")
	mine.Name = "mine"
	refused("the tenant's IPAddress of its own pool", c.Create(ctx, mine))
	noRecordsOf(t, ns, "ghost-")

	other, err := env.NewNamespace(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	theirs := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "node-0"},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: shared.Name,
		}},
	}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other team's claim is served the shared pool's first address", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil {
			return err
		}
		if theirs.Status.AddressRef.Name == "" {
			return fmt.Errorf("not bound: %v", theirs.Status.Conditions)
		}
		bound := &ipamv1.IPAddress{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: other, Name: theirs.Status.AddressRef.Name}, bound); err != nil {
			return err
		}
		if bound.Spec.Address != "10.9.3.2" {
			t.Fatalf("the other team's claim was bound to %s; want 10.9.3.2", bound.Spec.Address)
		}
		return nil
	})
}

// sharedPool creates, as the operator, a GlobalMetalVRFIPPool of the /29
// network with its gateway: a pool every team's claims share.
func sharedPool(t *testing.T, name, network, gateway string) *v1alpha1.GlobalMetalVRFIPPool {
	t.Helper()
	pool := &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{network}, Prefix: ptr.To[int32](29), Gateway: gateway},
	}
	if err := env.Client.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// noRecordsOf fails if an allocation record, held or retired, names a claim
// of namespace ns whose name starts with prefix. The managers run as
// installed: their records live in their own namespace.
func noRecordsOf(t *testing.T, ns, prefix string) {
	t.Helper()
	var leases coordinationv1.LeaseList
	if err := env.Client.List(context.Background(), &leases, client.InNamespace(systemNamespace), client.HasLabels{v1alpha1.AllocationDomainLabel}); err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases.Items {
		if strings.HasPrefix(lease.Annotations[v1alpha1.AllocationClaimAnnotation], ns+"/"+prefix) {
			t.Errorf("record %s of %s for %s left (retired: %q)", lease.Name, lease.Annotations[v1alpha1.AllocationAddressAnnotation],
				lease.Annotations[v1alpha1.AllocationClaimAnnotation], lease.Labels[v1alpha1.AllocationRetiredLabel])
		}
	}
}

// TestEntrustedWriterCannotBindAClaimToAReservedAddress is the attack of a
// tenant whom an operator entrusted with v1alpha1.AssignVerb on a shared
// pool, and who writes the IPAddress of its own claim by hand with the
// pool's gateway (then its network address, then one outside it): the
// IPAddress webhook refuses each, naming spec.address and the value, no
// record of the address is left, and the claim, once its Cluster runs, is
// served an address the pool hands out.
func TestEntrustedWriterCannotBindAClaimToAReservedAddress(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, c := tenant(t)
	pool := sharedPool(t, ns+"-shared", "10.9.1.0/29", "10.9.1.1")
	entrust := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-assign"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"globalmetalvrfippools"},
			ResourceNames: []string{pool.Name}, Verbs: []string{v1alpha1.AssignVerb},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: entrust.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: entrust.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}},
	}
	for _, obj := range []client.Object{entrust, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The claim waits on its paused Cluster while the tenant writes its IPAddress.
	paused := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
	if err := c.Create(ctx, paused); err != nil {
		t.Fatal(err)
	}
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-0", Labels: map[string]string{clusterv1.ClusterNameLabel: paused.Name}},
		Spec: ipamv1.IPAddressClaimSpec{
			ClusterName: paused.Name,
			PoolRef:     ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: pool.Name},
		},
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	for _, reserved := range []string{"10.9.1.1", "10.9.1.0", "10.9.2.5"} {
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim.Name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID,
			}}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: pool.Name},
				Address:  reserved, Prefix: ptr.To[int32](29), Gateway: "10.9.1.1",
			},
		}
		err := c.Create(ctx, address)
		if err == nil || !strings.Contains(err.Error(), "spec.address") || !strings.Contains(err.Error(), reserved) {
			t.Errorf("the tenant's IPAddress with %s: %v; want it refused naming spec.address and the value", reserved, err)
		} else {
			t.Logf("refused: %v", err)
		}
	}
	noRecordsOf(t, ns, claim.Name)

	paused.Spec.Paused = ptr.To(false)
	if err := c.Update(ctx, paused); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim is served an address the pool hands out", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if claim.Status.AddressRef.Name == "" {
			return fmt.Errorf("not bound: %v", claim.Status.Conditions)
		}
		address := &ipamv1.IPAddress{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim.Status.AddressRef.Name}, address); err != nil {
			return err
		}
		if address.Spec.Address != "10.9.1.2" {
			t.Fatalf("the claim was bound to %s; want the lowest address the pool hands out, 10.9.1.2", address.Spec.Address)
		}
		return nil
	})
}

// TestTenantCannotRetireASharedPoolsAddresses is the attack of a tenant who
// takes every address of a shared GlobalMetalVRFIPPool of five with claims
// of its Cluster, then does to its own objects what clusterctl move does on
// the source: labels the IPAddresses with a Cluster that does not exist,
// marks them as moved (metal-vrf.ipam.cluster.x-k8s.io/moved, the claim's
// UID), annotates its claims delete-for-move, deletes its Cluster with its
// finalizers removed, then deletes its claims. An IPAddress of a global
// pool left without its claim, marked moved, whose Cluster is gone, is what
// move leaves: the manager retires its address for good (kept out of use
// until every pool of the VRF is deleted), and the pool would stay
// exhausted for every team. Only the manager and whoever may assign the
// pool's addresses (move runs as an administrator) may write the mark: the
// tenant's marks are refused, its deletions mark nothing, its claims'
// addresses are freed, and the other team's five claims are served, with
// no record of the tenant's claims, held or retired, left.
func TestTenantCannotRetireASharedPoolsAddresses(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns, c := tenant(t)
	shared := sharedPool(t, ns+"-tiny", "10.9.6.0/29", "10.9.6.1")
	running := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "running"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}}
	if err := c.Create(ctx, running); err != nil {
		t.Fatal(err)
	}
	claims := make([]*ipamv1.IPAddressClaim, 5)
	for i := range claims {
		claims[i] = &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{clusterv1.ClusterNameLabel: running.Name}},
			Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
				APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: shared.Name,
			}},
		}
		if err := c.Create(ctx, claims[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, claim := range claims {
		eventually(t, "the tenant's claim "+claim.Name+" is bound", func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
				return err
			}
			if claim.Status.AddressRef.Name == "" {
				return fmt.Errorf("not bound: %v", claim.Status.Conditions)
			}
			return nil
		})
	}
	// What move leaves, in the order that leaves the manager no moment to
	// see a claimless IPAddress whose Cluster still runs.
	var left ipamv1.IPAddressList
	if err := c.List(ctx, &left, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range left.Items {
		label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+clusterv1.ClusterNameLabel+`":"gone"}}}`))
		if err := c.Patch(ctx, &left.Items[i], label); err != nil {
			t.Fatal(err)
		}
		mark := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1alpha1.MovedAnnotation+`":"`+
			string(left.Items[i].OwnerReferences[0].UID)+`"}}}`))
		err := c.Patch(ctx, &left.Items[i], mark)
		switch {
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), v1alpha1.MovedAnnotation) && strings.Contains(err.Error(), `"`+v1alpha1.AssignVerb+`"`):
			refused++
		case err != nil:
			t.Fatalf("marking %s moved: %v; want it done or refused naming the annotation and verb %q", left.Items[i].Name, err, v1alpha1.AssignVerb)
		}
	}
	stripFinalizers := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	if err := c.Patch(ctx, running, stripFinalizers); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	forMove := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+clusterctlv1.DeleteForMoveAnnotation+`":""}}}`))
	for _, claim := range claims {
		if err := c.Patch(ctx, claim, forMove); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "no IPAddress of the tenant's claims is left", func() error {
		if err := c.List(ctx, &left, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(left.Items) > 0 {
			return fmt.Errorf("%d IPAddresses left", len(left.Items))
		}
		return nil
	})
	if refused != len(claims) {
		t.Errorf("the tenant marked %d of its %d IPAddresses moved; want every mark refused", len(claims)-refused, len(claims))
	}

	other, err := env.NewNamespace(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range claims {
		theirs := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: fmt.Sprintf("node-%d", i)},
			Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
				APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: shared.Name,
			}},
		}
		if err := env.Client.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the other team's claim "+theirs.Name+" is served an address of the shared pool", func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil {
				return err
			}
			if theirs.Status.AddressRef.Name == "" {
				return fmt.Errorf("not bound: %v", theirs.Status.Conditions)
			}
			return nil
		})
	}
	noRecordsOf(t, ns, "node-")
}
