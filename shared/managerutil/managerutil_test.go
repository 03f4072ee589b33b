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
