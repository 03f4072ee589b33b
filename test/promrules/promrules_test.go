package promrules

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestNotation(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Series("up", map[string]string{"job": "a", "code": `say "hi"`}), `up{code="say \"hi\"",job="a"}`},
		{Replay(3, 1.5), "1.5x3"},
		{Replay(60, 0, 2), "0 2x60"},
		{Repeat(10, 14, 30), "10+4x30"},
		{Repeat(3, 3, 5), "3+0x5"},
		{Aging(12.25, time.Minute, 90), "12.25+60x90"},
		{Duration(90 * time.Second), "90s"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
}

func TestReadFrom(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total", Help: "h"}, []string{"code"})
	requests.WithLabelValues("429").Add(2)
	requests.WithLabelValues("200").Add(5)
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latency_seconds", Help: "h"})
	latency.Observe(1)
	reg.MustRegister(requests, latency)
	r, err := ReadFrom(reg)
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Value("requests_total", map[string]string{"code": "429"}); v != 2 {
		t.Errorf("requests_total{code=429} = %v, want 2", v)
	}
	if v := r.Value("requests_total", nil); !math.IsNaN(v) {
		t.Errorf("the value of two series of requests_total = %v, want NaN", v)
	}
	if got := len(r.Select("requests_total", nil)); got != 2 {
		t.Errorf("%d series of requests_total, want 2", got)
	}
	if got := len(r.Select("requests_total", map[string]string{"job": TargetLabels["job"], "code": "500"})); got != 0 {
		t.Errorf("%d series of requests_total{code=500}, want none", got)
	}
	for _, name := range []string{"requests_total", "latency_seconds_bucket", "latency_seconds_sum", "latency_seconds_count"} {
		if !r.Names[name] {
			t.Errorf("%s not among the names read", name)
		}
	}
}
