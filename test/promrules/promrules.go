// Package promrules checks the operators' alerts (config/monitoring/alerts.yaml)
// and dashboard (config/monitoring/dashboard.json) against what the managers
// export: it reads the managers' registry as Prometheus would scrape it,
// turns the reads into the input series of promtool's rule unit tests, runs
// `promtool check rules` and `promtool test rules`, and lists the metrics
// the dashboard's and the alerts' expressions select (with promqlnames,
// built beside promtool from the Prometheus module).
//
// A test takes a few reads seconds apart, while the alerts speak of minutes.
// The input series are the values read, laid one promtool interval apart,
// and continued past the last read as the metric itself goes on: a counter
// at the pace it had between two reads (Repeat), a gauge held (Replay), an
// age growing by the interval (Aging). Only time is extrapolated; every
// series name, label and value comes from a read.
package promrules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

// TargetLabels are the labels Prometheus attaches to every series it
// scrapes; Read adds them, as the managers' series carry none of their own.
var TargetLabels = map[string]string{"job": "metal-vrf", "instance": "manager:8443"}

// Read is one read of a registry, as a scrape sees it.
type Read struct {
	// Values are the counters' and gauges' values by series, in promtool's
	// notation: name{label="value",...}, labels sorted.
	Values map[string]float64
	// labels are each series' name (as __name__) and labels.
	labels map[string]map[string]string
	// Names are the names a scrape shows, histograms' and summaries'
	// _bucket, _sum and _count included.
	Names map[string]bool
}

// ReadFrom gathers g.
func ReadFrom(g prometheus.Gatherer) (Read, error) {
	families, err := g.Gather()
	if err != nil {
		return Read{}, err
	}
	r := Read{Values: map[string]float64{}, labels: map[string]map[string]string{}, Names: map[string]bool{}}
	for _, f := range families {
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			r.Names[name+"_bucket"], r.Names[name+"_sum"], r.Names[name+"_count"] = true, true, true
			continue
		case dto.MetricType_SUMMARY:
			r.Names[name], r.Names[name+"_sum"], r.Names[name+"_count"] = true, true, true
			continue
		}
		r.Names[name] = true
		for _, m := range f.GetMetric() {
			labels := maps.Clone(TargetLabels)
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var v float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			default:
				v = m.GetUntyped().GetValue()
			}
			series := Series(name, labels)
			r.Values[series] = v
			labels["__name__"] = name
			r.labels[series] = labels
		}
	}
	return r, nil
}

// Series names a series in promtool's notation.
func Series(name string, labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+strconv.Quote(labels[k]))
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// Select returns the series of metric name whose labels include match.
func (r Read) Select(name string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range r.Values {
		labels := r.labels[series]
		all := labels["__name__"] == name
		for k, want := range match {
			got, ok := labels[k]
			all = all && ok && got == want
		}
		if all {
			out[series] = v
		}
	}
	return out
}

// Value is the value of the one series of name whose labels include match,
// NaN unless exactly one matches.
func (r Read) Value(name string, match map[string]string) float64 {
	selected := r.Select(name, match)
	if len(selected) != 1 {
		return math.NaN()
	}
	for _, v := range selected {
		return v
	}
	return math.NaN()
}

// number writes v as promtool's series notation reads it.
func number(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Replay is the values read, one interval apart, the last held for hold
// more intervals.
func Replay(hold int, values ...float64) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = number(v)
	}
	parts[len(parts)-1] += "x" + strconv.Itoa(hold)
	return strings.Join(parts, " ")
}

// Repeat is a counter read as from, then as to: it goes on from `from`,
// growing by to-from every interval, for n intervals.
func Repeat(from, to float64, n int) string {
	return fmt.Sprintf("%s+%sx%d", number(from), number(to-from), n)
}

// Aging is an age read as v that goes on growing with time: by interval
// every interval, for n intervals.
func Aging(v float64, interval time.Duration, n int) string {
	return fmt.Sprintf("%s+%sx%d", number(v), number(interval.Seconds()), n)
}

// Input is one input series of a rule unit test.
type Input struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// Inputs are the given series (as Select returns them), each with the
// values values writes for it from its value read.
func Inputs(series map[string]float64, values func(series string, v float64) string) []Input {
	var out []Input
	for _, s := range slices.Sorted(maps.Keys(series)) {
		out = append(out, Input{Series: s, Values: values(s, series[s])})
	}
	return out
}

// UnitTest is one test of a promtool rule unit test file.
type UnitTest struct {
	Name string `json:"name"`
	// Interval is the time between the values of the input series; TestRules
	// sets it.
	Interval    string      `json:"interval"`
	InputSeries []Input     `json:"input_series"`
	AlertTests  []AlertTest `json:"alert_rule_test"`
}

// AlertTest says which alerts of one name fire at EvalTime: none when
// Alerts is empty.
type AlertTest struct {
	EvalTime  string  `json:"eval_time"`
	AlertName string  `json:"alertname"`
	Alerts    []Alert `json:"exp_alerts"`
}

// Alert is a firing alert with all its labels and annotations.
type Alert struct {
	Labels      map[string]string `json:"exp_labels"`
	Annotations map[string]string `json:"exp_annotations"`
}

// Duration writes d as promtool's durations read it (whole seconds).
func Duration(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) + "s" }

// Tools are the programs the checks run.
type Tools struct {
	Promtool, PromQLNames string
}

// CheckRules extracts the rule groups of the PrometheusRule at path into
// dir, runs `promtool check rules` on them and returns the file and the
// alerts' expressions.
func (t Tools) CheckRules(dir, path string) (rules string, exprs []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	var pr struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Rules []struct {
					Expr string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	if pr.Kind != "PrometheusRule" {
		return "", nil, fmt.Errorf("%s: kind %q, want PrometheusRule", path, pr.Kind)
	}
	// The spec is a rule file as Prometheus reads it; it is written out
	// whole, so fields this test does not know of are checked too.
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return "", nil, err
	}
	spec, err := yaml.Marshal(raw["spec"])
	if err != nil {
		return "", nil, err
	}
	rules = filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, spec, 0o600); err != nil {
		return "", nil, err
	}
	if _, err := run(t.Promtool, nil, "check", "rules", rules); err != nil {
		return "", nil, err
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return rules, exprs, nil
}

// TestRules writes tests into dir as a unit test file of rules, their
// input series' values and the rules' evaluations every interval, and runs
// `promtool test rules` on it; the error holds promtool's report.
func (t Tools) TestRules(dir, rules string, interval time.Duration, tests []UnitTest) error {
	for i := range tests {
		tests[i].Interval = Duration(interval)
	}
	file := map[string]any{
		"rule_files":          []string{filepath.Base(rules)},
		"evaluation_interval": Duration(interval),
		"tests":               tests,
	}
	data, err := yaml.Marshal(file)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "rules_test.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	if _, err := run(t.Promtool, nil, "test", "rules", path); err != nil {
		return fmt.Errorf("%w\nthe test file (%s):\n%s", err, path, data)
	}
	return nil
}

// DashboardExprs returns the expressions of every panel of the Grafana
// dashboard at path (rows' panels included), with Grafana's interval
// variables replaced by a duration so they parse as PromQL.
func DashboardExprs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dashboard struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	var exprs []string
	var walk func([]json.RawMessage) error
	walk = func(panels []json.RawMessage) error {
		for _, raw := range panels {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for _, target := range p.Targets {
				exprs = append(exprs, grafana.Replace(target.Expr))
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return exprs, walk(dashboard.Panels)
}

// MetricNames parses exprs with Prometheus's parser and returns the metric
// names each selects; an expression that does not parse, or selects series
// by anything but a metric name, is an error naming it.
func (t Tools) MetricNames(exprs []string) (map[string][]string, error) {
	in, err := json.Marshal(exprs)
	if err != nil {
		return nil, err
	}
	out, err := run(t.PromQLNames, in)
	if err != nil {
		return nil, err
	}
	var results []struct {
		Expr  string   `json:"expr"`
		Names []string `json:"names"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(out, &results); err != nil {
		return nil, err
	}
	names := map[string][]string{}
	var errs []string
	for _, r := range results {
		if r.Error != "" {
			errs = append(errs, fmt.Sprintf("%q: %s", r.Expr, r.Error))
		}
		names[r.Expr] = r.Names
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("expressions that do not parse:\n%s", strings.Join(errs, "\n"))
	}
	return names, nil
}

// run runs a program with stdin and returns its standard output, or an
// error with its whole output.
func run(name string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}
