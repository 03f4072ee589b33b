package cidr

import (
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go4.org/netipx"
)

func TestNewSpace(t *testing.T) {
	tests := []struct {
		name      string
		cfg       SpaceConfig
		want      []string // Ranges()
		wantTotal int64
	}{
		{
			name: "IPv4 network, broadcast and gateway reserved",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.0/24"),
				Subnets: []Subnet{mustSubnet(t, "10.0.0.0/24", "10.0.0.1")},
			},
			want:      []string{"10.0.0.2-10.0.0.254"},
			wantTotal: 253,
		},
		{
			name: "AllocateReserved still reserves the gateway",
			cfg: SpaceConfig{
				Ranges:           mustRanges(t, "10.0.0.0/24"),
				Subnets:          []Subnet{mustSubnet(t, "10.0.0.0/24", "10.0.0.1")},
				AllocateReserved: true,
			},
			want:      []string{"10.0.0.0-10.0.0.0", "10.0.0.2-10.0.0.255"},
			wantTotal: 255,
		},
		{
			name: "IPv4 /30 keeps two host addresses",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.0/30"),
				Subnets: []Subnet{mustSubnet(t, "10.0.0.0/30", "")},
			},
			want:      []string{"10.0.0.1-10.0.0.2"},
			wantTotal: 2,
		},
		{
			name: "IPv4 /31 has no network or broadcast address",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.0/31"),
				Subnets: []Subnet{mustSubnet(t, "10.0.0.0/31", "")},
			},
			want:      []string{"10.0.0.0-10.0.0.1"},
			wantTotal: 2,
		},
		{
			name: "IPv4 /32 is its own host",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.7"),
				Subnets: []Subnet{mustSubnet(t, "10.0.0.7/32", "")},
			},
			want:      []string{"10.0.0.7-10.0.0.7"},
			wantTotal: 1,
		},
		{
			name: "IPv6 subnet-router anycast and gateway reserved, no broadcast",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "fd00::/120"),
				Subnets: []Subnet{mustSubnet(t, "fd00::/120", "fd00::1")},
			},
			want:      []string{"fd00::2-fd00::ff"},
			wantTotal: 254,
		},
		{
			name: "IPv6 /127 has no anycast address",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "fd00::/127"),
				Subnets: []Subnet{mustSubnet(t, "fd00::/127", "")},
			},
			want:      []string{"fd00::-fd00::1"},
			wantTotal: 2,
		},
		{
			name: "IPv6 /128 is its own host",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "fd00::9"),
				Subnets: []Subnet{mustSubnet(t, "fd00::9/128", "")},
			},
			want:      []string{"fd00::9-fd00::9"},
			wantTotal: 1,
		},
		{
			name: "excluded and reserved",
			cfg: SpaceConfig{
				Ranges:   mustRanges(t, "10.0.0.0/24"),
				Subnets:  []Subnet{mustSubnet(t, "10.0.0.0/24", "")},
				Excluded: mustRanges(t, "10.0.0.10-10.0.0.19", "10.0.1.0/24"),
				Reserved: []netip.Addr{ip("10.0.0.100"), ip("10.0.9.9")},
			},
			want:      []string{"10.0.0.1-10.0.0.9", "10.0.0.20-10.0.0.99", "10.0.0.101-10.0.0.254"},
			wantTotal: 9 + 80 + 154,
		},
		{
			name: "ranges unioned, merged and sorted",
			cfg: SpaceConfig{
				Ranges: mustRanges(t, "10.0.0.20-10.0.0.29", "10.0.0.5", "10.0.0.10-10.0.0.19", "10.0.0.15-10.0.0.25", "10.0.0.5"),
			},
			want:      []string{"10.0.0.5-10.0.0.5", "10.0.0.10-10.0.0.29"},
			wantTotal: 21,
		},
		{
			name: "ranges outside every subnet lose nothing",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.0/30", "10.0.1.0/30"),
				Subnets: []Subnet{mustSubnet(t, "10.0.1.0/24", "10.0.1.1")},
			},
			want:      []string{"10.0.0.0-10.0.0.3", "10.0.1.2-10.0.1.3"},
			wantTotal: 6,
		},
		{
			name: "nested subnets each reserve their own addresses",
			cfg: SpaceConfig{
				Ranges: mustRanges(t, "10.0.0.0/24"),
				Subnets: []Subnet{
					mustSubnet(t, "10.0.0.64/26", "10.0.0.65"),
					mustSubnet(t, "10.0.0.0/24", "10.0.0.1"),
				},
			},
			want:      []string{"10.0.0.2-10.0.0.63", "10.0.0.66-10.0.0.126", "10.0.0.128-10.0.0.254"},
			wantTotal: 62 + 61 + 127,
		},
		{
			name: "host bits of a subnet prefix are ignored",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.0/29"),
				Subnets: []Subnet{mustSubnet(t, "10.0.0.3/29", "10.0.0.1")},
			},
			want:      []string{"10.0.0.2-10.0.0.6"},
			wantTotal: 5,
		},
		{
			name: "the same subnet twice with the same gateway",
			cfg: SpaceConfig{
				Ranges:  mustRanges(t, "10.0.0.0/29"),
				Subnets: []Subnet{mustSubnet(t, "10.0.0.0/29", "10.0.0.1"), mustSubnet(t, "10.0.0.0/29", "10.0.0.1")},
			},
			want:      []string{"10.0.0.2-10.0.0.6"},
			wantTotal: 5,
		},
		{
			name: "everything excluded",
			cfg: SpaceConfig{
				Ranges:   mustRanges(t, "10.0.0.0/29"),
				Excluded: mustRanges(t, "10.0.0.0/24"),
			},
			want:      []string{},
			wantTotal: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			space := mustSpace(t, tt.cfg)
			if got := rangeStrings(space.Ranges()); !slices.Equal(got, tt.want) {
				t.Errorf("Ranges() = %q, want %q", got, tt.want)
			}
			if got := space.Total(); got.Cmp(big.NewInt(tt.wantTotal)) != 0 {
				t.Errorf("Total() = %s, want %d", got, tt.wantTotal)
			}
			assertContainsMatchesRanges(t, space)
		})
	}
}

// assertContainsMatchesRanges checks Contains against Ranges on every address
// from just below the first range to just above the last one.
func assertContainsMatchesRanges(t *testing.T, space *Space) {
	t.Helper()
	ranges := space.Ranges()
	if len(ranges) == 0 {
		return
	}
	first, last := ranges[0].From().Prev(), ranges[len(ranges)-1].To().Next()
	for a := first; a.IsValid() && !last.Less(a); a = a.Next() {
		want := slices.ContainsFunc(ranges, func(r netipx.IPRange) bool { return r.Contains(a) })
		if got := space.Contains(a); got != want {
			t.Fatalf("Contains(%s) = %t, want %t (ranges %q)", a, got, want, rangeStrings(ranges))
		}
	}
}

func TestNewSpaceRejects(t *testing.T) {
	v4 := mustRanges(t, "10.0.0.0/24")
	tests := []struct {
		name    string
		cfg     SpaceConfig
		wantErr string
	}{
		{name: "no ranges", cfg: SpaceConfig{}, wantErr: "address space has no ranges"},
		{
			name:    "zero range",
			cfg:     SpaceConfig{Ranges: []netipx.IPRange{{}}},
			wantErr: `range "invalid IP-invalid IP": invalid (zero) address`,
		},
		{
			name:    "reversed range",
			cfg:     SpaceConfig{Ranges: []netipx.IPRange{netipx.IPRangeFrom(ip("10.0.0.9"), ip("10.0.0.1"))}},
			wantErr: `range "10.0.0.9-10.0.0.1": range start is after its end`,
		},
		{
			name:    "mixed families across ranges",
			cfg:     SpaceConfig{Ranges: append(mustRanges(t, "10.0.0.0/24", "10.0.1.0/24"), mustRange(t, "fd00::1-fd00::5"))},
			wantErr: `range "fd00::1-fd00::5": mixed families: IPv6 address in an IPv4 address space`,
		},
		{
			name:    "range with ends of two families",
			cfg:     SpaceConfig{Ranges: []netipx.IPRange{netipx.IPRangeFrom(ip("10.0.0.1"), ip("fd00::1"))}},
			wantErr: `range "10.0.0.1-fd00::1": mixed families: IPv6 address in an IPv4 address space`,
		},
		{
			name:    "excluded of the other family",
			cfg:     SpaceConfig{Ranges: v4, Excluded: mustRanges(t, "fd00::/120")},
			wantErr: `excluded range "fd00::-fd00::ff": mixed families: IPv6 address in an IPv4 address space`,
		},
		{
			name:    "reserved of the other family",
			cfg:     SpaceConfig{Ranges: mustRanges(t, "fd00::/64"), Reserved: []netip.Addr{ip("fd00::1"), ip("10.0.0.1")}},
			wantErr: "reserved address 10.0.0.1: mixed families: IPv4 address in an IPv6 address space",
		},
		{
			name:    "zero reserved address",
			cfg:     SpaceConfig{Ranges: v4, Reserved: []netip.Addr{{}}},
			wantErr: "reserved address invalid IP: invalid (zero) address",
		},
		{
			name:    "IPv4-mapped reserved address",
			cfg:     SpaceConfig{Ranges: mustRanges(t, "::/0"), Reserved: []netip.Addr{ip("::ffff:10.0.0.1")}},
			wantErr: "reserved address ::ffff:10.0.0.1: address ::ffff:10.0.0.1 is IPv4-mapped IPv6",
		},
		{
			name:    "reserved address with a zone",
			cfg:     SpaceConfig{Ranges: mustRanges(t, "fe80::/64"), Reserved: []netip.Addr{ip("fe80::1%eth0")}},
			wantErr: "reserved address fe80::1%eth0: address fe80::1%eth0 has an IPv6 zone",
		},
		{
			name:    "subnet of the other family",
			cfg:     SpaceConfig{Ranges: v4, Subnets: []Subnet{mustSubnet(t, "fd00::/64", "")}},
			wantErr: "subnet fd00::/64: mixed families: IPv6 address in an IPv4 address space",
		},
		{
			name:    "gateway of the other family",
			cfg:     SpaceConfig{Ranges: v4, Subnets: []Subnet{mustSubnet(t, "10.0.0.0/24", "fd00::1")}},
			wantErr: "subnet 10.0.0.0/24: gateway fd00::1: mixed families",
		},
		{
			name:    "gateway outside its subnet",
			cfg:     SpaceConfig{Ranges: v4, Subnets: []Subnet{mustSubnet(t, "10.0.0.0/24", "10.0.1.1")}},
			wantErr: "subnet 10.0.0.0/24: gateway 10.0.1.1 is outside the subnet",
		},
		{
			name:    "invalid subnet prefix",
			cfg:     SpaceConfig{Ranges: v4, Subnets: []Subnet{{}}},
			wantErr: "subnet invalid Prefix: invalid prefix",
		},
		{
			name: "one subnet, two gateways",
			cfg: SpaceConfig{Ranges: v4, Subnets: []Subnet{
				mustSubnet(t, "10.0.0.0/24", "10.0.0.1"),
				mustSubnet(t, "10.0.0.0/25", "10.0.0.1"),
				mustSubnet(t, "10.0.0.0/24", "10.0.0.254"),
			}},
			wantErr: "subnet 10.0.0.0/24 is listed twice with different gateways (10.0.0.1 and 10.0.0.254)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			space, err := NewSpace(tt.cfg)
			if err == nil {
				t.Fatalf("NewSpace() = %q, want an error containing %q", rangeStrings(space.Ranges()), tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewSpace() error = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestSpaceFamily(t *testing.T) {
	for entry, want := range map[string]Family{"10.0.0.0/24": IPv4, "fd00::/64": IPv6} {
		if got := mustSpace(t, SpaceConfig{Ranges: mustRanges(t, entry)}).Family(); got != want {
			t.Errorf("Family() of %s = %s, want %s", entry, got, want)
		}
	}
	if got := Family(0).String(); got != "Family(0)" {
		t.Errorf("Family(0).String() = %q", got)
	}
}

func TestSpaceSubnetOf(t *testing.T) {
	space := mustSpace(t, SpaceConfig{
		Ranges: mustRanges(t, "10.0.0.0/16"),
		Subnets: []Subnet{
			mustSubnet(t, "10.0.0.0/16", "10.0.0.1"),
			mustSubnet(t, "10.0.3.0/24", ""),
			mustSubnet(t, "10.0.3.64/26", "10.0.3.65"),
			mustSubnet(t, "10.0.2.9/24", "10.0.2.1"),
		},
	})
	tests := []struct {
		addr   string
		want   string // the subnet's prefix, or "" for none
		wantGW string
	}{
		{addr: "10.0.0.7", want: "10.0.0.0/16", wantGW: "10.0.0.1"},
		{addr: "10.0.3.7", want: "10.0.3.0/24"},
		{addr: "10.0.3.64", want: "10.0.3.64/26", wantGW: "10.0.3.65"},
		{addr: "10.0.3.65", want: "10.0.3.64/26", wantGW: "10.0.3.65"},
		{addr: "10.0.3.128", want: "10.0.3.0/24"},
		{addr: "10.0.2.200", want: "10.0.2.0/24", wantGW: "10.0.2.1"},
		{addr: "10.1.0.1"},
		{addr: "fd00::1"},
		{addr: "::ffff:10.0.0.7"},
	}
	for _, tt := range tests {
		got, ok := space.SubnetOf(ip(tt.addr))
		if tt.want == "" {
			if ok {
				t.Errorf("SubnetOf(%s) = %v, want none", tt.addr, got)
			}
			continue
		}
		want := Subnet{Prefix: netip.MustParsePrefix(tt.want)}
		if tt.wantGW != "" {
			want.Gateway = ip(tt.wantGW)
		}
		if !ok || got != want {
			t.Errorf("SubnetOf(%s) = %v, %t; want %v", tt.addr, got, ok, want)
		}
	}
}

func TestSpaceIsImmutable(t *testing.T) {
	space := mustSpace(t, SpaceConfig{Ranges: mustRanges(t, "10.0.0.0/24")})
	space.Ranges()[0] = mustRange(t, "10.9.9.9")
	space.Total().SetInt64(0)
	if got := rangeStrings(space.Ranges()); !slices.Equal(got, []string{"10.0.0.0-10.0.0.255"}) {
		t.Errorf("Ranges() after modifying a returned slice = %q", got)
	}
	if got := space.Total(); got.Cmp(big.NewInt(256)) != 0 {
		t.Errorf("Total() after modifying a returned value = %s", got)
	}
}
