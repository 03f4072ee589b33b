package metal

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"", 0, false},
		{"3", 3 * time.Second, true},
		{"-1", 0, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"soon", 0, false},
	} {
		got, ok := parseRetryAfter(tc.header, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.withDefaults()
	for n, ceiling := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 64: time.Second} {
		for range 50 {
			if d := p.backoff(n); d < ceiling/2 || d > ceiling {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, ceiling/2, ceiling)
			}
		}
	}
}

func TestRepeatable(t *testing.T) {
	for _, tc := range []struct {
		method string
		op     operation
		want   bool
	}{
		{http.MethodGet, opFindVrfs, true},
		{http.MethodDelete, opDeleteDevice, true},
		{http.MethodPost, opCreateDevice, false},
		{http.MethodPost, opCreatePortVlanAssignmentBatch, false},
		{http.MethodPost, opAssignPort, true},
		{http.MethodPost, opBondPort, true},
	} {
		req, _ := http.NewRequest(tc.method, "http://x", nil)
		if got := repeatable(req, tc.op); got != tc.want {
			t.Errorf("repeatable(%s %s) = %v, want %v", tc.method, tc.op.name, got, tc.want)
		}
	}
}
