// Command metal-vrf-ccm is the cloud controller manager of workload clusters
// on Equinix Metal (cloud provider "equinixmetal", package ccm/cloud): it
// initialises nodes that kubelet registered with cloud-provider: external
// (provider ID, addresses, instance type, region and zone) and deletes the
// nodes of deleted devices. It is k8s.io/cloud-provider's controller
// manager with only the cloud-node and cloud-node-lifecycle controllers;
// its flags are that library's. The Metal API token, project and base URL
// come from --cloud-config (the cloud-sa.json of the Secret
// metal-cloud-config) and from METAL_API_KEY, METAL_PROJECT_ID and
// METAL_API_URL, which win.
package main

import (
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	"k8s.io/component-base/metrics/legacyregistry"        // the /metrics the manager serves
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics there
	_ "k8s.io/component-base/metrics/prometheus/version"  // and the version
	"k8s.io/klog/v2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ccm/cloud"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("initialising the options: %v", err)
	}
	command := app.NewCloudControllerManagerCommand(opts, newCloud, controllers(), names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(command))
}

// controllers are the node controllers only: the service (load balancer)
// and route controllers would find nothing to do, so --controllers cannot
// turn them on.
func controllers() map[string]app.ControllerInitFuncConstructor {
	out := map[string]app.ControllerInitFuncConstructor{}
	for _, name := range []string{names.CloudNodeController, names.CloudNodeLifecycleController} {
		out[name] = app.DefaultInitFuncConstructors[name]
	}
	return out
}

// newCloud builds the provider from --cloud-provider (which must be
// equinixmetal), --cloud-config and the environment. The library gives it
// no way to fail but exiting.
func newCloud(c *config.CompletedConfig) cloudprovider.Interface {
	shared := c.ComponentConfig.KubeCloudShared.CloudProvider
	if shared.Name != cloud.ProviderName {
		klog.Fatalf("--cloud-provider=%q: this manager serves only %q", shared.Name, cloud.ProviderName)
	}
	cfg, err := readConfig(shared.CloudConfigFile)
	if err != nil {
		klog.Fatalf("--cloud-config=%s: %v", shared.CloudConfigFile, err)
	}
	provider, err := cloud.New(cfg, legacyregistry.Registerer())
	if err != nil {
		klog.Fatalf("Metal API client: %v", err)
	}
	endpoint, _ := metal.Endpoint(cfg.BaseURL) // New has parsed it
	klog.Infof("cloud provider %s: Metal API %s, project %q", cloud.ProviderName, endpoint, cfg.ProjectID)
	return provider
}

// readConfig reads the cloud config at path, if any, and the environment.
func readConfig(path string) (cloud.Config, error) {
	if path == "" {
		return cloud.ReadConfig(nil, os.Getenv)
	}
	file, err := os.Open(path)
	if err != nil {
		return cloud.Config{}, err
	}
	defer file.Close()
	return cloud.ReadConfig(file, os.Getenv)
}
