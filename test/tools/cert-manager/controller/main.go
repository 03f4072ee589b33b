// Command controller runs cert-manager's own certificate controllers, built
// from cert-manager's root module: its release's main package lives in a
// module of its own that the module proxy does not serve (docs/cluster.md).
// Only the parts a Cluster API management cluster uses are registered: the
// Certificate controllers, the CertificateRequest approver, and the
// SelfSigned and CA issuers (clusterctl's readiness check uses the first,
// the providers' components the first to make a CA and the second to sign
// their webhooks' certificates). The ACME, Vault and Venafi issuers, the
// ingress and gateway shims are left out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each registers its controller (or issuer) with cert-manager's registry.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The defaults are cert-manager's own (its controller's configuration).
const (
	workers       = 5
	leaseDuration = 60 * time.Second
	renewDeadline = 40 * time.Second
	retryPeriod   = 15 * time.Second
)

func main() {
	logf.InitLogs()
	kubeconfig := flag.String("kubeconfig", "", "a kubeconfig file; the Pod's ServiceAccount when empty")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "kube-system", "where the Secrets of ClusterIssuers live")
	leaderElectionNamespace := flag.String("leader-election-namespace", "kube-system", "the namespace of the leader election Lease")
	metricsAddress := flag.String("metrics-listen-address", ":9402", "where Prometheus metrics are served")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "controller")
	if err := run(ctx, *kubeconfig, *clusterResourceNamespace, *leaderElectionNamespace, *metricsAddress); err != nil {
		logf.FromContext(ctx).Error(err, "controller stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterResourceNamespace, leaderElectionNamespace, metricsAddress string) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	if err := serveMetrics(ctx, g, base, metricsAddress); err != nil {
		return err
	}
	if err := leadThenRun(ctx, factory, leaderElectionNamespace, func(ctx context.Context) error {
		return runControllers(ctx, factory, base)
	}); err != nil {
		return err
	}
	return g.Wait()
}

func serveMetrics(ctx context.Context, g *errgroup.Group, base *controllerpkg.Context, address string) error {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("metrics address %s: %w", address, err)
	}
	server := base.Metrics.NewServer(ln)
	g.Go(func() error {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return server.Shutdown(shutdown) //nolint:contextcheck // ctx is done by now
	})
	g.Go(func() error {
		if err := server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return nil
}

// leadThenRun runs fn once this process holds the controller's Lease, as
// cert-manager's own controller does, and stops it when the Lease is lost.
func leadThenRun(ctx context.Context, factory *controllerpkg.ContextFactory, namespace string, fn func(context.Context) error) error {
	le, err := factory.Build("leader-election")
	if err != nil {
		return err
	}
	id, err := os.Hostname()
	if err != nil {
		return err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, "cert-manager-controller",
		le.Client.CoreV1(), le.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id + "-external-cert-manager-controller", EventRecorder: le.Recorder})
	if err != nil {
		return err
	}
	elected, lost := make(chan struct{}), make(chan struct{})
	go leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(elected) },
			OnStoppedLeading: func() { close(lost) },
		},
	})
	select {
	case <-ctx.Done():
		return nil
	case <-elected:
	}
	leading, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lost:
			cancel()
		case <-leading.Done():
		}
	}()
	if err := fn(leading); err != nil || ctx.Err() != nil {
		return err
	}
	return errors.New("leader election lost")
}

// runControllers starts every registered controller, then the informers they
// registered, and waits for them to stop.
func runControllers(ctx context.Context, factory *controllerpkg.ContextFactory, base *controllerpkg.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for name, construct := range controllerpkg.Known() {
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error { return c.Run(workers, ctx) })
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	return g.Wait()
}
