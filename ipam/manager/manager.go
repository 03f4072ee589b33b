// Package manager assembles the IPAM provider's controller manager. The
// ipam-manager binary, the local environment behind `make run` and the e2e
// suites all start the provider through New, so they run the same thing.
package manager

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/webhooks"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// LeaderElectionID is the lease the replicas of the provider compete for
// (with --watch-filter, followed by the filter: see managerutil.LeaseName).
const LeaderElectionID = "metal-vrf-ipam-leader-election"

// Options configure the manager; each maps to a flag of ipam-manager.
type Options struct {
	managerutil.Options
	// WebhookPort serves the validating webhooks; 0 disables them.
	WebhookPort int
	// WebhookHost and WebhookCertDir locate the webhook server and its certificates.
	WebhookHost    string
	WebhookCertDir string
	// SourceResyncPeriod is how often pool sources (spec.vrf,
	// spec.networkRef) are read again without a triggering event; 0 means
	// controllers.DefaultSourceResyncPeriod.
	SourceResyncPeriod time.Duration
	// MetalTimeout and MetalRetry tune the Metal API clients of VRF pools;
	// zero values take the client's defaults. Tests shorten them.
	MetalTimeout time.Duration
	MetalRetry   metal.RetryPolicy
	// AllocationNamespace holds one record (a Lease) per address in use;
	// empty means the leader election namespace, else the manager's own.
	AllocationNamespace string
	// PendingRecordGrace is how long after it was last confirmed the record
	// of an IPAddress that was not created is reaped; 0 means
	// registry.DefaultPendingGrace.
	PendingRecordGrace time.Duration
	// AdoptionSettle is how long the claims and IPAddresses of an in-cluster
	// pool paused for adoption must be seen unchanged before this provider
	// serves it; 0 means controllers.DefaultAdoptionSettle.
	AdoptionSettle time.Duration
}

// Scheme returns the types the provider reads and writes.
func Scheme() (*runtime.Scheme, error) {
	return managerutil.NewScheme(v1alpha1.AddToScheme,
		cappv1.AddToScheme,      // PacketClusters feed pools through spec.networkRef
		inclusterv1.AddToScheme, // the in-cluster pools are adopted (docs/adoption.md)
	)
}

// The diagnostics endpoint authenticates and authorizes each request through
// the API server (controller-runtime's metrics filters).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// New builds a manager with the provider's controllers and, unless
// WebhookPort is 0, its webhooks. Start it with mgr.Start.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgrOpts, tlsOpts, err := opts.ManagerOptions(scheme, LeaderElectionID)
	if err != nil {
		return nil, err
	}
	compactClaimsAndAddresses(&mgrOpts.Cache)
	if opts.WebhookPort != 0 {
		mgrOpts.WebhookServer = webhook.NewServer(webhook.Options{
			Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.WebhookCertDir, TLSOpts: tlsOpts,
		})
	}
	endpoints, err := opts.Endpoints(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("--metal-endpoints: %w", err)
	}

	allocations, err := opts.allocationNamespace()
	if err != nil {
		return nil, err
	}
	identity, err := processIdentity()
	if err != nil {
		return nil, err
	}
	fenceCheck, lease, err := opts.fenceLeaderElection(cfg, &mgrOpts, identity)
	if err != nil {
		return nil, err
	}
	writer := records.Writer{Identity: identity}
	if lease.Namespace == allocations {
		// The API server's fence finds the Lease in the records' namespace
		// only; elsewhere the process's own fence is the only one.
		writer.Lease = lease.Name
	}

	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	reg, err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		WatchFilterValue:   opts.WatchFilterValue,
		Concurrency:        opts.Concurrency,
		SourceResyncPeriod: opts.SourceResyncPeriod,
		Metal: metal.Config{
			Timeout: opts.MetalTimeout, Retry: opts.MetalRetry, Registerer: ctrlmetrics.Registry,
		},
		Endpoints:           endpoints,
		AllocationNamespace: allocations,
		Fence:               fenceCheck,
		Writer:              writer,
		PendingGrace:        opts.PendingRecordGrace,
		AdoptionSettle:      opts.AdoptionSettle,
	})
	if err != nil {
		return nil, err
	}
	if opts.WebhookPort != 0 {
		if err := webhooks.SetupWithManager(ctx, mgr, reg); err != nil {
			return nil, fmt.Errorf("setting up the webhooks: %w", err)
		}
	}
	var ready healthz.Checker
	if opts.WebhookPort != 0 {
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := managerutil.AddProbes(mgr, ready); err != nil {
		return nil, err
	}
	return mgr, nil
}

// allocationNamespace is where the allocation records live: the flag's,
// else the leader election's, else the Pod's own namespace.
func (opts Options) allocationNamespace() (string, error) {
	if opts.AllocationNamespace != "" {
		return opts.AllocationNamespace, nil
	}
	if opts.LeaderElectionNamespace != "" {
		return opts.LeaderElectionNamespace, nil
	}
	ns, err := inClusterNamespace()
	if err != nil {
		return "", fmt.Errorf("no --allocation-namespace given: %w", err)
	}
	return ns, nil
}

// fenceLeaderElection makes the manager's leader election feed a fence and
// returns the fence's check and the Lease (nil and none without leader
// election). With leader election, a replica allocates only while its lease
// is fresh (see fence), and the API server refuses the records of a replica
// that no longer holds it (config/ipam/fence); without, the allocation
// records alone keep replicas from handing out an address twice.
func (opts Options) fenceLeaderElection(cfg *rest.Config, mgrOpts *ctrl.Options, identity string) (func() error, types.NamespacedName, error) {
	if !opts.LeaderElect {
		return nil, types.NamespacedName{}, nil
	}
	lease, renew := leaseTimings(opts.Options)
	lock, f, err := newFencedLock(cfg, opts.LeaderElectionNamespace, opts.LeaseName(LeaderElectionID), identity, lease, renew)
	if err != nil {
		return nil, types.NamespacedName{}, fmt.Errorf("creating the leader election lock: %w", err)
	}
	mgrOpts.LeaderElectionResourceLockInterface = lock
	mgrOpts.LeaseDuration, mgrOpts.RenewDeadline = ptr.To(lease), ptr.To(renew)
	meta := lock.Interface.(*resourcelock.LeaseLock).LeaseMeta
	return f.check, types.NamespacedName{Namespace: meta.Namespace, Name: meta.Name}, nil
}
