// Command cainjector runs cert-manager's CA injector, built from
// cert-manager's root module (its release's main package is a module of its
// own that the module proxy does not serve; docs/cluster.md): it writes the
// CA of the Certificate an object's cert-manager.io/inject-ca-from
// annotation names into that webhook configuration's, CRD's or APIService's
// caBundle.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	logf.InitLogs()
	leaderElectionNamespace := flag.String("leader-election-namespace", "kube-system", "the namespace of the leader election Lease")
	metricsAddress := flag.String("metrics-listen-address", ":9402", "where Prometheus metrics are served")
	flag.Parse()
	ctrl.SetLogger(klog.Background())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *leaderElectionNamespace, *metricsAddress); err != nil {
		ctrl.Log.Error(err, "cainjector stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, leaderElectionNamespace, metricsAddress string) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme))
	utilruntime.Must(admissionregistrationv1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(scheme))

	// The user agent names the field manager of the injector's writes.
	mgr, err := ctrl.NewManager(util.RestConfigWithUserAgent(ctrl.GetConfigOrDie(), "cainjector"), ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          true,
		LeaderElectionNamespace: leaderElectionNamespace,
		LeaderElectionID:        "cert-manager-cainjector-leader-election",
		Metrics:                 metricsserver.Options{BindAddress: metricsAddress},
		// Every injectable is looked at again each minute, not only on the
		// events of its Certificate's Secret: once, in CI, a Certificate
		// issued twice within a second left one webhook configuration
		// holding the first CA for minutes.
		Cache: cache.Options{SyncPeriod: ptr.To(time.Minute)},
		// Secrets are watched by their metadata only (the injector's own
		// watches) and read when a CA is needed, not cached whole.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
