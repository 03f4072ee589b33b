package metal

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ResourceSetSecretType is the type of a Secret whose values Cluster API's
// ClusterResourceSets apply to workload clusters, each value a manifest.
const ResourceSetSecretType corev1.SecretType = "addons.cluster.x-k8s.io/resource-set"

// CloudConfigKey is the key of the Equinix Metal cloud provider's (CPEM)
// configuration in its Secret: a JSON object with apiKey and projectID.
const CloudConfigKey = "cloud-sa.json"

// configFromResourceSet reads the credentials of a ClusterResourceSet Secret
// that carries the cloud provider's Secret to a workload cluster: the
// apiKey and projectID of the cloud-sa.json of the first Secret manifest,
// in the order of the keys, that has one with an apiKey. So one Secret in
// the management cluster holds the token for both the provider and the
// workload cluster's cloud provider.
func configFromResourceSet(secret *corev1.Secret) (Config, bool) {
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(secret.Data[k]), 4096)
		for {
			var manifest corev1.Secret
			err := decoder.Decode(&manifest)
			if err != nil { // io.EOF, or a value that is no manifest
				break
			}
			if manifest.Kind != "Secret" {
				continue
			}
			raw, ok := manifest.Data[CloudConfigKey]
			if !ok {
				raw = []byte(manifest.StringData[CloudConfigKey])
			}
			var cloud struct {
				APIKey    string `json:"apiKey"`
				ProjectID string `json:"projectID"`
			}
			if json.Unmarshal(raw, &cloud) == nil && strings.TrimSpace(cloud.APIKey) != "" {
				return Config{APIKey: strings.TrimSpace(cloud.APIKey), ProjectID: strings.TrimSpace(cloud.ProjectID)}, true
			}
		}
	}
	return Config{}, false
}
