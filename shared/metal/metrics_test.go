package metal_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.Registerer = reg }})
	// A second client on the same registry shares the collectors.
	second := newEnv(t, envOptions{config: func(c *metal.Config) { c.Registerer = reg }})
	ctx := context.Background()

	e.sim.FailNext(sim.OpFindVrfs, 1, http.StatusServiceUnavailable, 0)
	if _, err := e.client.ListVRFs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := second.client.ListVRFs(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.GetVRF(ctx, "missing"); !metal.IsNotFound(err) {
		t.Fatal(err)
	}

	want := `
# HELP metal_api_requests_total HTTP requests sent to the Equinix Metal API, by operation and status code ("error" when no answer arrived). Retries count as requests.
# TYPE metal_api_requests_total counter
metal_api_requests_total{code="200",operation="findVrfs"} 2
metal_api_requests_total{code="404",operation="findVrfById"} 1
metal_api_requests_total{code="503",operation="findVrfs"} 1
# HELP metal_api_retries_total Requests to the Equinix Metal API repeated after a rate limit, server error or transport error, by operation.
# TYPE metal_api_retries_total counter
metal_api_retries_total{operation="findVrfs"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "metal_api_requests_total", "metal_api_retries_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "metal_api_request_duration_seconds"); n != 2 {
		t.Errorf("latency histograms: %d series, want one per operation (2)", n)
	}
}
