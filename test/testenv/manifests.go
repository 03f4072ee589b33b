package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	ipamv1alpha1 "github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
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

// ServesMutatingAdmissionPolicy tells whether the API server serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36
// and later), which the release-finalizer policy is written in.
func (e *Environment) ServesMutatingAdmissionPolicy() (bool, error) {
	_, err := e.Client.RESTMapper().RESTMapping(
		schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}, "v1")
	if apimeta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// InstallAdmissionPolicy creates the objects of the release-finalizer
// admission policy (config/ipam/admission, as written or as released) and
// waits until the API server applies it: a claim of our pools comes out of a
// dry-run create with ipamutil's release finalizer.
func (e *Environment) InstallAdmissionPolicy(ctx context.Context, objects []*unstructured.Unstructured) error {
	c := e.Client
	for _, obj := range objects {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	// Until the claim CRD is served and the policy loaded, the probe fails
	// or comes back without the finalizer: both are retried.
	var lastErr error
	probe := func(ctx context.Context) (bool, error) {
		claim := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "admission-probe-"},
			Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
				APIGroup: ipamv1alpha1.GroupVersion.Group, Kind: ipamv1alpha1.MetalVRFIPPoolKind, Name: "probe",
			}},
		}
		if lastErr = c.Create(ctx, claim, client.DryRunAll); lastErr != nil {
			return false, nil
		}
		return controllerutil.ContainsFinalizer(claim, ipamutil.ReleaseAddressFinalizer), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, probe); err != nil {
		return fmt.Errorf("the release-finalizer admission policy did not take effect: %w", errors.Join(err, lastErr))
	}
	e.AdmissionPolicy = true
	return nil
}
