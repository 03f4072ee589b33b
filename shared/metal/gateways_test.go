package metal_test

import (
	"context"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

func TestMetalGateways(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()

	gateways, err := e.client.ListMetalGateways(ctx, vrfID)
	if err != nil {
		t.Fatal(err)
	}
	if len(gateways) != 2 {
		t.Fatalf("got %d gateways, want 2", len(gateways))
	}
	got := map[string]string{}
	for _, g := range gateways {
		res := g.GetIpReservation()
		got[res.GetId()] = res.MetalGateway.GetGatewayAddress()
	}
	if got[nodesResID] != "10.60.1.1/29" || got[lbResID] != "10.61.0.1/28" {
		t.Errorf("gateway addresses by reservation = %v", got)
	}
	if none, err := e.client.ListMetalGateways(ctx, "another-vrf"); err != nil || len(none) != 0 {
		t.Errorf("gateways of another VRF = %v, %v", none, err)
	}

	g, err := e.client.GetMetalGateway(ctx, nodesGWID)
	if err != nil {
		t.Fatal(err)
	}
	vn, res := g.GetVirtualNetwork(), g.GetIpReservation()
	if g.GetState() != "ready" || vn.GetVxlan() != 1001 || res.GetNetwork() != "10.60.1.0" || g.Vrf.GetName() != "capi-vrf" {
		t.Errorf("gateway = state %s vlan %d network %s vrf %s", g.GetState(), vn.GetVxlan(), res.GetNetwork(), g.Vrf.GetName())
	}
	if _, err := e.client.GetMetalGateway(ctx, "00000000-0000-4000-8000-000000000000"); !metal.IsNotFound(err) {
		t.Errorf("unknown gateway: %v, want not found", err)
	}
}

func TestMetalGatewaysPaginate(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.PageSize = 1 }})
	gateways, err := e.client.ListMetalGateways(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(gateways) != 2 {
		t.Errorf("got %d gateways over pages of 1, want 2", len(gateways))
	}
}

func TestVirtualNetworks(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()

	vlans, err := e.client.ListVirtualNetworks(ctx, "da")
	if err != nil {
		t.Fatal(err)
	}
	if len(vlans) != 3 {
		t.Fatalf("got %d VLANs in da, want 3", len(vlans))
	}
	if other, err := e.client.ListVirtualNetworks(ctx, "ny"); err != nil || len(other) != 1 || other[0].GetId() != simtest.NewYorkVLAN {
		t.Errorf("VLANs in ny = %v, %v; want the New York VLAN only", other, err)
	}
	if other, err := e.client.ListVirtualNetworks(ctx, "fr"); err != nil || len(other) != 0 {
		t.Errorf("VLANs in fr = %v, %v", other, err)
	}

	vn, err := e.client.FindVirtualNetworkByVXLAN(ctx, "da", 1001)
	if err != nil {
		t.Fatal(err)
	}
	if vn.GetId() != nodesVLANID || vn.GetMetroCode() != "da" || len(vn.GetMetalGateways()) != 1 {
		t.Errorf("VLAN 1001 = %+v", vn)
	}
	if ny, err := e.client.FindVirtualNetworkByVXLAN(ctx, "ny", 1001); err != nil || ny.GetId() != simtest.NewYorkVLAN {
		t.Errorf("VLAN 1001 in ny = %v, %v; want the New York VLAN", ny, err)
	}
	if _, err := e.client.FindVirtualNetworkByVXLAN(ctx, "da", 1999); !metal.IsNotFound(err) {
		t.Errorf("VLAN 1999: %v, want not found", err)
	}
	if _, err := e.client.FindVirtualNetworkByVXLAN(ctx, "", 1001); err == nil {
		t.Error("a vxlan without a metro was accepted")
	}

	got, err := e.client.GetVirtualNetwork(ctx, plainVLANID)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetVxlan() != 1003 || got.GetDescription() != "storage (Layer 2 only)" {
		t.Errorf("GetVirtualNetwork = %+v", got)
	}
}
