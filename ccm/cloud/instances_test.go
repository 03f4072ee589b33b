package cloud_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/metal-vrf/cluster-api-metal-vrf/ccm/cloud"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// world is a simulator of the example world, the provider under test and
// a client of the same project that makes the devices.
type world struct {
	sim      *simtest.Sim
	provider *cloud.Cloud
	metal    *metal.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	s, err := simtest.Start(sim.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg := cloud.Config{APIKey: simtest.APIKey, ProjectID: simtest.Project, BaseURL: s.URL}
	provider, err := cloud.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := metal.NewClient(metal.Config{APIKey: cfg.APIKey, ProjectID: cfg.ProjectID, BaseURL: cfg.BaseURL})
	if err != nil {
		t.Fatal(err)
	}
	return &world{sim: s, provider: provider, metal: client}
}

// device creates an active device named hostname, in facility when given,
// else anywhere in the metro.
func (w *world) device(t *testing.T, hostname, facility string) *metalv1.Device {
	t.Helper()
	d, err := w.metal.CreateDevice(context.Background(), metal.DeviceRequest{
		Tag: "test:" + hostname + ":" + facility, Hostname: hostname, Plan: "m3.small.x86",
		Metro: simtest.Metro, Facility: facility, OperatingSystem: "ubuntu_24_04",
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func node(name, providerID, nodeIP string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if nodeIP != "" {
		n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: nodeIP}
	}
	return n
}

// ownAddresses are the device's own addresses as node addresses, in the
// API's order.
func ownAddresses(t *testing.T, d *metalv1.Device) []corev1.NodeAddress {
	t.Helper()
	var out []corev1.NodeAddress
	for _, a := range d.GetIpAddresses() {
		kind := corev1.NodeInternalIP
		if a.GetPublic() {
			kind = corev1.NodeExternalIP
		}
		out = append(out, corev1.NodeAddress{Type: kind, Address: a.GetAddress()})
	}
	if len(out) != 3 {
		t.Fatalf("device %s has addresses %v, want the simulator's three (public and private IPv4, public IPv6)", d.GetId(), out)
	}
	return out
}

func TestInstanceMetadataDescribesTheDevice(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	d := w.device(t, "node-a", simtest.ReservedFacility)
	own := ownAddresses(t, d)

	// The cluster's endpoint, routed to this device: not the node's own.
	eip, err := w.metal.ReservePublicIPv4(ctx, simtest.Metro, []string{"endpoint"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.metal.AssignIPAddress(ctx, d.GetId(), eip.GetAddress()); err != nil {
		t.Fatal(err)
	}

	// kubelet's --node-ip: the VLAN addresses IPAM gave the node, which
	// the Metal API does not know.
	got, err := w.provider.InstanceMetadata(ctx, node("node-a", cloud.ProviderID(d.GetId()), "10.60.0.5,fd00:60::5"))
	if err != nil {
		t.Fatal(err)
	}
	want := &cloudprovider.InstanceMetadata{
		ProviderID:   "equinixmetal://" + d.GetId(),
		InstanceType: "m3.small.x86",
		NodeAddresses: append(append([]corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.60.0.5"},
			{Type: corev1.NodeInternalIP, Address: "fd00:60::5"},
		}, own...), corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-a"}),
		Region: simtest.Metro,
		Zone:   simtest.ReservedFacility,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("InstanceMetadata (-want +got):\n%s", diff)
	}
}

func TestInstanceMetadataKeepsANodeIPTheDeviceHasOnce(t *testing.T) {
	w := newWorld(t)
	d := w.device(t, "node-a", "")
	own := ownAddresses(t, d)
	private := own[1].Address // kubelet on the device's private address

	got, err := w.provider.InstanceMetadata(context.Background(), node("node-a", cloud.ProviderID(d.GetId()), private))
	if err != nil {
		t.Fatal(err)
	}
	want := append(own, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-a"})
	if diff := cmp.Diff(want, got.NodeAddresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	// Created in the metro: the platform placed it in one of the metro's
	// facilities, which is its zone.
	if got.Region != simtest.Metro || got.Zone != d.Facility.GetCode() || !strings.HasPrefix(got.Zone, simtest.Metro) {
		t.Errorf("region %q zone %q, want %q and the facility of the metro the device reports (%q)", got.Region, got.Zone, simtest.Metro, d.Facility.GetCode())
	}
}

func TestANodeWithoutProviderIDIsFoundByName(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.device(t, "node-ab", "")
	d := w.device(t, "node-a", "") // the filter also matches node-ab

	got, err := w.provider.InstanceMetadata(ctx, node("node-a", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got.ProviderID != cloud.ProviderID(d.GetId()) {
		t.Errorf("provider ID %s, want %s", got.ProviderID, cloud.ProviderID(d.GetId()))
	}
	if exists, err := w.provider.InstanceExists(ctx, node("node-c", "", "")); err != nil || exists {
		t.Errorf("a node no device is named after: exists %v, %v; want false", exists, err)
	}

	w.device(t, "node-a", simtest.ReservedFacility) // a second node-a
	_, err = w.provider.InstanceMetadata(ctx, node("node-a", "", ""))
	var ambiguous *cloud.AmbiguousHostnameError
	if !errors.As(err, &ambiguous) || ambiguous.Devices != 2 {
		t.Errorf("two devices named node-a: %v, want AmbiguousHostnameError of 2", err)
	}
}

func TestADeletedDeviceDoesNotExist(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	d := w.device(t, "node-a", "")
	n := node("node-a", cloud.ProviderID(d.GetId()), "")

	if exists, err := w.provider.InstanceExists(ctx, n); err != nil || !exists {
		t.Fatalf("InstanceExists = %v, %v; want true", exists, err)
	}
	if err := w.metal.DeleteDevice(ctx, d.GetId()); err != nil {
		t.Fatal(err)
	}
	if exists, err := w.provider.InstanceExists(ctx, n); err != nil || exists {
		t.Errorf("deleted device: InstanceExists = %v, %v; want false", exists, err)
	}
	_, err := w.provider.InstanceMetadata(ctx, n)
	if !errors.Is(err, cloudprovider.InstanceNotFound) || !metal.IsNotFound(err) {
		t.Errorf("deleted device: InstanceMetadata error %v, want InstanceNotFound and the API's 404", err)
	}
}

func TestARefusedCallIsNotADeletedDevice(t *testing.T) {
	w := newWorld(t)
	d := w.device(t, "node-a", "")
	w.sim.FailNext(sim.OpFindDeviceByID, 1, http.StatusUnauthorized, 0) // a revoked token
	exists, err := w.provider.InstanceExists(context.Background(), node("node-a", cloud.ProviderID(d.GetId()), ""))
	if !metal.IsUnauthorized(err) {
		t.Errorf("InstanceExists = %v, %v while the API answers 401; want the error, so the node is not deleted", exists, err)
	}
}

func TestAPoweredOffDeviceIsShutdown(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	d := w.device(t, "node-a", "")
	n := node("node-a", cloud.ProviderID(d.GetId()), "")

	if off, err := w.provider.InstanceShutdown(ctx, n); err != nil || off {
		t.Fatalf("active device: InstanceShutdown = %v, %v; want false", off, err)
	}
	api := simtest.SDK(w.sim.URL, simtest.APIKey)
	if _, err := api.DevicesApi.PerformAction(ctx, d.GetId()).
		DeviceActionInput(metalv1.DeviceActionInput{Type: metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF}).Execute(); err != nil {
		t.Fatal(err)
	}
	if off, err := w.provider.InstanceShutdown(ctx, n); err != nil || !off {
		t.Errorf("powered-off device: InstanceShutdown = %v, %v; want true", off, err)
	}
}

func TestAProviderIDOfAnotherProviderIsRefused(t *testing.T) {
	w := newWorld(t)
	for _, id := range []string{
		"aws:///us-east-1a/i-0123",
		"packet://d5a2c0de-0000-4000-8000-000000000001", // the retired provider's scheme
		"equinixmetal://",
		"equinixmetal:///d5a2c0de-0000-4000-8000-000000000001",
		"d5a2c0de-0000-4000-8000-000000000001",
	} {
		_, err := w.provider.InstanceExists(context.Background(), node("node-a", id, ""))
		var wrong *cloud.ProviderIDError
		if !errors.As(err, &wrong) || wrong.ProviderID != id {
			t.Errorf("provider ID %q: InstanceExists error %v, want a ProviderIDError", id, err)
		}
	}
	if n := w.sim.TotalCalls(); n != 0 {
		t.Errorf("%d Metal API calls, want none", n)
	}
}
