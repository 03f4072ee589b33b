package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// reportNetwork does for the device what the last step of CAPP's network
// script does on a real one: tell the platform, through the metadata
// service's user_state_url, that the node configured its network. The
// emulator runs no script and has no address per device, so it posts the
// same report through the simulator's control for it (POST
// /_sim/devices/{id}/user-state), which records it as the metadata service
// does, with the project's API key as the simulator's controls ask.
func reportNetwork(ctx context.Context, simURL, apiKey, deviceID string) error {
	body, err := json.Marshal(map[string]any{"state": device.UserStateSucceeded, "code": 1001, "message": "network_configuration_success"})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, simURL+"/_sim/devices/"+url.PathEscape(deviceID)+"/user-state", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Auth-Token", apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("reporting device %s's network configured: the simulator answered %s", deviceID, resp.Status)
	}
	return nil
}
