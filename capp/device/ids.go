package device

import "strings"

// ProviderID is the machine's providerID for a device, upstream's form.
func ProviderID(deviceID string) string { return ProviderIDPrefix + deviceID }

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "equinixmetal://"

// DeviceID is the device ID of a providerID, empty when it is not one of
// this provider's.
func DeviceID(providerID string) string {
	id, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok {
		return ""
	}
	return id
}
