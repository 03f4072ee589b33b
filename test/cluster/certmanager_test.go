package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// certManagerNamespace is where cert-manager.yaml installs cert-manager.
const certManagerNamespace = "cert-manager"

// writeCertManager writes cert-manager's components into the local
// clusterctl repository, where the configuration's `cert-manager: url:`
// points clusterctl: cert-manager's CRDs from its module, then the
// controller and CA injector of cert-manager.yaml. It returns the file.
func writeCertManager(t *testing.T, root, repo string) string {
	crds, err := testenv.CertManagerCRDs()
	if err != nil {
		t.Fatal(err)
	}
	components, err := os.ReadFile(filepath.Join(root, "test", "cluster", "cert-manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(repo, "cert-manager", testenv.CertManagerVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "cert-manager.yaml")
	if err := os.WriteFile(file, append(append(crds, "---\n"...), components...), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// checkCertificates checks that cert-manager issued the providers' webhook
// certificates and injected their CA: every Certificate is Ready, its
// Secret was written by cert-manager's issuing controller (which names the
// issuer on it), its certificate is signed by the CA the Secret carries, and
// every webhook configuration and CRD that asks for that Certificate's CA
// holds exactly it. No other process in the cluster issues certificates or
// writes CA bundles.
func checkCertificates(ctx context.Context, t *testing.T, k8s client.Client) {
	var issued, injected int
	// Three minutes: the CA injector looks at every injectable again each
	// minute (test/tools/cert-manager/cainjector).
	waitFor(ctx, t, 3*time.Minute, "cert-manager issued every Certificate and injected its CA", func() (err error) {
		issued, injected, err = certificatesIssued(ctx, k8s)
		return err
	})
	t.Logf("%d Certificates issued by cert-manager, %d CA bundles injected by its CA injector", issued, injected)
	// A Certificate issued again (seen at install, twice within a second)
	// reaches the webhook configuration and the Pod's mounted Secret at
	// different moments (the kubelet refreshes Secret volumes within about
	// a minute, then the webhook server reloads the files): until both hold
	// it, the API server fails every call, whoever's webhook it is.
	var serving int
	waitFor(ctx, t, 3*time.Minute, "every webhook serves, through its Service, the certificate its configuration trusts", func() (err error) {
		serving, err = webhooksServing(ctx, k8s)
		return err
	})
	t.Logf("%d webhooks serve the certificates their configurations trust", serving)
}

// webhooksServing dials, through its Service, every webhook of the
// cluster's webhook configurations that names one, verifying the
// certificate served against the configuration's caBundle for the
// Service's DNS name, as the API server does; it counts those that pass.
func webhooksServing(ctx context.Context, k8s client.Client) (int, error) {
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := errors.Join(k8s.List(ctx, validating), k8s.List(ctx, mutating)); err != nil {
		return 0, err
	}
	hooks := map[string]admissionregistrationv1.WebhookClientConfig{}
	for _, w := range validating.Items {
		for _, hook := range w.Webhooks {
			hooks[w.Name+" "+hook.Name] = hook.ClientConfig
		}
	}
	for _, w := range mutating.Items {
		for _, hook := range w.Webhooks {
			hooks[w.Name+" "+hook.Name] = hook.ClientConfig
		}
	}
	serving := 0
	var errs []error
	for name, cc := range hooks {
		if cc.Service == nil {
			continue
		}
		if err := serves(ctx, k8s, cc); err != nil {
			errs = append(errs, fmt.Errorf("webhook %s: %w", name, err))
			continue
		}
		serving++
	}
	return serving, errors.Join(errs...)
}

// serves dials the webhook's Service and verifies its certificate.
func serves(ctx context.Context, k8s client.Client, cc admissionregistrationv1.WebhookClientConfig) error {
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: cc.Service.Namespace, Name: cc.Service.Name}, svc); err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cc.CABundle) {
		return errors.New("no CA in its caBundle")
	}
	port := strconv.Itoa(int(ptr.Deref(cc.Service.Port, 443)))
	dialer := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config:    &tls.Config{RootCAs: roots, ServerName: cc.Service.Name + "." + cc.Service.Namespace + ".svc", MinVersion: tls.VersionTLS12},
	}
	conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(svc.Spec.ClusterIP, port))
	if err != nil {
		return err
	}
	return conn.Close()
}

func certificatesIssued(ctx context.Context, k8s client.Client) (issued, injected int, err error) {
	certs := &unstructured.UnstructuredList{}
	certs.SetAPIVersion("cert-manager.io/v1")
	certs.SetKind("CertificateList")
	if err := k8s.List(ctx, certs); err != nil {
		return 0, 0, err
	}
	bundles, err := injectedCAs(ctx, k8s)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, c := range certs.Items {
		name := c.GetNamespace() + "/" + c.GetName()
		if !certificateReady(c) {
			errs = append(errs, fmt.Errorf("Certificate %s is not Ready: %v", name, c.Object["status"]))
			continue
		}
		secretName, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
		secret := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: c.GetNamespace(), Name: secretName}, secret); err != nil {
			errs = append(errs, fmt.Errorf("Certificate %s: %w", name, err))
			continue
		}
		if secret.Annotations["cert-manager.io/issuer-name"] == "" || secret.Annotations["cert-manager.io/certificate-name"] != c.GetName() {
			errs = append(errs, fmt.Errorf("Secret %s of Certificate %s was not written by cert-manager's issuing controller: annotations %v", secretName, name, secret.Annotations))
		}
		if err := signedBy(secret.Data["tls.crt"], secret.Data["ca.crt"]); err != nil {
			errs = append(errs, fmt.Errorf("Secret %s of Certificate %s: %w", secretName, name, err))
		}
		for _, where := range bundles[name] {
			if !bytes.Equal(where.ca, secret.Data["ca.crt"]) {
				errs = append(errs, fmt.Errorf("%s asks for the CA of %s (%s, Secret %s at resourceVersion %s) but holds %s",
					where.object, name, fingerprint(secret.Data["ca.crt"]), secretName, secret.ResourceVersion, fingerprint(where.ca)))
			}
			injected++
		}
		issued++
	}
	if injected == 0 {
		errs = append(errs, fmt.Errorf("no webhook configuration or CRD holds a CA injected from a Certificate (Certificates: %d)", len(certs.Items)))
	}
	return issued, injected, errors.Join(errs...)
}

func certificateReady(c unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, cond := range conditions {
		m, _ := cond.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// signedBy verifies the leaf certificate against the CA.
func signedBy(leafPEM, caPEM []byte) error {
	block, _ := pem.Decode(leafPEM)
	if block == nil {
		return fmt.Errorf("tls.crt holds no certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("ca.crt holds no certificate")
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// fingerprint names a CA bundle in a failure message: the start of its
// SHA-256, or "none" for an empty one.
func fingerprint(bundle []byte) string {
	if len(bundle) == 0 {
		return "none"
	}
	sum := sha256.Sum256(bundle)
	return fmt.Sprintf("CA sha256:%x", sum[:6])
}

type injection struct {
	object string
	ca     []byte
}

// injectedCAs returns, by the Certificate named in their
// cert-manager.io/inject-ca-from annotation, the CA bundles the webhook
// configurations and the CRDs' conversion webhooks hold.
func injectedCAs(ctx context.Context, k8s client.Client) (map[string][]injection, error) {
	const annotation = "cert-manager.io/inject-ca-from"
	out := map[string][]injection{}
	validating := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	mutating := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := k8s.List(ctx, validating); err != nil {
		return nil, err
	}
	if err := k8s.List(ctx, mutating); err != nil {
		return nil, err
	}
	for _, w := range validating.Items {
		for _, hook := range w.Webhooks {
			if from := w.Annotations[annotation]; from != "" {
				out[from] = append(out[from], injection{"ValidatingWebhookConfiguration " + w.Name + " " + hook.Name, hook.ClientConfig.CABundle})
			}
		}
	}
	for _, w := range mutating.Items {
		for _, hook := range w.Webhooks {
			if from := w.Annotations[annotation]; from != "" {
				out[from] = append(out[from], injection{"MutatingWebhookConfiguration " + w.Name + " " + hook.Name, hook.ClientConfig.CABundle})
			}
		}
	}
	crds := &unstructured.UnstructuredList{}
	crds.SetAPIVersion("apiextensions.k8s.io/v1")
	crds.SetKind("CustomResourceDefinitionList")
	if err := k8s.List(ctx, crds); err != nil {
		return nil, err
	}
	for _, crd := range crds.Items {
		from := crd.GetAnnotations()[annotation]
		bundle, ok, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		if from == "" || !ok {
			continue
		}
		ca, err := base64.StdEncoding.DecodeString(bundle)
		if err != nil {
			return nil, fmt.Errorf("CRD %s: caBundle: %w", crd.GetName(), err)
		}
		out[from] = append(out[from], injection{"CRD " + crd.GetName(), ca})
	}
	return out, nil
}
