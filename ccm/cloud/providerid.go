package cloud

import (
	"fmt"
	"strings"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// ProviderName is the cloud provider's name (--cloud-provider) and the
// scheme of its provider IDs, equinixmetal://<device ID>: what the flavors'
// kubelets set with --provider-id and CAPP writes into
// PacketMachine.spec.providerID, so a node and its Machine agree.
const ProviderName = "equinixmetal"

const providerIDPrefix = ProviderName + "://"

// ProviderIDError: a node's spec.providerID is not one of this provider's.
type ProviderIDError struct {
	ProviderID string
}

func (e *ProviderIDError) Error() string {
	return fmt.Sprintf("provider ID %s is not %s<device ID>", message.Quote(e.ProviderID), providerIDPrefix)
}

// ProviderID is the provider ID of a device.
func ProviderID(deviceID string) string { return providerIDPrefix + deviceID }

// deviceID is the device ID of a provider ID.
func deviceID(providerID string) (string, error) {
	id, ok := strings.CutPrefix(providerID, providerIDPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", &ProviderIDError{ProviderID: providerID}
	}
	return id, nil
}
