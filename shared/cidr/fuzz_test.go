package cidr

import (
	"errors"
	"math/big"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"go4.org/netipx"
)

// parserSeeds are valid and invalid entries of every form, the seed corpus
// of the parser fuzz targets.
var parserSeeds = []string{
	"10.0.0.0/24", "0.0.0.0/0", "10.0.0.7/32", "fd00::/120", "::/0",
	"10.0.0.1-10.0.0.9", " 10.0.0.1 - 10.0.0.9 ", "fd00::1-fd00::1:0",
	"10.0.0.5", "fd00::5",
	"", "10.0.0.9-10.0.0.1", "10.0.0.1-fd00::1", "10.0.0.5/24", "10.0.0.0/33",
	"::ffff:10.0.0.1", "::ffff:10.0.0.0/120", "fe80::1%eth0", "fe80::%eth0/64",
	"10.0.0.1-", "-", "10.0.0.1-10.0.0.2-10.0.0.3", "10.0.0.256", "pool",
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range parserSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		r, err := ParseEntry(entry)
		if err != nil {
			if !strings.HasPrefix(err.Error(), strconv.Quote(entry)+": ") {
				t.Fatalf("ParseEntry(%q) error %q does not start with the quoted entry", entry, err)
			}
			return
		}
		if !r.IsValid() || FamilyOf(r.From()) != FamilyOf(r.To()) {
			t.Fatalf("ParseEntry(%q) = %s, an invalid range", entry, r)
		}
		for _, a := range []netip.Addr{r.From(), r.To()} {
			if err := checkAddr(a); err != nil {
				t.Fatalf("ParseEntry(%q) = %s: %v", entry, r, err)
			}
		}
		// Every range prints as a "from-to" entry that parses back to itself.
		if again, err := ParseEntry(r.String()); err != nil || again != r {
			t.Fatalf("ParseEntry(%q) = %s, which parses back as %s, %v", entry, r, again, err)
		}
	})
}

// FuzzAllocator builds a Space from fuzzed entries (comma-separated ranges and
// exclusions, one subnet and its gateway) and checks the Allocator's
// invariants over a few operations driven by ops.
func FuzzAllocator(f *testing.F) {
	f.Add("10.0.0.0/24", "10.0.0.10-10.0.0.20", "10.0.0.0/24", "10.0.0.1", false, []byte{0, 0, 1, 2, 0})
	f.Add("10.0.0.0/30", "", "10.0.0.0/30", "", false, []byte{0, 0, 0, 1, 0, 2})
	f.Add("10.0.0.0/31,10.0.0.7", "10.0.0.1", "10.0.0.0/31", "", true, []byte{0, 0, 0})
	f.Add("fd00::/64", "fd00::2-fd00::4", "fd00::/64", "fd00::1", false, []byte{0, 0, 0, 2, 1})
	f.Add("::/0", "", "::/0", "", false, []byte{0, 1, 2, 0})
	f.Add("255.255.255.254-255.255.255.255", "", "0.0.0.0/0", "", false, []byte{0, 0, 0, 2, 2})
	f.Add("10.0.0.0/24,fd00::/64", "", "", "", false, []byte{0})
	f.Add("10.0.0.0/24", "", "10.0.0.0/24", "10.1.0.1", false, []byte{0})
	f.Fuzz(func(t *testing.T, rangesCSV, excludedCSV, subnetPrefix, gateway string, allocateReserved bool, ops []byte) {
		cfg, ok := fuzzSpaceConfig(rangesCSV, excludedCSV, subnetPrefix, gateway)
		if !ok {
			return
		}
		cfg.AllocateReserved = allocateReserved
		space, err := NewSpace(cfg)
		if err != nil {
			return
		}
		alloc := NewAllocator(space)
		var handedOut []netip.Addr
		for _, op := range ops[:min(len(ops), 64)] {
			switch op % 3 {
			case 0:
				addr, err := alloc.Next()
				if errors.Is(err, ErrExhausted) {
					if alloc.Free().Sign() != 0 {
						t.Fatalf("Next() reported exhaustion with %s addresses free", alloc.Free())
					}
					continue
				}
				if err != nil || !space.Contains(addr) || !alloc.InUse(addr) {
					t.Fatalf("Next() = %s, %v; Contains %t, InUse %t", addr, err, space.Contains(addr), alloc.InUse(addr))
				}
				if err := alloc.Allocate(addr); !errors.Is(err, ErrInUse) {
					t.Fatalf("Allocate(%s) right after Next handed it out: %v", addr, err)
				}
				handedOut = append(handedOut, addr)
			case 1:
				if len(handedOut) == 0 {
					continue
				}
				addr := handedOut[len(handedOut)-1]
				handedOut = handedOut[:len(handedOut)-1]
				if err := alloc.Release(addr); err != nil || alloc.InUse(addr) {
					t.Fatalf("Release(%s): %v; InUse %t", addr, err, alloc.InUse(addr))
				}
			case 2:
				if out := alloc.Seed(handedOut); len(out) != 0 {
					t.Fatalf("Seed of addresses Next handed out returned %v", out)
				}
			}
			if used := new(big.Int).Add(alloc.Free(), big.NewInt(int64(alloc.Used()))); used.Cmp(space.Total()) != 0 || alloc.Used() != len(handedOut) {
				t.Fatalf("Used() %d + Free() %s != Total() %s, or Used() != %d handed out", alloc.Used(), alloc.Free(), space.Total(), len(handedOut))
			}
		}
	})
}

// fuzzSpaceConfig parses the fuzzed strings, reporting false if any is not
// valid input for NewSpace.
func fuzzSpaceConfig(rangesCSV, excludedCSV, subnetPrefix, gateway string) (SpaceConfig, bool) {
	parseCSV := func(csv string) ([]netipx.IPRange, bool) {
		if csv == "" {
			return nil, true
		}
		var ranges []netipx.IPRange
		for _, entry := range strings.Split(csv, ",") {
			r, err := ParseEntry(entry)
			if err != nil {
				return nil, false
			}
			ranges = append(ranges, r)
		}
		return ranges, true
	}
	var cfg SpaceConfig
	var ok bool
	if cfg.Ranges, ok = parseCSV(rangesCSV); !ok {
		return cfg, false
	}
	if cfg.Excluded, ok = parseCSV(excludedCSV); !ok {
		return cfg, false
	}
	if subnetPrefix == "" {
		return cfg, true
	}
	subnet := Subnet{}
	var err error
	if subnet.Prefix, err = netip.ParsePrefix(subnetPrefix); err != nil {
		return cfg, false
	}
	if gateway != "" {
		if subnet.Gateway, err = netip.ParseAddr(gateway); err != nil {
			return cfg, false
		}
	}
	cfg.Subnets = []Subnet{subnet}
	return cfg, true
}
