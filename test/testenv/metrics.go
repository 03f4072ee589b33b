package testenv

import (
	"bytes"
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// APIServerMetrics reads the metrics of the API server cfg reaches.
func APIServerMetrics(ctx context.Context, cfg *rest.Config) (map[string]*dto.MetricFamily, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	metricsClient, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	text, err := metricsClient.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	return families, nil
}

// FenceRefusals counts the record creations the allocation fence has
// refused so far (config/ipam/fence, as testenv installs it), from the API
// server's apiserver_validating_admission_policy_check_total.
func FenceRefusals(ctx context.Context, cfg *rest.Config) (float64, error) {
	families, err := APIServerMetrics(ctx, cfg)
	if err != nil {
		return 0, err
	}
	var refused float64
	for _, sample := range families["apiserver_validating_admission_policy_check_total"].GetMetric() {
		labels := map[string]string{}
		for _, label := range sample.GetLabel() {
			labels[label.GetName()] = label.GetValue()
		}
		if labels["policy"] == fencePolicy && labels["enforcement_action"] == "deny" {
			refused += sample.GetCounter().GetValue()
		}
	}
	return refused, nil
}
