package metal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

// vlans lists the vxlans of a port's VLANs, which the client expands.
func vlans(p *metalv1.Port) []int32 {
	var out []int32
	for _, vn := range p.GetVirtualNetworks() {
		out = append(out, vn.GetVxlan())
	}
	return out
}

func wantUnprocessable(t *testing.T, what string, err error, message string) {
	t.Helper()
	if !metal.IsUnprocessable(err) {
		t.Fatalf("%s: error = %v, want unprocessable", what, err)
	}
	if msgs := strings.Join(metal.ErrorMessages(err), "; "); !strings.Contains(msgs, message) {
		t.Errorf("%s: messages %q do not mention %q", what, msgs, message)
	}
}

func wantNetworkType(t *testing.T, p *metalv1.Port, err error, want metalv1.PortNetworkType) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.GetNetworkType(); got != want {
		t.Fatalf("port %s network type = %s, want %s", p.GetName(), got, want)
	}
}

func TestPortNetworkTypes(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	c := e.client
	d := e.device(t, "node")
	bond0, eth0, eth1 := portID(t, d, "bond0"), portID(t, d, "eth0"), portID(t, d, "eth1")

	p, err := c.GetPort(ctx, bond0)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER3)
	if p.GetType() != metalv1.PORTTYPE_NETWORK_BOND_PORT || !p.Data.GetBonded() {
		t.Errorf("bond0 = %+v", p)
	}

	// A port inside the Layer 3 bond takes no VLAN.
	_, err = c.AssignPort(ctx, eth1, "1001")
	wantUnprocessable(t, "VLAN on a layer-3 port", err, "disbond it before assigning VLANs")
	_, err = c.DisbondPort(ctx, eth0, false)
	wantUnprocessable(t, "disbonding eth0 of a layer-3 bond", err, "eth0 carries the Layer 3 addresses")

	// Hybrid (unbonded): eth1 leaves the bond and takes VLANs, by vxlan or UUID.
	p, err = c.DisbondPort(ctx, eth1, false)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_HYBRID)
	p, err = c.AssignPort(ctx, eth1, "1001")
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_HYBRID)
	p, err = c.AssignPort(ctx, eth1, plainVLANID)
	if err != nil || len(vlans(p)) != 2 || vlans(p)[1] != 1003 {
		t.Fatalf("eth1 VLANs = %v, %v; want [1001 1003]", vlans(p), err)
	}
	p, err = c.AssignPort(ctx, eth1, "1001") // already there: a no-op
	if err != nil || len(vlans(p)) != 2 {
		t.Errorf("repeated assign = %v, %v", vlans(p), err)
	}
	p, err = c.AssignNativeVLAN(ctx, eth1, "1003")
	if err != nil || p.NativeVirtualNetwork.GetVxlan() != 1003 {
		t.Errorf("native VLAN = %+v, %v", p.NativeVirtualNetwork, err)
	}
	_, err = c.BondPort(ctx, eth1, false)
	wantUnprocessable(t, "bonding a port with VLANs", err, "unassign the VLANs of eth1")
	p, err = c.RemoveNativeVLAN(ctx, eth1)
	if err != nil || p.NativeVirtualNetwork != nil {
		t.Errorf("after removing the native VLAN: %+v, %v", p.NativeVirtualNetwork, err)
	}
	for _, vnid := range []string{"1001", "1003"} {
		if _, err := c.UnassignPort(ctx, eth1, vnid); err != nil {
			t.Fatal(err)
		}
	}
	p, err = c.BondPort(ctx, eth1, false)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER3)

	// Hybrid bonded: VLANs on bond0 next to the Layer 3 addresses, tagged only.
	p, err = c.AssignPort(ctx, bond0, "1001")
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_HYBRID_BONDED)
	_, err = c.AssignNativeVLAN(ctx, bond0, "1001")
	wantUnprocessable(t, "native VLAN on hybrid bonded", err, "not supported on bond0")
	_, err = c.ConvertLayer3(ctx, bond0)
	if err != nil {
		t.Errorf("converting a layer-3 bond to layer 3 again: %v, want a no-op", err)
	}

	// Layer 2 bonded, then individual, and back.
	_, err = c.ConvertLayer2(ctx, eth0, "")
	wantUnprocessable(t, "converting an eth port", err, "only bond ports can be converted")
	p, err = c.ConvertLayer2(ctx, bond0, "1002")
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER2_BONDED)
	if got, _ := c.GetDevice(ctx, d.GetId()); len(got.GetIpAddresses()) != 0 {
		t.Errorf("a layer-2 device kept %d IP addresses", len(got.GetIpAddresses()))
	}
	_, err = c.ConvertLayer3(ctx, bond0)
	wantUnprocessable(t, "layer 3 with VLANs", err, "VLANs must first be unassigned")
	_, err = c.DisbondPort(ctx, bond0, true)
	wantUnprocessable(t, "disbonding with VLANs on bond0", err, "unassign the VLANs of bond0")
	for _, vnid := range []string{"1001", "1002"} {
		if _, err := c.UnassignPort(ctx, bond0, vnid); err != nil {
			t.Fatal(err)
		}
	}
	p, err = c.DisbondPort(ctx, bond0, true)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER2_INDIVIDUAL)
	_, err = c.AssignPort(ctx, bond0, "1001")
	wantUnprocessable(t, "VLAN on an empty bond", err, "bond0 has no bonded ports")
	p, err = c.AssignPort(ctx, eth0, "1001")
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER2_INDIVIDUAL)
	if _, err := c.UnassignPort(ctx, eth0, "1001"); err != nil {
		t.Fatal(err)
	}
	p, err = c.BondPort(ctx, eth0, true)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER2_BONDED)
	p, err = c.ConvertLayer3(ctx, bond0)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_LAYER3)
	if got, _ := c.GetDevice(ctx, d.GetId()); len(got.GetIpAddresses()) != 3 {
		t.Errorf("a device back to layer 3 has %d IP addresses, want 3", len(got.GetIpAddresses()))
	}

	_, err = c.AssignPort(ctx, bond0, "1999")
	wantUnprocessable(t, "unknown VLAN", err, "not found in metro da")
	if _, err := c.GetPort(ctx, "00000000-0000-4000-8000-000000000000"); !metal.IsNotFound(err) {
		t.Errorf("unknown port: %v, want not found", err)
	}
}

func TestPortsWaitForAnActiveDevice(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{DeviceProvisionDelay: time.Minute}})
	d := e.device(t, "slow")
	_, err := e.client.DisbondPort(context.Background(), portID(t, d, "eth1"), false)
	wantUnprocessable(t, "disbonding while queued", err, "once it is active")
}
