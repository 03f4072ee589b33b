package metal_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

func TestConfigFromSecret(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "capi", Name: "metal-creds"},
		Data: map[string][]byte{
			"apiKey":    []byte("s3cret\n"),
			"projectID": []byte("p-1"),
			"baseURL":   []byte("http://127.0.0.1:8099"),
		},
	}
	cfg, err := metal.ConfigFromSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.APIKey != "s3cret" || cfg.ProjectID != "p-1" || cfg.BaseURL != "http://127.0.0.1:8099" {
		t.Errorf("config = %+v", cfg)
	}

	inMemory := &corev1.Secret{StringData: map[string]string{"apiKey": "k"}}
	if cfg, err := metal.ConfigFromSecret(inMemory); err != nil || cfg.APIKey != "k" {
		t.Errorf("StringData secret: %v, %v", cfg, err)
	}

	delete(secret.Data, "apiKey")
	_, err = metal.ConfigFromSecret(secret)
	if err == nil || !strings.Contains(err.Error(), "capi/metal-creds") || !strings.Contains(err.Error(), `"apiKey"`) {
		t.Errorf("missing apiKey: %v, want an error naming the secret and the key", err)
	}
	if _, err := metal.ConfigFromSecret(nil); err == nil {
		t.Error("a nil secret was accepted")
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	cfg, err := metal.ConfigFromEnv(env(map[string]string{
		"METAL_API_KEY": "new", "PACKET_API_KEY": "old", "METAL_PROJECT_ID": "p", "METAL_API_URL": "http://sim",
	}))
	if err != nil || cfg.APIKey != "new" || cfg.ProjectID != "p" || cfg.BaseURL != "http://sim" {
		t.Errorf("ConfigFromEnv = %+v, %v", cfg, err)
	}
	if cfg, err := metal.ConfigFromEnv(env(map[string]string{"PACKET_API_KEY": "old"})); err != nil || cfg.APIKey != "old" {
		t.Errorf("PACKET_API_KEY fallback = %+v, %v", cfg, err)
	}
	if _, err := metal.ConfigFromEnv(env(nil)); err == nil || !strings.Contains(err.Error(), "METAL_API_KEY") {
		t.Errorf("no key: %v", err)
	}
}

func TestConfigFormattingRedactsTheKey(t *testing.T) {
	cfg := metal.Config{APIKey: "s3cret-token", ProjectID: "p"}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cfg, &cfg, struct{ C metal.Config }{cfg}} {
			if out := fmt.Sprintf(format, v); strings.Contains(out, "s3cret-token") {
				t.Errorf("Sprintf(%q) = %s", format, out)
			}
		}
	}
}

func TestNewClient(t *testing.T) {
	if _, err := metal.NewClient(metal.Config{}); err == nil {
		t.Error("a client without a key was built")
	}
	for _, bad := range []string{"api.equinix.com", "ftp://x", "http://"} {
		if _, err := metal.NewClient(metal.Config{APIKey: "k", BaseURL: bad}); err == nil {
			t.Errorf("base URL %q was accepted", bad)
		}
	}

	// The base URL may or may not end in /metal/v1; requests carry the
	// token and a User-Agent naming the project.
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id": "v"}`))
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/metal/v1/"} {
		c, err := metal.NewClient(metal.Config{APIKey: "k", BaseURL: base, Version: "v1.2.3"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetVRF(context.Background(), "v"); err != nil {
			t.Fatalf("base %s: %v", base, err)
		}
		if got.URL.Path != "/metal/v1/vrfs/v" {
			t.Errorf("base %s: path %s", base, got.URL.Path)
		}
		if got.Header.Get("X-Auth-Token") != "k" || !strings.HasPrefix(got.Header.Get("User-Agent"), "cluster-api-metal-vrf/v1.2.3 ") {
			t.Errorf("headers %v", got.Header)
		}
	}
}
