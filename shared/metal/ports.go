package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// A port action is a POST, but the platform treats repeating one whose
// effect is in place as a no-op (disbonding a port already out of its bond),
// so it is marked safe to repeat and gets the retries of idempotent calls.
var opDisbondPort = operation{name: "disbondPort", safeToRepeat: true}

// portIncludes expands a port's VLANs, which the API otherwise answers as
// bare references.
var portIncludes = []string{"virtual_networks", "native_virtual_network"}

// DisbondPort takes a port out of its bond; with bulk, every port of the
// bond. Taking eth1 out of a Layer 3 bond gives the hybrid (unbonded) mode.
func (c *Client) DisbondPort(ctx context.Context, portID string, bulk bool) (*metalv1.Port, error) {
	return call(ctx, c, opDisbondPort, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.DisbondPort(ctx, portID).BulkDisable(bulk).Include(portIncludes).Execute()
	})
}
