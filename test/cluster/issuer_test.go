package cluster_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// issueCertificates stands in for cert-manager, whose controller and CA
// injector cannot be built here (their main packages are modules of their
// own that the module proxy does not serve; docs/cluster.md). It does what
// those two do for the providers' objects, from the same objects: for each
// Certificate it writes the Secret spec.secretName names, a serving
// certificate for spec.dnsNames signed by a CA of its own (tls.crt,
// tls.key, ca.crt), and into every webhook configuration and CRD annotated
// cert-manager.io/inject-ca-from it writes that CA as the caBundle. So the
// webhooks' DNS names, Secret names and injection annotations are the
// components' own, and a mistake in them fails the test as it would with
// cert-manager. It runs until ctx ends.
func issueCertificates(ctx context.Context, t *testing.T, k8s client.Client, ca *authority) {
	for ctx.Err() == nil {
		if err := issueOnce(ctx, t, k8s, ca); err != nil && ctx.Err() == nil {
			t.Logf("issuing certificates: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

func issueOnce(ctx context.Context, t *testing.T, k8s client.Client, ca *authority) error {
	certs := &unstructured.UnstructuredList{}
	certs.SetAPIVersion("cert-manager.io/v1")
	certs.SetKind("CertificateList")
	if err := k8s.List(ctx, certs); err != nil {
		return err
	}
	for _, c := range certs.Items {
		secretName, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
		dnsNames, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
		if secretName == "" {
			continue
		}
		err := k8s.Get(ctx, client.ObjectKey{Namespace: c.GetNamespace(), Name: secretName}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		crt, key := ca.issue(t, c.GetName(), nil, dnsNames, nil)
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.GetNamespace(), Name: secretName,
				Annotations: map[string]string{"cert-manager.io/certificate-name": c.GetName()}},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte(crt), "tls.key": []byte(key), "ca.crt": []byte(ca.certPEM)},
		}
		if err := k8s.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for _, kind := range []struct{ apiVersion, list, path string }{
		{"admissionregistration.k8s.io/v1", "ValidatingWebhookConfigurationList", "webhooks"},
		{"admissionregistration.k8s.io/v1", "MutatingWebhookConfigurationList", "webhooks"},
		{"apiextensions.k8s.io/v1", "CustomResourceDefinitionList", "conversion"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(kind.apiVersion)
		list.SetKind(kind.list)
		if err := k8s.List(ctx, list); err != nil {
			return err
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if obj.GetAnnotations()["cert-manager.io/inject-ca-from"] == "" {
				continue
			}
			if injectCA(obj, kind.path, []byte(ca.certPEM)) {
				if err := k8s.Update(ctx, obj); err != nil && !apierrors.IsConflict(err) {
					return err
				}
			}
		}
	}
	return nil
}

// injectCA sets caBundle on each webhook's clientConfig, or on a CRD's
// conversion webhook; it reports whether anything changed.
func injectCA(obj *unstructured.Unstructured, path string, caPEM []byte) bool {
	bundle := base64.StdEncoding.EncodeToString(caPEM)
	changed := false
	set := func(m map[string]any) {
		cc, ok := m["clientConfig"].(map[string]any)
		if !ok {
			return
		}
		if cc["caBundle"] != bundle {
			cc["caBundle"] = bundle
			changed = true
		}
	}
	if path == "webhooks" {
		hooks, _ := obj.Object["webhooks"].([]any)
		for _, h := range hooks {
			if m, ok := h.(map[string]any); ok {
				set(m)
			}
		}
		return changed
	}
	if hook, ok, _ := unstructured.NestedMap(obj.Object, "spec", "conversion", "webhook"); ok {
		set(hook)
		if changed {
			_ = unstructured.SetNestedMap(obj.Object, hook, "spec", "conversion", "webhook")
		}
	}
	return changed
}
