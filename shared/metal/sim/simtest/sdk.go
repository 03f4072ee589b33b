package simtest

import (
	"context"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// SDK returns a bare client of the generated SDK for the simulator at url
// (Sim.URL), sending apiKey: no deadlines, retries or typed errors. Tests
// use it for the wire contract itself and for the calls the providers never
// make, which package metal therefore does not offer.
func SDK(url, apiKey string) *metalv1.APIClient {
	cfg := metalv1.NewConfiguration()
	cfg.Servers = metalv1.ServerConfigurations{{URL: url + "/metal/v1"}}
	cfg.AddDefaultHeader("X-Auth-Token", apiKey)
	return metalv1.NewAPIClient(cfg)
}

// Port reads a port with its VLANs expanded, which the API otherwise answers
// as bare references: the providers read ports only as part of their device.
func Port(ctx context.Context, api *metalv1.APIClient, id string) (*metalv1.Port, error) {
	p, _, err := api.PortsApi.FindPortById(ctx, id).Include([]string{"virtual_networks"}).Execute()
	return p, err
}

// AssignPort gives a port one VLAN (its UUID or its vxlan) by hand, the way a
// person or upstream CAPP's Layer 2 change does; the providers send batches.
func AssignPort(ctx context.Context, api *metalv1.APIClient, portID, vnid string) error {
	_, _, err := api.PortsApi.AssignPort(ctx, portID).PortAssignInput(metalv1.PortAssignInput{Vnid: &vnid}).Execute()
	return err
}
