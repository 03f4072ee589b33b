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
	opts := o.ManagerOptions(runtime.NewScheme(), "id")
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
	if opts := (Options{}).ManagerOptions(runtime.NewScheme(), "id"); opts.LeaseDuration != nil || opts.RenewDeadline != nil || opts.RetryPeriod != nil {
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
		if got := o.ManagerOptions(runtime.NewScheme(), "base").LeaderElectionID; got != tc.want {
			t.Errorf("LeaderElectionID with --watch-filter=%q = %q, want %q", tc.filter, got, tc.want)
		}
	}
}
