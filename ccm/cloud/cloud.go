package cloud

import (
	"github.com/prometheus/client_golang/prometheus"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Cloud is the Equinix Metal cloud provider. It is safe for concurrent use.
type Cloud struct {
	metal *metal.Client
}

var (
	_ cloudprovider.Interface   = (*Cloud)(nil)
	_ cloudprovider.InstancesV2 = (*Cloud)(nil)
)

// New returns the cloud provider for cfg. The Metal client's metrics
// (metal_api_*) go to registerer; nil disables them.
func New(cfg Config, registerer prometheus.Registerer) (*Cloud, error) {
	client, err := metal.NewClient(metal.Config{
		APIKey:     cfg.APIKey,
		ProjectID:  cfg.ProjectID,
		BaseURL:    cfg.BaseURL,
		Registerer: registerer,
	})
	if err != nil {
		return nil, err
	}
	return &Cloud{metal: client}, nil
}

// Initialize starts nothing: the provider keeps no state besides its client.
func (*Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// InstancesV2 initialises nodes and reports deleted and powered-off devices.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c, true }

// LoadBalancer is not supported: the Equinix Metal Load Balancer is gone
// with the platform, and the endpoint's Elastic IP is CAPP's.
func (*Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return nil, false }

// Instances is not supported: InstancesV2 replaces it.
func (*Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// Zones is not supported: InstancesV2 gives the zone and region.
func (*Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not supported.
func (*Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes is not supported: the nodes reach each other on their VLAN and
// the CNI routes pod traffic.
func (*Cloud) Routes() (cloudprovider.Routes, bool) { return nil, false }

// ProviderName is "equinixmetal".
func (*Cloud) ProviderName() string { return ProviderName }

// HasClusterID is true: the provider touches no object shared between
// clusters (it only reads devices), so it needs no cluster ID to tell its
// own apart.
func (*Cloud) HasClusterID() bool { return true }
