package poolspace_test

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
)

var (
	vrf      = &v1alpha1.VRFSource{ID: "v", CredentialsRef: v1alpha1.SecretReference{Name: "s"}}
	subnet29 = v1alpha1.ResolvedAddresses{Address: "10.60.1.0/29", Prefix: new(int32(29)), Gateway: "10.60.1.1", Source: "vrf/v/reservation/1"}
	subnet28 = v1alpha1.ResolvedAddresses{Address: "10.61.0.0/28", Prefix: new(int32(28)), Gateway: "10.61.0.1", Source: "vrf/v/reservation/2"}
	range22  = v1alpha1.ResolvedAddresses{Address: "10.60.0.0/22", Source: "vrf/v"}
)

// subnetOf is what an address is handed out with: "prefix gateway".
type subnetOf map[string]string

func TestResolveSources(t *testing.T) {
	tests := []struct {
		name     string
		spec     v1alpha1.MetalVRFIPPoolSpec
		resolved []v1alpha1.ResolvedAddresses
		total    string
		// subnets: address -> "prefix gateway" it is handed out with.
		subnets subnetOf
		// never are addresses the space must not contain.
		never []string
	}{
		{
			name:     "Metal Gateway subnets need no spec.prefix",
			spec:     v1alpha1.MetalVRFIPPoolSpec{VRF: vrf},
			resolved: []v1alpha1.ResolvedAddresses{subnet29, subnet28},
			total:    "18",
			subnets:  subnetOf{"10.60.1.2": "10.60.1.0/29 10.60.1.1", "10.61.0.14": "10.61.0.0/28 10.61.0.1"},
			never:    []string{"10.60.1.0", "10.60.1.1", "10.60.1.7", "10.61.0.1", "10.61.0.15"},
		},
		{
			name:     "a VRF range: spec.prefix outside the gateway subnets, the subnet's own inside",
			spec:     v1alpha1.MetalVRFIPPoolSpec{VRF: vrf, Prefix: new(int32(32))},
			resolved: []v1alpha1.ResolvedAddresses{range22, subnet29},
			total:    "1021",
			subnets:  subnetOf{"10.60.0.0": "10.60.0.0/32 invalid IP", "10.60.1.3": "10.60.1.0/29 10.60.1.1"},
			never:    []string{"10.60.1.1"},
		},
		{
			name: "explicit addresses in a gateway subnet the pool does not hand out get its prefix and gateway",
			spec: v1alpha1.MetalVRFIPPoolSpec{VRF: vrf, Addresses: []string{"10.60.0.0/22"}, Prefix: new(int32(22)), Gateway: "10.60.0.1"},
			resolved: []v1alpha1.ResolvedAddresses{{
				Address: "10.60.1.0/29", Prefix: new(int32(29)), Gateway: "10.60.1.1", Source: "vrf/v/reservation/1", SubnetOnly: true,
			}},
			total:   "1018", // 1024 less 10.60.0.0, .1, .3.255 and the /29's network, gateway and broadcast
			subnets: subnetOf{"10.60.0.2": "10.60.0.0/22 10.60.0.1", "10.60.1.4": "10.60.1.0/29 10.60.1.1"},
			never:   []string{"10.60.1.1", "10.60.1.0"},
		},
		{
			name: "a network CIDR takes spec.gateway when it lies inside, and unions with explicit addresses",
			spec: v1alpha1.MetalVRFIPPoolSpec{
				NetworkRef: &v1alpha1.NetworkReference{Name: "c", Network: "n"},
				Addresses:  []string{"10.70.0.2-10.70.0.3"}, Prefix: new(int32(29)), Gateway: "10.70.0.1",
			},
			resolved: []v1alpha1.ResolvedAddresses{
				{Address: "10.70.0.0/29", Prefix: new(int32(29)), Source: "packetcluster/c/n"},
				{Address: "10.70.1.0/30", Prefix: new(int32(30)), Source: "packetcluster/c/n"},
			},
			total:   "7",
			subnets: subnetOf{"10.70.0.2": "10.70.0.0/29 10.70.0.1", "10.70.1.1": "10.70.1.0/30 invalid IP"},
			never:   []string{"10.70.0.1", "10.70.1.0", "10.70.1.3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			space, errs := poolspace.Resolve(&tt.spec, tt.resolved)
			if len(errs) > 0 {
				t.Fatalf("Resolve() errors: %v", errs.ToAggregate())
			}
			if got := space.Total().String(); got != tt.total {
				t.Errorf("Total() = %s, want %s", got, tt.total)
			}
			for address, want := range tt.subnets {
				a := netip.MustParseAddr(address)
				subnet, ok := space.SubnetOf(a)
				if got := subnet.Prefix.String() + " " + subnet.Gateway.String(); !ok || got != want || !space.Contains(a) {
					t.Errorf("SubnetOf(%s) = %q, %t (contained: %t); want %q, contained", a, got, ok, space.Contains(a), want)
				}
			}
			for _, address := range tt.never {
				if space.Contains(netip.MustParseAddr(address)) {
					t.Errorf("the space hands out %s", address)
				}
			}
		})
	}
}

func TestResolveSourcesInvalid(t *testing.T) {
	tests := []struct {
		name     string
		spec     v1alpha1.MetalVRFIPPoolSpec
		resolved []v1alpha1.ResolvedAddresses
		field    string
		detail   string
	}{
		{
			name:     "a VRF range outside every gateway subnet needs spec.prefix",
			spec:     v1alpha1.MetalVRFIPPoolSpec{VRF: vrf},
			resolved: []v1alpha1.ResolvedAddresses{range22, subnet29},
			field:    "spec.prefix", detail: "addresses 10.60.0.0/24 from spec.vrf lie outside every Metal Gateway subnet",
		},
		{
			name:  "sources not resolved yet",
			spec:  v1alpha1.MetalVRFIPPoolSpec{VRF: vrf},
			field: "spec.addresses", detail: "spec.vrf and spec.networkRef have not resolved to any",
		},
		{
			name:  "vrf family differs from the addresses",
			spec:  v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{ID: "v", IPFamily: v1alpha1.IPv6Family}, Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24))},
			field: "spec.vrf.ipFamily", detail: "but spec.addresses are IPv4",
		},
		{
			name:  "a gateway needs a prefix",
			spec:  v1alpha1.MetalVRFIPPoolSpec{VRF: vrf, Gateway: "10.60.0.1"},
			field: "spec.prefix", detail: "required when spec.gateway is set",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			space, errs := poolspace.Resolve(&tt.spec, tt.resolved)
			if space != nil || len(errs) != 1 || errs[0].Field != tt.field || !strings.Contains(errs[0].Detail, tt.detail) {
				t.Fatalf("Resolve() = %v, %v; want one error on %s containing %q", space, errs, tt.field, tt.detail)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	withRef := func(namespace string) v1alpha1.MetalVRFIPPoolSpec {
		return v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{ID: "v", CredentialsRef: v1alpha1.SecretReference{Name: "s", Namespace: namespace}}}
	}
	tests := []struct {
		name   string
		pool   v1alpha1.Pool
		detail string // empty: valid
	}{
		{"a VRF pool before its sources resolve", &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}, Spec: withRef("")}, ""},
		{"the pool's own namespace named", &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}, Spec: withRef("a")}, ""},
		{"another namespace's Secret", &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}, Spec: withRef("b")}, `reads Secrets of its own namespace "a" only`},
		{"a global pool names the namespace", &v1alpha1.GlobalMetalVRFIPPool{Spec: withRef("b")}, ""},
		{"a global pool without it", &v1alpha1.GlobalMetalVRFIPPool{Spec: withRef("")}, "required for a GlobalMetalVRFIPPool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := poolspace.Validate(tt.pool)
			switch {
			case tt.detail == "" && len(errs) > 0:
				t.Errorf("Validate() = %v, want no errors", errs)
			case tt.detail != "" && (len(errs) != 1 || errs[0].Field != "spec.vrf.credentialsRef.namespace" || !strings.Contains(errs[0].Detail, tt.detail)):
				t.Errorf("Validate() = %v, want one error on spec.vrf.credentialsRef.namespace containing %q", errs, tt.detail)
			}
		})
	}
}
