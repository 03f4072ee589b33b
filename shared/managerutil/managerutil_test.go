package managerutil

import (
	"flag"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// TestLeaderElectionTiming: the flags' defaults are controller-runtime's own
// (15s, 10s, 2s), and what the flags say reaches the manager's options.
func TestLeaderElectionTiming(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o.AddFlags(fs, "objects")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.LeaseDuration != 15*time.Second || o.RenewDeadline != 10*time.Second || o.RetryPeriod != 2*time.Second {
		t.Errorf("defaults %s, %s, %s; want 15s, 10s, 2s", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}

	if err := fs.Parse([]string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}); err != nil {
		t.Fatal(err)
	}
	opts, _, err := o.ManagerOptions(runtime.NewScheme(), "id")
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]struct {
		value *time.Duration
		want  time.Duration
	}{
		"LeaseDuration": {opts.LeaseDuration, 4 * time.Second},
		"RenewDeadline": {opts.RenewDeadline, 3 * time.Second},
		"RetryPeriod":   {opts.RetryPeriod, 500 * time.Millisecond},
	} {
		if got.value == nil || *got.value != got.want {
			t.Errorf("%s = %v, want %s", name, got.value, got.want)
		}
	}

	// Options built in code (tests, the local environment) leave them
	// zero: controller-runtime's defaults apply.
	if opts, _, _ := (Options{}).ManagerOptions(runtime.NewScheme(), "id"); opts.LeaseDuration != nil || opts.RenewDeadline != nil || opts.RetryPeriod != nil {
		t.Errorf("zero durations set %v, %v, %v; want none", opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod)
	}
}

// TestLeaseName: managers of different shards compete for different leases,
// and an unsharded manager keeps the lease earlier versions held.
func TestLeaseName(t *testing.T) {
	for _, tc := range []struct{ filter, want string }{
		{"", "base"},
		{"shard-a", "base-shard-a"},
	} {
		o := Options{WatchFilterValue: tc.filter, LeaderElect: true}
		if got := o.LeaseName("base"); got != tc.want {
			t.Errorf("LeaseName with --watch-filter=%q = %q, want %q", tc.filter, got, tc.want)
		}
		opts, _, err := o.ManagerOptions(runtime.NewScheme(), "base")
		if err != nil {
			t.Fatal(err)
		}
		if got := opts.LeaderElectionID; got != tc.want {
			t.Errorf("LeaderElectionID with --watch-filter=%q = %q, want %q", tc.filter, got, tc.want)
		}
	}
}

// TestDiagnosticsSecureByDefault: without --insecure-diagnostics the
// metrics are served over HTTPS behind the API server's authentication and
// authorization, with pprof beside them; with it, plain HTTP and nothing
// else.
func TestDiagnosticsSecureByDefault(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o.AddFlags(fs, "objects")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	opts, _, err := o.ManagerOptions(runtime.NewScheme(), "id")
	if err != nil {
		t.Fatal(err)
	}
	if m := opts.Metrics; m.BindAddress != ":8443" || !m.SecureServing || m.FilterProvider == nil || m.ExtraHandlers["/debug/pprof/"] == nil {
		t.Errorf("default diagnostics: address %q, secure %t, filter %t, pprof %t; want :8443, HTTPS, authn/authz, pprof",
			m.BindAddress, m.SecureServing, m.FilterProvider != nil, m.ExtraHandlers["/debug/pprof/"] != nil)
	}
	if err := fs.Parse([]string{"--insecure-diagnostics", "--diagnostics-address=:8080"}); err != nil {
		t.Fatal(err)
	}
	opts, _, err = o.ManagerOptions(runtime.NewScheme(), "id")
	if err != nil {
		t.Fatal(err)
	}
	if m := opts.Metrics; m.BindAddress != ":8080" || m.SecureServing || m.FilterProvider != nil || len(m.ExtraHandlers) > 0 {
		t.Errorf("--insecure-diagnostics: address %q, secure %t, filter %t, %d extra handlers; want :8080, plain HTTP, no filter, none",
			m.BindAddress, m.SecureServing, m.FilterProvider != nil, len(m.ExtraHandlers))
	}
}

// TestMetalEndpoints: without --metal-endpoints a Secret may name the public
// API or the manager's METAL_API_URL only; the flag replaces that list, and
// a URL that is none is refused when the flag is parsed.
func TestMetalEndpoints(t *testing.T) {
	env := func(name string) string { return map[string]string{"METAL_API_URL": "http://127.0.0.1:4000"}[name] }
	var o Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o.AddFlags(fs, "objects")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	check := func(allowed, refused []string) {
		t.Helper()
		e, err := o.Endpoints(env)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range allowed {
			if !e.Allows(u) {
				t.Errorf("%s refused, want allowed (list %s)", u, e)
			}
		}
		for _, u := range refused {
			if e.Allows(u) {
				t.Errorf("%s allowed, want refused (list %s)", u, e)
			}
		}
	}
	check([]string{"https://api.equinix.com", "https://API.equinix.com:443/metal/v1/", "http://127.0.0.1:4000"},
		[]string{"http://127.0.0.1:4001", "https://api.equinix.com.evil.example", "http://api.equinix.com"})
	if err := fs.Parse([]string{"--metal-endpoints=https://metal.example/api,http://127.0.0.1:4001"}); err != nil {
		t.Fatal(err)
	}
	check([]string{"https://metal.example/api/metal/v1", "http://127.0.0.1:4001"}, []string{"https://api.equinix.com", "http://127.0.0.1:4000"})
	if err := fs.Parse([]string{"--metal-endpoints=ftp://x"}); err == nil {
		t.Error("--metal-endpoints=ftp://x accepted")
	}
}
