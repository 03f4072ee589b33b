package metal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

func credentials(name, rv, token, baseURL string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "capi", Name: name, ResourceVersion: rv},
		Data:       map[string][]byte{"apiKey": []byte(token), "projectID": []byte(simtest.Project), "baseURL": []byte(baseURL)},
	}
}

func TestClientCacheForSecret(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	// The base tuning reaches every client: with one attempt, a 503 is not
	// retried.
	endpoints, err := metal.NewEndpoints(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cache := metal.NewClientCache(metal.Config{Retry: metal.RetryPolicy{MaxAttempts: 1}}, metal.CacheOptions{Endpoints: endpoints})

	c1, err := cache.ForSecret(credentials("a", "1", simtest.APIKey, e.url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.GetVRF(ctx, simtest.VRF); err != nil {
		t.Fatal(err)
	}
	e.sim.FailNext(sim.OpFindVrfByID, 1, http.StatusServiceUnavailable, 0)
	e.sim.ResetCalls()
	if _, err := c1.GetVRF(ctx, simtest.VRF); err == nil || e.sim.Calls(sim.OpFindVrfByID) != 1 {
		t.Errorf("with the base's single attempt: %v after %d calls, want a failure after 1", err, e.sim.Calls(sim.OpFindVrfByID))
	}

	same := func(s *corev1.Secret, want *metal.Client, wantSame bool) *metal.Client {
		t.Helper()
		c, err := cache.ForSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		if (c == want) != wantSame {
			t.Errorf("secret %s@%s: same client %v, want %v", s.Name, s.ResourceVersion, c == want, wantSame)
		}
		return c
	}
	same(credentials("a", "1", simtest.APIKey, e.url), c1, true)
	b := same(credentials("b", "1", simtest.APIKey, e.url), c1, false)
	c2 := same(credentials("a", "2", simtest.APIKey, e.url), c1, false) // rotated
	same(credentials("a", "2", simtest.APIKey, e.url), c2, true)
	same(credentials("b", "1", simtest.APIKey, e.url), b, true)
	cache.Forget(types.NamespacedName{Namespace: "capi", Name: "a"})
	same(credentials("a", "2", simtest.APIKey, e.url), c2, false)
	inMemory := same(credentials("m", "", simtest.APIKey, e.url), nil, false)
	same(credentials("m", "", simtest.APIKey, e.url), inMemory, false)

	// A rotated Secret with a wrong key: the new client is refused by the API.
	wrong, err := cache.ForSecret(credentials("a", "3", "wrong-token-123", e.url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.GetVRF(ctx, simtest.VRF); !metal.IsUnauthorized(err) {
		t.Errorf("rotated to a wrong key: %v, want unauthorized", err)
	}
}

func TestClientCacheErrorsAndFormattingHideTheToken(t *testing.T) {
	const secretToken = "s3cret-token-in-cache"
	cache := metal.NewClientCache(metal.Config{}, metal.CacheOptions{})
	_, err := cache.ForSecret(credentials("bad-url", "1", secretToken, "ftp://nowhere"))
	if err == nil || !strings.Contains(err.Error(), "capi/bad-url") || strings.Contains(err.Error(), secretToken) {
		t.Errorf("bad base URL: %v, want an error naming the secret and not the token", err)
	}
	noKey := credentials("no-key", "1", "", "")
	if _, err := cache.ForSecret(noKey); err == nil || !strings.Contains(err.Error(), "capi/no-key") {
		t.Errorf("no apiKey: %v", err)
	}
	if _, err := cache.ForSecret(nil); err == nil {
		t.Error("a nil secret was accepted")
	}
	_, err = cache.FromEnv(func(k string) string {
		return map[string]string{"METAL_API_KEY": secretToken, "METAL_API_URL": "not a url"}[k]
	})
	if err == nil || strings.Contains(err.Error(), secretToken) {
		t.Errorf("bad METAL_API_URL: %v, want an error without the token", err)
	}

	c, err := cache.ForSecret(credentials("ok", "1", secretToken, ""))
	if err != nil {
		t.Fatal(err)
	}
	envClient, err := cache.FromEnv(func(k string) string { return map[string]string{"METAL_API_KEY": secretToken}[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cache, c, *c, envClient} {
			if out := fmt.Sprintf(format, v); strings.Contains(out, secretToken) {
				t.Errorf("Sprintf(%q, %T) = %s", format, v, out)
			}
		}
	}
}

func TestClientCacheFromEnv(t *testing.T) {
	e := newEnv(t, envOptions{})
	cache := metal.NewClientCache(metal.Config{}, metal.CacheOptions{})
	vars := map[string]string{"PACKET_API_KEY": simtest.APIKey, "METAL_PROJECT_ID": simtest.Project, "METAL_API_URL": e.url}
	getenv := func(k string) string { return vars[k] }
	c, err := cache.FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListDevices(context.Background(), metal.DeviceFilter{}); err != nil {
		t.Errorf("the environment's client: %v", err)
	}
	if again, err := cache.FromEnv(getenv); err != nil || again != c {
		t.Errorf("second FromEnv = %p, %v; want the same client %p", again, err, c)
	}
	vars["METAL_PROJECT_ID"] = simtest.OtherProject
	if changed, err := cache.FromEnv(getenv); err != nil || changed == c || changed.ProjectID() != simtest.OtherProject {
		t.Errorf("FromEnv after a change = %v, %v; want a new client of the other project", changed, err)
	}
	if _, err := cache.FromEnv(func(string) string { return "" }); err == nil {
		t.Error("FromEnv without a key built a client")
	}
}

// TestClientCacheRefusesEndpointsNotAllowed is the attack of a tenant who
// names its own listener in its credentials Secret's baseURL: the cache
// refuses the Secret, naming the key and the value, and the listener never
// hears of the managers.
func TestClientCacheRefusesEndpointsNotAllowed(t *testing.T) {
	var requests atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer listener.Close()
	e := newEnv(t, envOptions{})
	endpoints, err := metal.NewEndpoints(metal.DefaultBaseURL, e.url)
	if err != nil {
		t.Fatal(err)
	}
	cache := metal.NewClientCache(metal.Config{}, metal.CacheOptions{Endpoints: endpoints})
	for _, base := range []string{listener.URL, listener.URL + "/metal/v1", "https://api.equinix.com.attacker.example", "http://api.equinix.com"} {
		c, err := cache.ForSecret(credentials("fake", "1", simtest.APIKey, base))
		notAllowed, ok := errors.AsType[*metal.EndpointNotAllowedError](err)
		if !ok || c != nil {
			t.Errorf("baseURL %s: client %v, error %v; want an EndpointNotAllowedError", base, c, err)
			continue
		}
		if msg := notAllowed.Error(); !strings.Contains(msg, "baseURL") || !strings.Contains(msg, strconv.Quote(base)) || !strings.Contains(msg, "capi/fake") {
			t.Errorf("baseURL %s: %q does not name the Secret, the key and the value", base, msg)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the tenant's listener got %d requests", n)
	}
	// The allowed endpoint, in another spelling, and a path below it.
	for _, base := range []string{e.url + "/metal/v1/", strings.Replace(e.url, "127.0.0.1", "127.0.0.1", 1) + "/"} {
		if _, err := cache.ForSecret(credentials("sim", "1", simtest.APIKey, base)); err != nil {
			t.Errorf("baseURL %s refused: %v", base, err)
		}
	}
	// A Secret naming no baseURL gets the manager's own endpoint.
	if _, err := cache.ForSecret(credentials("default", "1", simtest.APIKey, "")); err != nil {
		t.Errorf("no baseURL: %v", err)
	}
}

// TestClientCacheIsBounded: Secrets made by the thousand do not grow the
// cache past its bound, the least recently used going first; a changed
// Secret's old client and a forgotten Secret's client are gone.
func TestClientCacheIsBounded(t *testing.T) {
	e := newEnv(t, envOptions{})
	endpoints, err := metal.NewEndpoints(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cache := metal.NewClientCache(metal.Config{}, metal.CacheOptions{Endpoints: endpoints, MaxSecrets: 3})
	get := func(name, rv string) *metal.Client {
		t.Helper()
		c, err := cache.ForSecret(credentials(name, rv, simtest.APIKey, e.url))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := get("a", "1")
	get("b", "1")
	get("c", "1")
	if get("a", "1") != a {
		t.Fatal("a was rebuilt while the cache had room")
	}
	for i := range 100 {
		get(fmt.Sprintf("tenant-%d", i), "1")
		if n := cache.Len(); n > 3 {
			t.Fatalf("after %d Secrets the cache holds %d clients, bound 3", i+4, n)
		}
	}
	if get("a", "1") == a {
		t.Error("a, least recently used, was kept past the bound")
	}
	get("x", "1")
	get("x", "2") // rotated: one client for x, not two
	cache.Forget(types.NamespacedName{Namespace: "capi", Name: "a"})
	if n := cache.Len(); n != 2 {
		t.Errorf("after a rotation and a Forget the cache holds %d clients, want 2", n)
	}

	idle := metal.NewClientCache(metal.Config{}, metal.CacheOptions{Endpoints: endpoints, MaxIdle: time.Nanosecond})
	if _, err := idle.ForSecret(credentials("gone", "1", simtest.APIKey, e.url)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // past MaxIdle whatever the machine's speed
	if _, err := idle.ForSecret(credentials("other", "1", simtest.APIKey, e.url)); err != nil {
		t.Fatal(err)
	}
	if n := idle.Len(); n != 1 {
		t.Errorf("a client unused past MaxIdle was kept: %d clients, want 1", n)
	}
}
