package poolspace_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// validSpecs resolve to a space. next lists the first addresses an allocator
// hands out, all of them when there are as many as total; subnet is the prefix
// SubnetOf reports for the first one, together with the spec's gateway.
var validSpecs = []struct {
	name   string
	spec   v1alpha1.MetalVRFIPPoolSpec
	total  string
	next   []string
	subnet string
}{
	{
		name:  "IPv4 /24 skips network, gateway and broadcast",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Gateway: "10.0.0.1"},
		total: "253", next: []string{"10.0.0.2", "10.0.0.3"}, subnet: "10.0.0.0/24",
	},
	{
		name:  "range inside a wider subnet",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.10-10.0.0.20"}, Prefix: new(int32(24)), Gateway: "10.0.0.1"},
		total: "11", next: []string{"10.0.0.10", "10.0.0.11"}, subnet: "10.0.0.0/24",
	},
	{
		name:  "single IPs, lowest first",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"192.168.1.9", "192.168.1.3"}, Prefix: new(int32(24)), Gateway: "192.168.1.1"},
		total: "2", next: []string{"192.168.1.3", "192.168.1.9"}, subnet: "192.168.1.0/24",
	},
	{
		name: "excluded addresses",
		spec: v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/28"}, Prefix: new(int32(28)), Gateway: "10.0.0.1",
			ExcludedAddresses: []string{"10.0.0.2-10.0.0.4", "10.0.0.6"},
		},
		total: "9", next: []string{"10.0.0.5", "10.0.0.7"}, subnet: "10.0.0.0/28",
	},
	{
		name:  "/30 without reserved addresses",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.4/30"}, Prefix: new(int32(30))},
		total: "2", next: []string{"10.0.0.5", "10.0.0.6"}, subnet: "10.0.0.4/30",
	},
	{
		name:  "/30 allocating reserved addresses",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.4/30"}, Prefix: new(int32(30)), AllocateReservedIPAddresses: true},
		total: "4", next: []string{"10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7"}, subnet: "10.0.0.4/30",
	},
	{
		name:  "/31 has no reserved addresses",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.6/31"}, Prefix: new(int32(31))},
		total: "2", next: []string{"10.0.0.6", "10.0.0.7"}, subnet: "10.0.0.6/31",
	},
	{
		name:  "/32",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.9"}, Prefix: new(int32(32))},
		total: "1", next: []string{"10.0.0.9"}, subnet: "10.0.0.9/32",
	},
	{
		name:  "IPv6 /64 skips subnet-router anycast and gateway",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"2001:db8:0:1::/64"}, Prefix: new(int32(64)), Gateway: "2001:db8:0:1::1"},
		total: "18446744073709551614", next: []string{"2001:db8:0:1::2", "2001:db8:0:1::3"}, subnet: "2001:db8:0:1::/64",
	},
	{
		name:  "IPv6 /120 without gateway",
		spec:  v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"fd00::100/120"}, Prefix: new(int32(120))},
		total: "255", next: []string{"fd00::101", "fd00::102"}, subnet: "fd00::100/120",
	},
}

func TestResolveValid(t *testing.T) {
	for _, tt := range validSpecs {
		t.Run(tt.name, func(t *testing.T) {
			space, errs := poolspace.Resolve(&tt.spec, nil)
			if space == nil || len(errs) > 0 {
				t.Fatalf("Resolve() = %v, %v; want a space and no errors", space, errs)
			}
			if got := space.Total().String(); got != tt.total {
				t.Errorf("Total() = %s, want %s", got, tt.total)
			}
			alloc := cidr.NewAllocator(space.Space)
			for _, want := range tt.next {
				if got, err := alloc.Next(); err != nil || got.String() != want {
					t.Fatalf("Next() = %s, %v; want %s", got, err, want)
				}
			}
			if tt.total == strconv.Itoa(len(tt.next)) {
				if got, err := alloc.Next(); !errors.Is(err, cidr.ErrExhausted) {
					t.Errorf("Next() on a drained pool = %s, %v; want ErrExhausted", got, err)
				}
			}

			want := cidr.Subnet{Prefix: netip.MustParsePrefix(tt.subnet)}
			if tt.spec.Gateway != "" {
				want.Gateway = netip.MustParseAddr(tt.spec.Gateway)
			}
			if got, ok := space.SubnetOf(netip.MustParseAddr(tt.next[0])); !ok || got != want {
				t.Errorf("SubnetOf(%s) = %+v, %t; want %+v", tt.next[0], got, ok, want)
			}
		})
	}
}

type wantErr struct {
	typ    field.ErrorType
	field  string
	bad    any
	detail string // a substring of Detail
}

// invalidSpecs are rejected with exactly the errors in want, in order.
var invalidSpecs = []struct {
	name string
	spec v1alpha1.MetalVRFIPPoolSpec
	want []wantErr
}{
	{
		name: "no addresses",
		spec: v1alpha1.MetalVRFIPPoolSpec{Prefix: new(int32(24))},
		want: []wantErr{{field.ErrorTypeRequired, "spec.addresses", "", "at least one address source is required"}},
	},
	{
		name: "unparseable entry",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.1.0/24", "10.0.0.5/24"}, Prefix: new(int32(24))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.addresses[1]", "10.0.0.5/24",
			"not a valid IP, range, nor CIDR: \"10.0.0.5/24\": CIDR has host bits set (did you mean 10.0.0.0/24?)"}},
	},
	{
		name: "mixed families among addresses",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24", "fd00::1"}, Prefix: new(int32(24))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.addresses[1]", "fd00::1", "is IPv6 but spec.addresses[0] is IPv4"}},
	},
	{
		name: "excluded entry of the other family",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), ExcludedAddresses: []string{"fd00::/64"}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.excludedAddresses[0]", "fd00::/64", "is IPv6 but spec.addresses are IPv4"}},
	},
	{
		name: "excluded entry outside the pool",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), ExcludedAddresses: []string{"10.0.0.5", "10.9.9.9"}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.excludedAddresses[1]", "10.9.9.9", "lies outside the pool's addresses: it excludes nothing"}},
	},
	{
		name: "mixed families among excluded entries",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), ExcludedAddresses: []string{"10.0.0.5", "fd00::5"}},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.excludedAddresses[1]", "fd00::5", "is IPv6 but spec.excludedAddresses[0] is IPv4"}},
	},
	{
		name: "missing prefix",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}},
		want: []wantErr{{field.ErrorTypeRequired, "spec.prefix", "", "required when spec.addresses is set"}},
	},
	{
		name: "IPv4 prefix too long",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(33))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.prefix", 33, "must be between 0 and 32 for IPv4 addresses"}},
	},
	{
		name: "negative prefix",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"fd00::/64"}, Prefix: new(int32(-1))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.prefix", -1, "must be between 0 and 128 for IPv6 addresses"}},
	},
	{
		name: "gateway not an IP",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Gateway: "10.0.0.256"},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "10.0.0.256", "not a valid IP address"}},
	},
	{
		name: "gateway in IPv4-mapped form",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Gateway: "::ffff:10.0.0.1"},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "::ffff:10.0.0.1", "must be a plain IP address"}},
	},
	{
		name: "gateway of the other family",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"fd00::/64"}, Prefix: new(int32(64)), Gateway: "10.0.0.1"},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "10.0.0.1", "is IPv4 but spec.addresses are IPv6"}},
	},
	{
		name: "gateway outside the subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}, Prefix: new(int32(24)), Gateway: "10.0.1.1"},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "10.0.1.1", "lies outside the pool's subnet 10.0.0.0/24"}},
	},
	{
		name: "address outside the subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/25", "10.0.1.5"}, Prefix: new(int32(24))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.addresses[1]", "10.0.1.5", "lies outside the pool's subnet 10.0.0.0/24"}},
	},
	{
		name: "range crossing the subnet end",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.250-10.0.1.5"}, Prefix: new(int32(24))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.addresses[0]", "10.0.0.250-10.0.1.5", "lies outside the pool's subnet 10.0.0.0/24"}},
	},
	{
		name: "overlapping entries",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/28", "10.0.0.100", "10.0.0.8-10.0.0.20"}, Prefix: new(int32(24))},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.addresses[2]", "10.0.0.8-10.0.0.20", `overlaps spec.addresses[0] ("10.0.0.0/28")`}},
	},
	{
		name: "parse errors in both lists",
		spec: v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24", "bogus", "10.0.0.9-10.0.0.8"}, Prefix: new(int32(24)),
			ExcludedAddresses: []string{"10.0.0.999"},
		},
		want: []wantErr{
			{field.ErrorTypeInvalid, "spec.addresses[1]", "bogus", "not a valid IP, range, nor CIDR"},
			{field.ErrorTypeInvalid, "spec.addresses[2]", "10.0.0.9-10.0.0.8", "range start is after its end"},
			{field.ErrorTypeInvalid, "spec.excludedAddresses[0]", "10.0.0.999", "not a valid IP, range, nor CIDR"},
		},
	},
	{
		name: "family, subnet and overlap errors together",
		spec: v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25"}, Prefix: new(int32(24)),
			ExcludedAddresses: []string{"fd00::/64"},
		},
		want: []wantErr{
			{field.ErrorTypeInvalid, "spec.excludedAddresses[0]", "fd00::/64", "mixed IP families"},
			{field.ErrorTypeInvalid, "spec.addresses[1]", "10.0.1.0/24", "lies outside the pool's subnet 10.0.0.0/24"},
			{field.ErrorTypeInvalid, "spec.addresses[2]", "10.0.0.128/25", `overlaps spec.addresses[0] ("10.0.0.0/24")`},
		},
	},
	{
		name: "mixed families name the first entry that parsed",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"bogus", "10.0.0.1", "fd00::1"}, Prefix: new(int32(24))},
		want: []wantErr{
			{field.ErrorTypeInvalid, "spec.addresses[0]", "bogus", "not a valid IP, range, nor CIDR"},
			{field.ErrorTypeInvalid, "spec.addresses[2]", "fd00::1", "is IPv6 but spec.addresses[1] is IPv4"},
		},
	},
	{
		name: "bad gateway does not hide addresses outside the subnet",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24", "10.0.1.5"}, Prefix: new(int32(24)), Gateway: "10.0.9.1"},
		want: []wantErr{
			{field.ErrorTypeInvalid, "spec.gateway", "10.0.9.1", "lies outside the pool's subnet 10.0.0.0/24"},
			{field.ErrorTypeInvalid, "spec.addresses[1]", "10.0.1.5", "lies outside the pool's subnet 10.0.0.0/24"},
		},
	},
	{
		name: "nothing left to hand out",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.1"}, Prefix: new(int32(24)), Gateway: "10.0.0.1"},
		want: []wantErr{{field.ErrorTypeInvalid, "spec.addresses", []string{"10.0.0.1"}, "leaves no address to hand out"}},
	},
	{
		name: "bad prefix does not hide overlaps",
		spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24", "10.0.0.5"}, Prefix: new(int32(40))},
		want: []wantErr{
			{field.ErrorTypeInvalid, "spec.prefix", 40, "must be between 0 and 32"},
			{field.ErrorTypeInvalid, "spec.addresses[1]", "10.0.0.5", `overlaps spec.addresses[0] ("10.0.0.0/24")`},
		},
	},
}

func TestResolveInvalid(t *testing.T) {
	for _, tt := range invalidSpecs {
		t.Run(tt.name, func(t *testing.T) {
			space, errs := poolspace.Resolve(&tt.spec, nil)
			if space != nil {
				t.Errorf("Resolve() returned a space along with errors %v", errs)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("Resolve() = %d errors, want %d:\n%v", len(errs), len(tt.want), errs.ToAggregate())
			}
			for i, w := range tt.want {
				if e := errs[i]; e.Type != w.typ || e.Field != w.field || !reflect.DeepEqual(e.BadValue, w.bad) || !strings.Contains(e.Detail, w.detail) {
					t.Errorf("error %d = {%s, %s, %#v, %q}\nwant {%s, %s, %#v, detail containing %q}",
						i, e.Type, e.Field, e.BadValue, e.Detail, w.typ, w.field, w.bad, w.detail)
				}
			}
		})
	}
}

// noPrefix stands for a nil spec.prefix in FuzzResolve, which takes every
// prefix that does not fit an int32 as none.
const noPrefix = math.MinInt

// fuzzArgs flattens spec into FuzzResolve's arguments.
func fuzzArgs(spec v1alpha1.MetalVRFIPPoolSpec) (addresses string, prefix int, gateway, excluded string, allocateReserved bool, subnets string) {
	prefix = noPrefix
	if spec.Prefix != nil {
		prefix = int(*spec.Prefix)
	}
	return strings.Join(spec.Addresses, ","), prefix, spec.Gateway, strings.Join(spec.ExcludedAddresses, ","), spec.AllocateReservedIPAddresses, joinSubnets(spec.Subnets)
}

// joinSubnets flattens spec.subnets into one of FuzzResolve's arguments:
// entries separated by ";", each "cidr|addresses|gateway|dnsServers" with
// lists comma-separated.
func joinSubnets(subnets []v1alpha1.Subnet) string {
	entries := make([]string, 0, len(subnets))
	for _, s := range subnets {
		entries = append(entries, strings.Join([]string{s.CIDR, strings.Join(s.Addresses, ","), s.Gateway, strings.Join(s.DNSServers, ",")}, "|"))
	}
	return strings.Join(entries, ";")
}

// splitSubnets undoes joinSubnets.
func splitSubnets(s string) []v1alpha1.Subnet {
	if s == "" {
		return nil
	}
	var subnets []v1alpha1.Subnet
	for entry := range strings.SplitSeq(s, ";") {
		fields := append(strings.Split(entry, "|"), "", "", "", "")
		subnets = append(subnets, v1alpha1.Subnet{CIDR: fields[0], Addresses: splitList(fields[1]), Gateway: fields[2], DNSServers: splitList(fields[3])})
	}
	return subnets
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// offendingValue returns the value of the field at path in spec, as an
// Invalid error on that field carries it, and whether path names such a field.
func offendingValue(spec *v1alpha1.MetalVRFIPPoolSpec, path string) (any, bool) {
	switch path {
	case "spec.gateway":
		return spec.Gateway, true
	case "spec.addresses":
		return spec.Addresses, true
	case "spec.subnets":
		return spec.Subnets, true
	case "spec.prefix":
		if spec.Prefix == nil {
			return nil, false
		}
		return int(*spec.Prefix), true
	case "spec.allocationPrefixLength":
		if spec.AllocationPrefixLength == nil {
			return nil, false
		}
		return int(*spec.AllocationPrefixLength), true
	case "spec.preAllocations":
		return len(spec.PreAllocations), true
	}
	lists := map[string][]string{"spec.addresses": spec.Addresses, "spec.excludedAddresses": spec.ExcludedAddresses}
	for i, s := range spec.Subnets {
		entry := fmt.Sprintf("spec.subnets[%d]", i)
		switch path {
		case entry + ".cidr":
			return s.CIDR, true
		case entry + ".gateway":
			return s.Gateway, true
		}
		lists[entry+".addresses"], lists[entry+".dnsServers"] = s.Addresses, s.DNSServers
	}
	for name, list := range lists {
		if index, ok := strings.CutPrefix(path, name+"["); ok {
			if i, err := strconv.Atoi(strings.TrimSuffix(index, "]")); err == nil && i >= 0 && i < len(list) {
				return list[i], true
			}
		}
	}
	return nil, false
}

func FuzzResolve(f *testing.F) {
	var seeds []v1alpha1.MetalVRFIPPoolSpec
	for _, tt := range validSpecs {
		seeds = append(seeds, tt.spec)
	}
	for _, tt := range invalidSpecs {
		seeds = append(seeds, tt.spec)
	}
	for _, tt := range invalidSubnetSpecs {
		seeds = append(seeds, tt.spec)
	}
	for _, spec := range seeds {
		addresses, prefix, gateway, excluded, allocateReserved, subnets := fuzzArgs(spec)
		f.Add(addresses, prefix, gateway, excluded, allocateReserved, subnets)
	}
	f.Add("0.0.0.0/0", 0, "255.255.255.255", "", false, "")
	f.Add("::/0", 0, "::", "::1-::ff", true, "")
	f.Add(" 10.0.0.1 - 10.0.0.5 ,10.0.0.7", 29, "10.0.0.6", "10.0.0.2", false, "")
	f.Add("fe80::/64", 64, "fe80::1%eth0", "", false, "")
	f.Add("10.0.0.0/31,10.0.0.1", 31, "10.0.0.0", "10.0.0.0/31", true, "")
	f.Add("10.0.0.0/24", 24, "10.0.0.1", "10.0.1.5", false, "10.0.1.0/24||10.0.1.1|10.0.1.53;10.0.2.0/30|10.0.2.1-10.0.2.2||")
	f.Add("", noPrefix, "", "", false, "fd00:1::/64|fd00:1::10-fd00:1::1f|fd00:1::1|fd00::53,fd00::54;fd00:2::/127|||")

	f.Fuzz(func(t *testing.T, addresses string, prefix int, gateway, excluded string, allocateReserved bool, subnets string) {
		spec := v1alpha1.MetalVRFIPPoolSpec{
			Addresses:                   splitList(addresses),
			Subnets:                     splitSubnets(subnets),
			Gateway:                     gateway,
			ExcludedAddresses:           splitList(excluded),
			AllocateReservedIPAddresses: allocateReserved,
		}
		if p := int32(prefix); int(p) == prefix {
			spec.Prefix = &p
		}

		space, errs := poolspace.Resolve(&spec, nil)
		if (space != nil) == (len(errs) > 0) {
			t.Fatalf("Resolve() = %v, %v; want either a space or errors", space, errs)
		}
		for _, e := range errs {
			bad, known := offendingValue(&spec, e.Field)
			switch {
			case !strings.HasPrefix(e.Field, "spec") || e.Detail == "" && e.Type != field.ErrorTypeDuplicate: // a duplicate needs no why
				t.Errorf("error %q names no spec field or has no detail", e.Error())
			case e.Type == field.ErrorTypeInvalid && (!known || !reflect.DeepEqual(e.BadValue, bad)):
				t.Errorf("error %q carries %#v, want the value of %s", e.Error(), e.BadValue, e.Field)
			}
		}
		if space == nil {
			return
		}

		var gw netip.Addr
		if gateway != "" {
			var err error
			if gw, err = netip.ParseAddr(gateway); err != nil {
				t.Fatalf("gateway %q was accepted but does not parse: %v", gateway, err)
			}
			if space.Contains(gw) {
				t.Errorf("the gateway %s is allocatable", gw)
			}
		}
		addr, err := cidr.NewAllocator(space.Space).Next()
		if err != nil {
			if !errors.Is(err, cidr.ErrExhausted) || space.Total().Sign() != 0 {
				t.Fatalf("Next() = %v on a space of %s addresses", err, space.Total())
			}
			return
		}
		if !space.Contains(addr) {
			t.Errorf("Next() = %s, which the space does not contain", addr)
		}
		// An address of an entry of spec.subnets goes with its cidr,
		// gateway and DNS servers; any other with spec.prefix and spec.gateway.
		for _, s := range spec.Subnets {
			entryGW, _ := netip.ParseAddr(s.Gateway) // accepted: it parses, or is empty
			if entryGW.IsValid() && space.Contains(entryGW) {
				t.Errorf("the gateway %s of subnet %s is allocatable", entryGW, s.CIDR)
			}
			entryPrefix := netip.MustParsePrefix(s.CIDR) // accepted: it parses
			if !entryPrefix.Contains(addr) {
				continue
			}
			if subnet, ok := space.SubnetOf(addr); !ok || subnet.Prefix != entryPrefix || subnet.Gateway != entryGW {
				t.Errorf("SubnetOf(%s) = %+v, %t; want spec.subnets' %s with gateway %s", addr, subnet, ok, s.CIDR, entryGW)
			}
			if got := poolspace.DNSServers(&spec, addr); !reflect.DeepEqual(got, s.DNSServers) {
				t.Errorf("DNSServers(%s) = %v, want %v of subnet %s", addr, got, s.DNSServers, s.CIDR)
			}
			return
		}
		if subnet, ok := space.SubnetOf(addr); !ok || subnet.Prefix.Bits() != prefix || subnet.Gateway != gw {
			t.Errorf("SubnetOf(%s) = %+v, %t; want prefix length %d and gateway %s", addr, subnet, ok, prefix, gw)
		}
	})
}
