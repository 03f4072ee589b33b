package emulator

import (
	"net/netip"
	"testing"

	"github.com/blang/semver/v4"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	capicloudinit "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstream"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// The fixtures are user-data as the providers render it: Cluster API's
// kubeadm bootstrap renders the cloud-config (its public cloudinit
// package, with kubeadm configurations marshalled by its types package, as
// the default flavor's KubeadmControlPlane and KubeadmConfigTemplate ask),
// and CAPP merges in its network configuration with cloudinit.UserData. The
// endpoint binding is added by the contract cloudinit.EndpointBindingPath states.

const (
	fixtureCluster = "wl"
	fixtureVersion = "v1.36.3"
	caHash         = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

var (
	eip          = netip.MustParseAddr("198.51.100.1")
	endpoint     = netip.AddrPortFrom(eip, 6443)
	kubeletFlags = []bootstrapv1.Arg{
		{Name: "cloud-provider", Value: ptr.To("external")},
		{Name: "provider-id", Value: ptr.To("equinixmetal://{{ v1.instance_id }}")},
	}
)

// fixture is what a machine's user-data is made from.
type fixture struct {
	role     Role
	endpoint netip.AddrPort
	nodeIP   string
	// bind adds the endpoint binding (file and runcmd) for this address.
	bind netip.Addr
	// bindFirst puts the binding's runcmd before kubeadm's.
	bindFirst bool
}

// userData renders f.
func (f fixture) userData(t *testing.T) []byte {
	t.Helper()
	version := semver.MustParse(fixtureVersion[1:])
	base := capicloudinit.BaseUserData{KubernetesVersion: version}
	var bootstrap []byte
	var err error
	switch f.role {
	case FirstControlPlane:
		cluster, err := kubeadmtypes.MarshalClusterConfigurationForVersion(
			&bootstrapv1.ClusterConfiguration{ControlPlaneEndpoint: f.endpoint.String()}, version,
			&upstream.AdditionalData{ClusterName: ptr.To(fixtureCluster), KubernetesVersion: ptr.To(fixtureVersion)})
		must(t, err)
		init, err := kubeadmtypes.MarshalInitConfigurationForVersion(&bootstrapv1.InitConfiguration{
			NodeRegistration: bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: kubeletFlags},
		}, version)
		must(t, err)
		bootstrap, err = capicloudinit.NewInitControlPlane(&capicloudinit.ControlPlaneInput{
			BaseUserData: base, ClusterConfiguration: cluster, InitConfiguration: init,
		})
		must(t, err)
	default:
		join := &bootstrapv1.JoinConfiguration{
			NodeRegistration: bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: kubeletFlags},
			Discovery: bootstrapv1.Discovery{BootstrapToken: bootstrapv1.BootstrapTokenDiscovery{
				APIServerEndpoint: f.endpoint.String(), Token: "abcdef.0123456789abcdef", CACertHashes: []string{caHash},
			}},
		}
		if f.role == ControlPlane {
			join.ControlPlane = &bootstrapv1.JoinControlPlane{}
		}
		config, err := kubeadmtypes.MarshalJoinConfigurationForVersion(join, version)
		must(t, err)
		if f.role == ControlPlane {
			bootstrap, err = capicloudinit.NewJoinControlPlane(&capicloudinit.ControlPlaneJoinInput{BaseUserData: base, JoinConfiguration: config})
		} else {
			bootstrap, err = capicloudinit.NewNode(&capicloudinit.NodeInput{BaseUserData: base, JoinConfiguration: config})
		}
		must(t, err)
	}
	must(t, err)

	var networks []cloudinit.Network
	if f.nodeIP != "" {
		networks = []cloudinit.Network{{
			Port: "bond0", VLAN: 1000, Address: netip.MustParsePrefix(f.nodeIP + "/24"),
			Gateway: netip.MustParseAddr("10.60.0.1"), Internal: true,
		}}
	}
	var extra cloudinit.Extra
	if f.bind.IsValid() {
		// CAPP's binding; bindFirst puts its command before the
		// bootstrap's, as on the node that runs kubeadm init.
		extra, err = cloudinit.EndpointBinding(f.bind, f.bindFirst)
		must(t, err)
	}
	out, err := cloudinit.UserData(bootstrap, networks, cloudinit.Options{}, extra)
	must(t, err)
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
