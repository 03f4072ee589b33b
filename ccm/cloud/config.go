package cloud

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Config is what the cloud controller manager needs to reach the Metal API.
// It is read from the --cloud-config file, the cloud-sa.json of the Secret
// metal-cloud-config that the flavors' ClusterResourceSet copies into the
// workload cluster, and from the environment, which wins (as with CPEM).
type Config struct {
	// APIKey is the project's token. Required.
	APIKey string `json:"apiKey"`
	// ProjectID is the project of the cluster's devices: needed only to
	// find a node's device by name, when the node has no provider ID.
	ProjectID string `json:"projectID"`
	// BaseURL is the Metal API's root; the public API when empty. The
	// operator of the workload cluster wrote it and the token is theirs,
	// so it is trusted as the managers trust their own METAL_API_URL: no
	// allow-list applies.
	BaseURL string `json:"baseURL"`
}

// ErrNoAPIKey: neither the cloud config nor the environment gives a token.
var ErrNoAPIKey = errors.New("no Metal API token: set apiKey in the cloud config or " + metal.EnvAPIKey)

// ReadConfig reads the cloud config (JSON; keys it does not know, such as
// CPEM's eipTag or metro, are ignored) and then the environment through
// getenv: METAL_API_KEY (or PACKET_API_KEY), METAL_PROJECT_ID and
// METAL_API_URL override the file's values when set. A nil reader is no
// file (the binary's --cloud-config is optional). Values are trimmed.
func ReadConfig(file io.Reader, getenv func(string) string) (Config, error) {
	var cfg Config
	if file != nil {
		if err := json.NewDecoder(file).Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("reading the cloud config: %w", err)
		}
	}
	override := func(field *string, names ...string) {
		for _, name := range names {
			if v := strings.TrimSpace(getenv(name)); v != "" {
				*field = v
				return
			}
		}
		*field = strings.TrimSpace(*field)
	}
	override(&cfg.APIKey, metal.EnvAPIKey, metal.EnvLegacyAPIKey)
	override(&cfg.ProjectID, metal.EnvProjectID)
	override(&cfg.BaseURL, metal.EnvBaseURL)
	if cfg.APIKey == "" {
		return Config{}, ErrNoAPIKey
	}
	return cfg, nil
}
