package poolspace_test

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

func pinned(entries ...v1alpha1.PreAllocation) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/29"}, Prefix: new(int32(29)), Gateway: "10.0.0.1",
		ExcludedAddresses: []string{"10.0.0.6"}, PreAllocations: entries}
}

// TestPreAllocatedAddressesOnlyToTheirOwner: the allocator of a pool never
// hands a pre-allocated address out as the next free one; only asking for
// it by name gets it.
func TestPreAllocatedAddressesOnlyToTheirOwner(t *testing.T) {
	spec := pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.3"}, v1alpha1.PreAllocation{HardwareReservation: "hr-1", Address: "10.0.0.5"})
	space, errs := poolspace.Resolve(&spec, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	alloc := cidr.NewAllocator(space.Space)
	var got []string
	for {
		ip, err := alloc.Next()
		if errors.Is(err, cidr.ErrExhausted) {
			break
		}
		got = append(got, ip.String())
	}
	if want := []string{"10.0.0.2", "10.0.0.4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Next handed out %v, want %v: never a pre-allocated address", got, want)
	}
	if err := alloc.Allocate(netip.MustParseAddr("10.0.0.5")); err != nil {
		t.Fatalf("the pre-allocated address asked for by name: %v", err)
	}

	for _, tt := range []struct {
		owner poolspace.Owner
		want  string
	}{
		{poolspace.Owner{Namespace: "a", Machine: "cp-0"}, "10.0.0.3"},
		{poolspace.Owner{Namespace: "a", Machine: "w-1", HardwareReservation: "hr-1"}, "10.0.0.5"},
		{poolspace.Owner{Namespace: "a", Machine: "cp-1"}, ""},
		{poolspace.Owner{Namespace: "b", Machine: "cp-0"}, ""}, // another namespace's Machine of that name
	} {
		p, ok := poolspace.PreAllocationFor(&spec, "a", tt.owner)
		if got := map[bool]string{true: p.Address.String()}[ok]; got != tt.want {
			t.Errorf("PreAllocationFor(%+v) = %q, want %q", tt.owner, got, tt.want)
		}
	}
	if p, ok := poolspace.PreAllocatedTo(&spec, netip.MustParseAddr("10.0.0.5")); !ok || p.Field() != "spec.preAllocations[1]" {
		t.Errorf("PreAllocatedTo(10.0.0.5) = %v, %v; want spec.preAllocations[1]", p, ok)
	}
}

// TestPinnedElsewhere: an address pinned to one owner is refused to the
// claims of any other, naming the entry; its owner's claims, and addresses
// no entry pins, pass.
func TestPinnedElsewhere(t *testing.T) {
	spec := pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.3"})
	for _, tt := range []struct {
		ip    string
		owner poolspace.Owner
		want  string
	}{
		{"10.0.0.3", poolspace.Owner{Namespace: "a", Machine: "cp-0"}, ""},
		{"10.0.0.2", poolspace.Owner{Namespace: "a", Machine: "w-1"}, ""},
		{"10.0.0.3", poolspace.Owner{Namespace: "a", Machine: "w-1"}, `address 10.0.0.3 is pre-allocated to Machine cp-0 (spec.preAllocations[0]) in MetalVRFIPPool "p"`},
		{"10.0.0.3", poolspace.Owner{Namespace: "b", Machine: "cp-0"}, `address 10.0.0.3 is pre-allocated to Machine cp-0 (spec.preAllocations[0]) in MetalVRFIPPool "p"`},
	} {
		err := poolspace.PinnedElsewhere(&spec, `MetalVRFIPPool "p"`, "a", netip.MustParseAddr(tt.ip), tt.owner)
		if got := fmt.Sprint(err); (err == nil) != (tt.want == "") || err != nil && got != tt.want {
			t.Errorf("PinnedElsewhere(%s, %+v) = %v, want %q", tt.ip, tt.owner, err, tt.want)
		}
	}
}

func TestResolveRefusesConflictingPreAllocations(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec v1alpha1.MetalVRFIPPoolSpec
		want wantErr
	}{
		{"not an address", pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.x"}),
			wantErr{field.ErrorTypeInvalid, "spec.preAllocations[0].address", "10.0.0.x", "not an IP address"}},
		{"one address twice", pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.3"}, v1alpha1.PreAllocation{Machine: "cp-1", Address: "10.0.0.3"}),
			wantErr{field.ErrorTypeDuplicate, "spec.preAllocations[1].address", "10.0.0.3", ""}},
		{"one Machine twice", pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.3"}, v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.4"}),
			wantErr{field.ErrorTypeDuplicate, "spec.preAllocations[1].machine", "cp-0", ""}},
		{"one reservation twice", pinned(v1alpha1.PreAllocation{HardwareReservation: "hr", Address: "10.0.0.3"}, v1alpha1.PreAllocation{HardwareReservation: "hr", Address: "10.0.0.4"}),
			wantErr{field.ErrorTypeDuplicate, "spec.preAllocations[1].hardwareReservation", "hr", ""}},
		{"outside the pool", pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.1.3"}),
			wantErr{field.ErrorTypeInvalid, "spec.preAllocations[0].address", "10.0.1.3", "lies outside every address the pool hands out"}},
		{"the gateway", pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.1"}),
			wantErr{field.ErrorTypeInvalid, "spec.preAllocations[0].address", "10.0.0.1", "is the pool's gateway (spec.gateway)"}},
		{"excluded", pinned(v1alpha1.PreAllocation{Machine: "cp-0", Address: "10.0.0.6"}),
			wantErr{field.ErrorTypeInvalid, "spec.preAllocations[0].address", "10.0.0.6", "is excluded by spec.excludedAddresses[0]"}},
	} {
		t.Run(tt.name, func(t *testing.T) { expectOneError(t, tt.spec, tt.want) })
	}
}

func TestValidatePreAllocationNamespaces(t *testing.T) {
	entry := func(ns string) []v1alpha1.PreAllocation {
		return []v1alpha1.PreAllocation{{Machine: "cp-0", Namespace: ns, Address: "10.0.0.3"}}
	}
	spec := func(ns string) v1alpha1.MetalVRFIPPoolSpec { return pinned(entry(ns)...) }
	for _, tt := range []struct {
		name   string
		pool   v1alpha1.Pool
		detail string
	}{
		{"a pool's own namespace", &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}, Spec: spec("a")}, ""},
		{"a pool's, implied", &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}, Spec: spec("")}, ""},
		{"another namespace", &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a"}, Spec: spec("b")}, `serves claims of its own namespace "a" only`},
		{"a global pool's", &v1alpha1.GlobalMetalVRFIPPool{Spec: spec("b")}, ""},
		{"a global pool's, missing", &v1alpha1.GlobalMetalVRFIPPool{Spec: spec("")}, "required for a GlobalMetalVRFIPPool"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := poolspace.Validate(tt.pool)
			switch {
			case tt.detail == "" && len(errs) > 0:
				t.Errorf("Validate() = %v, want no errors", errs)
			case tt.detail != "" && (len(errs) != 1 || errs[0].Field != "spec.preAllocations[0].namespace" || !strings.Contains(errs[0].Detail, tt.detail)):
				t.Errorf("Validate() = %v, want one error on spec.preAllocations[0].namespace containing %q", errs, tt.detail)
			}
		})
	}
}
