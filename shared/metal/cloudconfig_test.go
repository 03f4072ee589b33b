package metal_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// TestConfigFromResourceSetSecret: a ClusterResourceSet Secret carrying the
// cloud provider's Secret gives the token of its cloud-sa.json, however the
// manifest is written, and one without says what it lacks.
func TestConfigFromResourceSetSecret(t *testing.T) {
	const stringData = `apiVersion: v1
kind: Secret
metadata:
  name: metal-cloud-config
  namespace: kube-system
stringData:
  cloud-sa.json: |
    {"apiKey": "t0ken", "projectID": "p-1", "metro": "da"}
`
	for name, tc := range map[string]struct {
		data    map[string]string
		wantKey string
	}{
		"stringData":             {data: map[string]string{"cloud-config.yaml": stringData}, wantKey: "t0ken"},
		"data, base64":           {data: map[string]string{"cloud-config.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: metal-cloud-config\ndata:\n  cloud-sa.json: eyJhcGlLZXkiOiAidDBrZW4ifQ==\n"}, wantKey: "t0ken"},
		"after another document": {data: map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\n" + stringData}, wantKey: "t0ken"},
		"JSON":                   {data: map[string]string{"cloud-config.json": `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"m"},"stringData":{"cloud-sa.json":"{\"apiKey\":\"t0ken\"}"}}`}, wantKey: "t0ken"},
		"another key first":      {data: map[string]string{"0-cni.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", "cloud-config.yaml": stringData}, wantKey: "t0ken"},
		"no apiKey":              {data: map[string]string{"cloud-config.yaml": strings.Replace(stringData, `"apiKey": "t0ken", `, "", 1)}},
		"no Secret":              {data: map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  cloud-sa.json: '{\"apiKey\": \"t0ken\"}'\n"}},
		"not a manifest":         {data: map[string]string{"apiKey": "t0ken"}},
	} {
		t.Run(name, func(t *testing.T) {
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "demo-metal-credentials"},
				Type:       metal.ResourceSetSecretType,
				Data:       map[string][]byte{},
			}
			for k, v := range tc.data {
				secret.Data[k] = []byte(v)
			}
			cfg, err := metal.ConfigFromSecret(secret)
			if tc.wantKey == "" {
				if err == nil || !strings.Contains(err.Error(), "team/demo-metal-credentials") || !strings.Contains(err.Error(), metal.CloudConfigKey) {
					t.Errorf("got %v, %v; want an error naming the Secret and %s", cfg, err, metal.CloudConfigKey)
				}
				return
			}
			if err != nil || cfg.APIKey != tc.wantKey {
				t.Errorf("got %v, %v; want the apiKey %q", cfg, err, tc.wantKey)
			}
		})
	}
}
