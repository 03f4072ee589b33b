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

// A redirect is not followed: the token would go with it to wherever it
// points.
func TestClientFollowsNoRedirect(t *testing.T) {
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere = append(elsewhere, r.Header.Get("X-Auth-Token"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id": "v"}`))
	}))
	defer other.Close()
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	defer allowed.Close()
	c, err := metal.NewClient(metal.Config{APIKey: "secret-token", BaseURL: allowed.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetVRF(context.Background(), "v")
	if len(elsewhere) > 0 {
		t.Fatalf("the redirect was followed: the other server got %d requests, with tokens %q", len(elsewhere), elsewhere)
	}
	if err == nil {
		t.Fatal("a redirect was taken for the VRF")
	}
	t.Logf("the redirect is an error: %v", err)
}

// TestEndpointSpellings: the spellings of one API name one endpoint, which
// names the allocation domain of the VRFs it serves: two spellings must not
// split one VRF into two domains that hand out the same addresses.
func TestEndpointSpellings(t *testing.T) {
	for _, tc := range []struct {
		want      string
		spellings []string
	}{
		{"http://sim:8080/metal/v1", []string{
			"http://sim:8080", "HTTP://SIM:8080/", "http://sim:8080/metal/v1/", "http://sim.:8080/metal/v1",
			"http://sim:8080/%6Detal/v1", "http://sim:8080/./metal/v1", "http://sim:8080//metal//v1",
			"http://sim:8080/x/../metal/v1", "http://sim:8080/metal/v1?page=2#f",
		}},
		{"https://api.equinix.com/metal/v1", []string{"", "https://api.equinix.com:443", "https://API.Equinix.com/metal/v1"}},
		{"http://[::1]/metal/v1", []string{"http://[0:0::1]:80", "http://[::1]/metal/v1"}},
		{"http://127.0.0.1:9/api/metal/v1", []string{"http://127.0.0.1:9/api", "http://127.0.0.1:9/api/%6Detal/v1"}},
	} {
		for _, base := range tc.spellings {
			if got, err := metal.Endpoint(base); err != nil || got != tc.want {
				t.Errorf("Endpoint(%q) = %q, %v; want %q", base, got, err, tc.want)
			}
		}
	}
	if _, err := metal.Endpoint("http://user:secret@sim/metal/v1"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a base URL with user information: %v; want an error that does not repeat the password", err)
	}
}
