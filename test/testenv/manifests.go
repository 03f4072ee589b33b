package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// DecodeObjects decodes the documents of a multi-document YAML (or JSON)
// stream, skipping empty ones.
func DecodeObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objects []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			objects = append(objects, obj)
		}
	}
}

// ReadObjects decodes the documents of a multi-document YAML file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objects, err := DecodeObjects(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return objects, nil
}

// installedWebhooks is the IPAM provider's validating webhook configuration
// as the components install it: config/ipam/webhook with the match
// conditions of config/ipam/default's overlay, which decide which requests
// reach the webhooks at all (a manager stopped by a test must not fail
// updates the installed configuration never sends it).
func installedWebhooks(root string) ([]*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	read := func(path string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
		objects, err := ReadObjects(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		if len(objects) != 1 {
			return nil, fmt.Errorf("%s: %d objects, want one ValidatingWebhookConfiguration", path, len(objects))
		}
		config := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objects[0].Object, config); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return config, nil
	}
	config, err := read("config/ipam/webhook/manifests.yaml")
	if err != nil {
		return nil, err
	}
	overlay, err := read("config/ipam/default/webhook-match-conditions.yaml")
	if err != nil {
		return nil, err
	}
	conditions := map[string][]admissionregistrationv1.MatchCondition{}
	for _, hook := range overlay.Webhooks {
		conditions[hook.Name] = hook.MatchConditions
	}
	for i := range config.Webhooks {
		config.Webhooks[i].MatchConditions = conditions[config.Webhooks[i].Name]
		delete(conditions, config.Webhooks[i].Name)
	}
	for name := range conditions {
		return nil, fmt.Errorf("config/ipam/default/webhook-match-conditions.yaml names webhook %s, which config/ipam/webhook does not have", name)
	}
	return []*admissionregistrationv1.ValidatingWebhookConfiguration{config}, nil
}
