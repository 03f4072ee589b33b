package metal_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

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
	cache := metal.NewClientCache(metal.Config{Retry: metal.RetryPolicy{MaxAttempts: 1}})

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
	cache := metal.NewClientCache(metal.Config{})
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
	cache := metal.NewClientCache(metal.Config{})
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
