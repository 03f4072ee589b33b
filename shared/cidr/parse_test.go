package cidr

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	tests := []struct {
		entry   string
		want    string // the range, when the entry is valid
		wantErr string // a substring of the error, when it is not
	}{
		{entry: "10.0.0.0/24", want: "10.0.0.0-10.0.0.255"},
		{entry: "10.0.0.7/32", want: "10.0.0.7-10.0.0.7"},
		{entry: "0.0.0.0/0", want: "0.0.0.0-255.255.255.255"},
		{entry: "fd00::/120", want: "fd00::-fd00::ff"},
		{entry: "::/0", want: "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{entry: "10.0.0.1-10.0.0.9", want: "10.0.0.1-10.0.0.9"},
		{entry: "10.0.0.1 - 10.0.0.9", want: "10.0.0.1-10.0.0.9"},
		{entry: " 10.0.0.1\t-\t10.0.0.9 ", want: "10.0.0.1-10.0.0.9"},
		{entry: "10.0.0.5-10.0.0.5", want: "10.0.0.5-10.0.0.5"},
		{entry: "fd00::1-fd00::1:0", want: "fd00::1-fd00::1:0"},
		{entry: "10.0.0.5", want: "10.0.0.5-10.0.0.5"},
		{entry: " fd00::5 ", want: "fd00::5-fd00::5"},

		{entry: "", wantErr: "empty entry"},
		{entry: "  ", wantErr: "empty entry"},
		{entry: "10.0.0.9-10.0.0.1", wantErr: "range start is after its end"},
		{entry: "10.0.0.1-fd00::1", wantErr: "range start is IPv4 but its end is IPv6"},
		{entry: "10.0.0.5/24", wantErr: "CIDR has host bits set (did you mean 10.0.0.0/24?)"},
		{entry: "10.0.0.0/33", wantErr: "ParsePrefix"},
		{entry: "::ffff:10.0.0.1", wantErr: "IPv4-mapped IPv6; write it as the plain IPv4 address 10.0.0.1"},
		{entry: "::ffff:10.0.0.0/120", wantErr: "IPv4-mapped"},
		{entry: "::ffff:10.0.0.1-::ffff:10.0.0.5", wantErr: "range start: address ::ffff:10.0.0.1 is IPv4-mapped"},
		{entry: "fe80::1%eth0", wantErr: "zones are not allowed"},
		{entry: "fe80::1-fe80::5%eth0", wantErr: "range end: address fe80::5%eth0 has an IPv6 zone"},
		{entry: "fe80::%eth0/64", wantErr: "zone"},
		{entry: "10.0.0.1-", wantErr: "range end"},
		{entry: "-10.0.0.1", wantErr: "range start"},
		{entry: "10.0.0.1-10.0.0.2-10.0.0.3", wantErr: "range end"},
		{entry: "10.0.0.0/24-10.0.1.0", wantErr: "range start"},
		{entry: "10.0.0.256", wantErr: "ParseAddr"},
		{entry: "pool-a", wantErr: "range start"},
		{entry: "10.0.0.0/", wantErr: "ParsePrefix"},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			got, err := ParseEntry(tt.entry)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseEntry(%q) = %s, want an error containing %q", tt.entry, got, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), strconv.Quote(tt.entry)+": ") || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseEntry(%q) error = %q, want it to quote the entry and contain %q", tt.entry, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEntry(%q): %v", tt.entry, err)
			}
			if got.String() != tt.want {
				t.Fatalf("ParseEntry(%q) = %s, want %s", tt.entry, got, tt.want)
			}
		})
	}
}

func TestParseEntryErrorIsExact(t *testing.T) {
	_, err := ParseEntry("10.0.0.9-10.0.0.1")
	if want := `"10.0.0.9-10.0.0.1": range start is after its end`; err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
}
