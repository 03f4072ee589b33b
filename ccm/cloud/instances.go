package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// InstanceExists is false when the node's device is gone (the API answers
// 404 for its ID, or no device of the project has the node's name), so the
// node lifecycle controller deletes the node.
func (c *Cloud) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	_, err := c.device(ctx, node)
	if isGone(err) {
		return false, nil
	}
	return err == nil, err
}

// InstanceShutdown is true when the node's device is powered off (state
// inactive), so the node lifecycle controller taints the node
// node.cloudprovider.kubernetes.io/shutdown.
func (c *Cloud) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	device, err := c.device(ctx, node)
	if err != nil {
		return false, err
	}
	return device.GetState() == metalv1.DEVICESTATE_INACTIVE, nil
}

// InstanceMetadata describes the node's device: its provider ID, its plan
// as the instance type, its addresses (see nodeAddresses), its metro as the
// region and its facility as the zone. CAPP's failure domains are
// facilities or metros and name them by their codes, so a Machine placed in
// a facility has it as its node's zone, one placed in a metro has it as its
// node's region. A device created in a metro is placed by the platform in
// one of its facilities, which is its node's zone.
func (c *Cloud) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	device, err := c.device(ctx, node)
	if err != nil {
		return nil, err
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:    ProviderID(device.GetId()),
		InstanceType:  device.Plan.GetSlug(),
		NodeAddresses: nodeAddresses(device, node),
		Region:        device.Metro.GetCode(),
		Zone:          device.Facility.GetCode(),
	}, nil
}

// device finds the node's device: by the ID in its provider ID, or, without
// one, by its name among the hostnames of the project's devices.
func (c *Cloud) device(ctx context.Context, node *corev1.Node) (*metalv1.Device, error) {
	if node.Spec.ProviderID != "" {
		id, err := deviceID(node.Spec.ProviderID)
		if err != nil {
			return nil, err
		}
		device, err := c.metal.GetDevice(ctx, id)
		if metal.IsNotFound(err) {
			return nil, fmt.Errorf("node %s: device %s: %w: %w", node.Name, id, cloudprovider.InstanceNotFound, err)
		}
		return device, err
	}
	devices, err := c.metal.ListDevices(ctx, metal.DeviceFilter{Hostname: node.Name})
	if err != nil {
		return nil, err
	}
	// The API's hostname filter may match more than the name itself.
	var named []metalv1.Device
	for _, d := range devices {
		if strings.EqualFold(d.GetHostname(), node.Name) {
			named = append(named, d)
		}
	}
	switch len(named) {
	case 0:
		return nil, fmt.Errorf("node %s has no provider ID and no device of project %s has its name: %w",
			node.Name, c.metal.ProjectID(), cloudprovider.InstanceNotFound)
	case 1:
		return &named[0], nil
	}
	return nil, &AmbiguousHostnameError{Node: node.Name, Devices: len(named)}
}

// isGone reports whether err says the node's device does not exist.
func isGone(err error) bool { return errors.Is(err, cloudprovider.InstanceNotFound) }

// AmbiguousHostnameError: a node without a provider ID shares its name with
// several devices of the project, so which one it runs on is unknown. The
// node stays uninitialised; kubelet's --provider-id settles it.
type AmbiguousHostnameError struct {
	Node    string
	Devices int
}

func (e *AmbiguousHostnameError) Error() string {
	return fmt.Sprintf("node %s has no provider ID and %d devices of the project have its name: set kubelet's --provider-id to %s<device ID>",
		message.Quote(e.Node), e.Devices, providerIDPrefix)
}
