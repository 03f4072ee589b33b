package poolspace_test

import (
	"errors"
	"math/big"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// prefixPool is an explicit prefix pool.
func prefixPool(addresses string, prefix int32, gateway string, length int32, excluded ...string) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{
		Addresses: []string{addresses}, Prefix: &prefix, Gateway: gateway,
		AllocationPrefixLength: &length, ExcludedAddresses: excluded,
	}
}

var validPrefixPools = []struct {
	name  string
	spec  v1alpha1.MetalVRFIPPoolSpec
	total string
	next  []string
}{
	{
		name:  "IPv6 /48 of /64s: 65,536, the first one included (no anycast address keeps it out)",
		spec:  prefixPool("fd00::/48", 48, "", 64),
		total: "65536", next: []string{"fd00::/64", "fd00:0:0:1::/64", "fd00:0:0:2::/64"},
	},
	{
		name:  "the gateway's /64 is never handed out",
		spec:  prefixPool("fd00::/48", 48, "fd00::1", 64),
		total: "65535", next: []string{"fd00:0:0:1::/64", "fd00:0:0:2::/64"},
	},
	{
		name:  "excluded addresses keep their whole prefix out",
		spec:  prefixPool("fd00::/48", 48, "fd00::1", 64, "fd00:0:0:2::/63", "fd00:0:0:5::42"),
		total: "65532", next: []string{"fd00:0:0:1::/64", "fd00:0:0:4::/64", "fd00:0:0:6::/64"},
	},
	{
		name:  "IPv6 /32 of /64s: more than an int32 holds",
		spec:  prefixPool("2001:db8::/32", 32, "", 64),
		total: "4294967296", next: []string{"2001:db8::/64", "2001:db8:0:1::/64"},
	},
	{
		name:  "IPv6 /0 of /127s: 2^127, exact",
		spec:  prefixPool("::/0", 0, "", 127),
		total: new(big.Int).Lsh(big.NewInt(1), 127).String(), next: []string{"::/127", "::2/127"},
	},
	{
		name:  "IPv6 /128s: single addresses as prefixes",
		spec:  prefixPool("fd00::/126", 126, "fd00::1", 128),
		total: "3", next: []string{"fd00::/128", "fd00::2/128", "fd00::3/128"},
	},
	{
		name:  "IPv4 /24 of /28s, gateway in the first",
		spec:  prefixPool("10.0.0.0/24", 24, "10.0.0.1", 28),
		total: "15", next: []string{"10.0.0.16/28", "10.0.0.32/28"},
	},
	{
		name:  "IPv4 range not aligned: only the whole /28s inside it",
		spec:  prefixPool("10.0.0.5-10.0.0.60", 24, "", 28),
		total: "2", next: []string{"10.0.0.16/28", "10.0.0.32/28"},
	},
	{
		name:  "IPv4 /32s out of the whole family",
		spec:  prefixPool("0.0.0.0/0", 0, "", 32),
		total: "4294967296", next: []string{"0.0.0.0/32", "0.0.0.1/32"},
	},
	{
		name: "subnets: each its own prefixes",
		spec: v1alpha1.MetalVRFIPPoolSpec{
			Subnets:                []v1alpha1.Subnet{{CIDR: "fd00:2::/56", Gateway: "fd00:2::1"}, {CIDR: "fd00:1::/62"}},
			AllocationPrefixLength: new(int32(64)),
		},
		total: "259", next: []string{"fd00:1::/64", "fd00:1:0:1::/64", "fd00:1:0:2::/64", "fd00:1:0:3::/64", "fd00:2:0:1::/64"},
	},
}

func TestResolvePrefixPools(t *testing.T) {
	for _, tt := range validPrefixPools {
		t.Run(tt.name, func(t *testing.T) {
			space, errs := poolspace.Resolve(&tt.spec, nil)
			if len(errs) > 0 {
				t.Fatalf("Resolve() = %v", errs)
			}
			if space.Prefixes == nil {
				t.Fatal("a pool with spec.allocationPrefixLength resolved to no prefixes")
			}
			if got := space.Prefixes.Total().String(); got != tt.total {
				t.Errorf("Total() = %s, want %s", got, tt.total)
			}
			alloc := poolspace.NewPrefixAllocator(space.Prefixes)
			for _, want := range tt.next {
				got, err := alloc.Next()
				if err != nil || got.String() != want {
					t.Fatalf("Next() = %s, %v; want %s", got, err, want)
				}
			}
			free := new(big.Int).Sub(space.Prefixes.Total(), big.NewInt(int64(len(tt.next))))
			if alloc.Free().Cmp(free) != 0 {
				t.Errorf("Free() = %s, want %s", alloc.Free(), free)
			}
		})
	}
}

func TestResolvePrefixPoolsInvalid(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec v1alpha1.MetalVRFIPPoolSpec
		want wantErr
	}{
		{"longer than an IPv4 address", prefixPool("10.0.0.0/24", 24, "", 33),
			wantErr{field.ErrorTypeInvalid, "spec.allocationPrefixLength", 33, "must be between 1 and 32 for IPv4 prefixes"}},
		{"longer than an IPv6 address", prefixPool("fd00::/48", 48, "", 129),
			wantErr{field.ErrorTypeInvalid, "spec.allocationPrefixLength", 129, "must be between 1 and 128 for IPv6 prefixes"}},
		{"zero", prefixPool("fd00::/48", 48, "", 0),
			wantErr{field.ErrorTypeInvalid, "spec.allocationPrefixLength", 0, "must be between 1 and 128"}},
		{"shorter than spec.prefix", prefixPool("fd00::/48", 48, "", 40),
			wantErr{field.ErrorTypeInvalid, "spec.allocationPrefixLength", 40, "is shorter than spec.prefix (48)"}},
		{"shorter than a subnet", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{{CIDR: "fd00::/56"}}, AllocationPrefixLength: new(int32(48))},
			wantErr{field.ErrorTypeInvalid, "spec.allocationPrefixLength", 48, `is shorter than spec.subnets[0].cidr ("fd00::/56")`}},
		{"no whole prefix in the addresses", prefixPool("10.0.0.1-10.0.0.20", 24, "", 28),
			wantErr{field.ErrorTypeInvalid, "spec.addresses", []string{"10.0.0.1-10.0.0.20"}, "holds no whole /28"}},
		{"every prefix holds the gateway or an exclusion", prefixPool("10.0.0.0/27", 27, "10.0.0.1", 28, "10.0.0.17"),
			wantErr{field.ErrorTypeInvalid, "spec.addresses", []string{"10.0.0.0/27"}, "holds no whole /28"}},
		{"pre-allocations", func() v1alpha1.MetalVRFIPPoolSpec {
			s := prefixPool("fd00::/48", 48, "", 64)
			s.PreAllocations = []v1alpha1.PreAllocation{{Machine: "m", Address: "fd00::"}}
			return s
		}(), wantErr{field.ErrorTypeInvalid, "spec.preAllocations", 1, "pins no addresses"}},
	} {
		t.Run(tt.name, func(t *testing.T) { expectOneError(t, tt.spec, tt.want) })
	}
}

// TestPrefixAllocatorTakeGive: what other claims of the domain hold keeps
// every prefix it touches out, and frees it once given back.
func TestPrefixAllocatorTakeGive(t *testing.T) {
	spec := prefixPool("fd00::/48", 48, "", 64)
	space, errs := poolspace.Resolve(&spec, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	alloc := poolspace.NewPrefixAllocator(space.Prefixes)
	address := netipx.IPRangeFrom(netip.MustParseAddr("fd00::5"), netip.MustParseAddr("fd00::5"))
	wide := netipx.RangeOfPrefix(netip.MustParsePrefix("fd00:0:0:4::/62")) // a /62 of another prefix pool
	alloc.Take(address)
	alloc.Take(wide)
	for _, want := range []string{"fd00:0:0:1::/64", "fd00:0:0:2::/64", "fd00:0:0:3::/64", "fd00:0:0:8::/64"} {
		if got, err := alloc.Next(); err != nil || got.String() != want {
			t.Fatalf("Next() = %s, %v; want %s", got, err, want)
		}
	}
	if err := alloc.Allocate(netip.MustParsePrefix("fd00:0:0:5::/64")); !errors.Is(err, cidr.ErrInUse) {
		t.Errorf("Allocate of a prefix inside a taken /62 = %v, want ErrInUse", err)
	}
	if err := alloc.Allocate(netip.MustParsePrefix("fd00:0:0:9::/63")); !errors.Is(err, cidr.ErrNotAllocatable) {
		t.Errorf("Allocate of a /63 in a pool of /64s = %v, want ErrNotAllocatable", err)
	}
	alloc.Give(address)
	alloc.Give(wide)
	for _, want := range []string{"fd00::/64", "fd00:0:0:4::/64"} {
		if got, err := alloc.Next(); err != nil || got.String() != want {
			t.Fatalf("after Give, Next() = %s, %v; want %s", got, err, want)
		}
	}
	if got := space.Prefixes.Span(address); got != netipx.RangeOfPrefix(netip.MustParsePrefix("fd00::/64")) {
		t.Errorf("Span(fd00::5) = %s, want fd00::/64", got)
	}
}

// naivePrefixes lists, by brute force over the allocatable ranges, the
// aligned prefixes of length bits lying wholly inside them.
func naivePrefixes(space *poolspace.Space, bits int, limit int) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range space.Ranges() {
		p := netip.PrefixFrom(r.From(), bits).Masked()
		for len(out) < limit {
			pr := netipx.RangeOfPrefix(p)
			if r.To().Less(pr.From()) {
				break
			}
			if !pr.From().Less(r.From()) && !r.To().Less(pr.To()) {
				out = append(out, p)
			}
			next := pr.To().Next()
			if !next.IsValid() {
				break
			}
			p = netip.PrefixFrom(next, bits)
		}
	}
	return out
}

// FuzzPrefixes: whatever the pool, errors name a spec field and its value,
// and the prefixes handed out are, in order, exactly the aligned prefixes
// of the length lying wholly in the pool's addresses, none holding the
// gateway or an excluded address.
func FuzzPrefixes(f *testing.F) {
	for _, tt := range validPrefixPools {
		if len(tt.spec.Addresses) > 0 {
			f.Add(tt.spec.Addresses[0], int(*tt.spec.Prefix), tt.spec.Gateway, strings.Join(tt.spec.ExcludedAddresses, ","), int(*tt.spec.AllocationPrefixLength))
		}
	}
	f.Add("10.0.0.7-10.0.1.200", 16, "10.0.0.130", "10.0.0.64/27", 26)
	f.Add("fd00::/120", 112, "fd00::80", "fd00::10-fd00::1f", 124)
	f.Add("10.0.0.0/24", 24, "", "", 33)
	f.Fuzz(func(t *testing.T, addresses string, prefix int, gateway, excluded string, length int) {
		spec := v1alpha1.MetalVRFIPPoolSpec{Addresses: splitList(addresses), Gateway: gateway, ExcludedAddresses: splitList(excluded)}
		if p := int32(prefix); int(p) == prefix {
			spec.Prefix = &p
		}
		if l := int32(length); int(l) == length {
			spec.AllocationPrefixLength = &l
		} else {
			return
		}
		space, errs := poolspace.Resolve(&spec, nil)
		if (space != nil) == (len(errs) > 0) {
			t.Fatalf("Resolve() = %v, %v; want either a space or errors", space, errs)
		}
		for _, e := range errs {
			bad, known := offendingValue(&spec, e.Field)
			switch {
			case !strings.HasPrefix(e.Field, "spec") || e.Detail == "":
				t.Errorf("error %q names no spec field or has no detail", e.Error())
			case e.Type == field.ErrorTypeInvalid && (!known || !reflect.DeepEqual(e.BadValue, bad)):
				t.Errorf("error %q carries %#v, want the value of %s", e.Error(), e.BadValue, e.Field)
			}
		}
		if space == nil {
			return
		}
		const limit = 64
		want := naivePrefixes(space, length, limit)
		if space.Prefixes.Total().IsInt64() && space.Prefixes.Total().Int64() <= limit && int64(len(want)) != space.Prefixes.Total().Int64() {
			t.Errorf("Total() = %s, want %d", space.Prefixes.Total(), len(want))
		}
		alloc := poolspace.NewPrefixAllocator(space.Prefixes)
		gw, _ := netip.ParseAddr(gateway)
		for i, w := range want {
			got, err := alloc.Next()
			if err != nil || got != w {
				t.Fatalf("Next() #%d = %s, %v; want %s", i, got, err, w)
			}
			if gw.IsValid() && got.Contains(gw) {
				t.Errorf("%s holds the gateway %s", got, gw)
			}
		}
		if len(want) < limit {
			if got, err := alloc.Next(); !errors.Is(err, cidr.ErrExhausted) {
				t.Errorf("Next() after the last prefix = %s, %v; want ErrExhausted", got, err)
			}
		}
	})
}

// Prefix pools fed by sources: what status.resolved holds is carved into
// prefixes as explicit addresses are, a Metal Gateway's prefix kept out; a
// length shorter than a source's subnet is said (in the Ready condition,
// as the webhook cannot know it).
func TestPrefixPoolsFromSources(t *testing.T) {
	vrf := v1alpha1.MetalVRFIPPoolSpec{
		VRF:                    &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
		AllocationPrefixLength: new(int32(28)),
	}
	resolved := []v1alpha1.ResolvedAddresses{{Address: "10.60.0.0/24", Prefix: new(int32(24)), Gateway: "10.60.0.1", Source: "vrf/vrf-1/reservation/r1"}}
	space, errs := poolspace.Resolve(&vrf, resolved)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := space.Prefixes.Total().String(); got != "15" {
		t.Errorf("a VRF /24 with its gateway in 10.60.0.0/28: Total() = %s /28s, want 15", got)
	}
	if got, _ := poolspace.NewPrefixAllocator(space.Prefixes).Next(); got.String() != "10.60.0.16/28" {
		t.Errorf("Next() = %s, want 10.60.0.16/28", got)
	}

	network := v1alpha1.MetalVRFIPPoolSpec{
		NetworkRef:             &v1alpha1.NetworkReference{Name: "demo", Network: "pods"},
		AllocationPrefixLength: new(int32(64)),
	}
	resolved = []v1alpha1.ResolvedAddresses{{Address: "fd00:70::/56", Prefix: new(int32(56)), Source: "packetcluster/demo/pods"}}
	if space, errs = poolspace.Resolve(&network, resolved); len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := space.Prefixes.Total().String(); got != "256" {
		t.Errorf("a PacketCluster network /56: Total() = %s /64s, want 256", got)
	}

	network.AllocationPrefixLength = new(int32(48))
	_, errs = poolspace.Resolve(&network, resolved)
	if len(errs) != 1 || errs[0].Field != "spec.allocationPrefixLength" || !strings.Contains(errs[0].Detail, "shorter than the subnet fd00:70::/56") {
		t.Errorf("a /48 out of a network's /56: %v, want spec.allocationPrefixLength shorter than the subnet", errs)
	}
}
