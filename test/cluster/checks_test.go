package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ours are our providers' namespaces and ServiceAccounts.
var ours = map[string]string{
	"ipam-metal-vrf-system":              "ipam-metal-vrf-manager",
	"cluster-api-provider-packet-system": "cluster-api-provider-packet-manager",
}

// checkMetrics scrapes each manager as Prometheus would: through its
// metrics Service, over HTTPS, with the token of a ServiceAccount bound to
// the provider's metrics-reader ClusterRole. A request without a token must
// be refused.
func checkMetrics(ctx context.Context, t *testing.T, k8s client.Client, cfg *rest.Config) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scraper := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scraper"}}
	if err := k8s.Create(ctx, scraper); err != nil {
		t.Fatal(err)
	}
	// Every manager has this series from its start: the check does not
	// depend on what the other checks did.
	const series = "controller_runtime_active_workers"
	prefixes := map[string]string{
		"ipam-metal-vrf-system":              "ipam-metal-vrf-",
		"cluster-api-provider-packet-system": "cluster-api-provider-packet-",
	}
	for _, prefix := range prefixes {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: prefix + "scraper"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: prefix + "metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "scraper"}},
		}
		if err := k8s.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
	}
	token, err := clientset.CoreV1().ServiceAccounts("default").CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The managers serve a certificate of their own making on this port.
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // only the token matters here
	}}
	for ns, prefix := range prefixes {
		service := &corev1.Service{}
		name := prefix + "controller-manager-metrics-service"
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, service); err != nil {
			t.Errorf("%s: metrics Service: %v", ns, err)
			continue
		}
		url := fmt.Sprintf("https://%s:8443/metrics", service.Spec.ClusterIP)
		waitFor(ctx, t, 2*time.Minute, "metrics of "+ns, func() error {
			status, _, err := get(ctx, httpClient, url, "")
			if err != nil {
				return err
			}
			if status != http.StatusUnauthorized && status != http.StatusForbidden {
				return fmt.Errorf("without a token: %d, want 401 or 403", status)
			}
			status, body, err := get(ctx, httpClient, url, token.Status.Token)
			if err != nil {
				return err
			}
			if status != http.StatusOK || !strings.Contains(body, series) {
				return fmt.Errorf("with the scraper's token: %d, %d bytes, want 200 with %s", status, len(body), series)
			}
			return nil
		})
	}
}

func get(ctx context.Context, c *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// checkSecurityContext finds each of our managers' processes on the node
// (this pid namespace holds the containers') and reads from the kernel what
// the runtime made of the Pod's security context and limits.
func checkSecurityContext(ctx context.Context, t *testing.T, k8s client.Client) {
	for ns := range ours {
		pods := &corev1.PodList{}
		if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, pod := range pods.Items {
			if pod.Status.Phase != corev1.PodRunning {
				continue
			}
			pid := podProcess(string(pod.UID), "/manager")
			if pid == "" {
				t.Errorf("%s/%s: no /manager process in the Pod's cgroup", ns, pod.Name)
				continue
			}
			status := readProc(t, pid, "status")
			for _, want := range []string{
				"Uid:\t65532\t65532\t65532\t65532", "Gid:\t65532\t65532\t65532\t65532",
				"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
				"NoNewPrivs:\t1", "Seccomp:\t2",
			} {
				if !strings.Contains(status, want) {
					t.Errorf("%s/%s: /proc/%s/status lacks %q:\n%s", ns, pod.Name, pid, want, status)
				}
			}
			// The root filesystem: the mount at / inside the container.
			rootRO := false
			for _, line := range strings.Split(readProc(t, pid, "mountinfo"), "\n") {
				fields := strings.Fields(line)
				if len(fields) > 5 && fields[4] == "/" {
					rootRO = strings.HasPrefix(fields[5], "ro")
				}
			}
			if !rootRO {
				t.Errorf("%s/%s: the root filesystem is writable", ns, pod.Name)
			}
			limit := cgroupFile(t, pid, "memory", "memory.limit_in_bytes")
			if limit != fmt.Sprint(512<<20) {
				t.Errorf("%s/%s: memory limit %s bytes, want 512Mi", ns, pod.Name, limit)
			}
			if env := strings.Split(readProc(t, pid, "environ"), "\x00"); !slices.Contains(env, "GOMEMLIMIT="+limit) {
				t.Errorf("%s/%s: the manager's environment lacks GOMEMLIMIT=%s (its memory limit): %q", ns, pod.Name, limit, env)
			}
		}
	}
}

// podProcess is the pid of the process running one of commands whose
// cgroup is the Pod's (the kubelet names it after the Pod's UID).
func podProcess(podUID string, commands ...string) string {
	cgroups, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, path := range cgroups {
		data, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(data), "pod"+podUID) {
			continue
		}
		pid := filepath.Base(filepath.Dir(path))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		for _, command := range commands {
			if strings.HasPrefix(string(cmdline), command+"\x00") {
				return pid
			}
		}
	}
	return ""
}

func readProc(t *testing.T, pid, file string) string {
	data, err := os.ReadFile(filepath.Join("/proc", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// cgroupFile reads a file of the process's cgroup in a v1 hierarchy.
func cgroupFile(t *testing.T, pid, controller, file string) string {
	for _, line := range strings.Split(readProc(t, pid, "cgroup"), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ","+controller+",") {
			data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, parts[2], file))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(data))
		}
	}
	t.Fatalf("process %s has no %s cgroup", pid, controller)
	return ""
}

// checkRights asks the API server (a SubjectAccessReview, what `kubectl
// auth can-i --as` sends) whether each manager's ServiceAccount may do
// what docs/install.md ("What each manager may do") grants and what it
// says the manager may not do.
func checkRights(ctx context.Context, t *testing.T, k8s client.Client) {
	type right struct {
		verb, resource, namespace string
		allowed                   bool
	}
	rights := map[string][]right{
		"ipam-metal-vrf-system": {
			{"update", "metalvrfippools.ipam.cluster.x-k8s.io", "default", true},
			{"patch", "globalmetalvrfippools.ipam.cluster.x-k8s.io", "", true},
			{"update", "metalvrfippools.ipam.cluster.x-k8s.io/status", "default", true},
			{"patch", "ipaddressclaims.ipam.cluster.x-k8s.io", "default", true},
			{"create", "ipaddresses.ipam.cluster.x-k8s.io", "default", true},
			{"delete", "ipaddresses.ipam.cluster.x-k8s.io", "default", true},
			{"watch", "clusters.cluster.x-k8s.io", "", true},
			{"list", "packetclusters.infrastructure.cluster.x-k8s.io", "", true},
			{"get", "secrets", "default", true},
			{"create", "events.events.k8s.io", "default", true},
			{"get", "namespaces/kube-system", "", true},
			{"create", "leases.coordination.k8s.io", "ipam-metal-vrf-system", true},
			{"list", "secrets", "default", false},
			{"watch", "secrets", "", false},
			{"create", "secrets", "default", false},
			{"patch", "secrets", "default", false},
			{"delete", "secrets", "default", false},
			// The companion pool of an adopted in-cluster pool (docs/adoption.md).
			{"create", "metalvrfippools.ipam.cluster.x-k8s.io", "default", true},
			{"delete", "ipaddressclaims.ipam.cluster.x-k8s.io", "default", false},
			{"update", "clusters.cluster.x-k8s.io", "default", false},
			{"get", "namespaces/default", "", false},
			{"create", "leases.coordination.k8s.io", "default", false},
		},
		"cluster-api-provider-packet-system": {
			{"patch", "packetmachines.infrastructure.cluster.x-k8s.io", "default", true},
			{"update", "packetclusters.infrastructure.cluster.x-k8s.io/status", "default", true},
			{"list", "machines.cluster.x-k8s.io", "", true},
			{"create", "ipaddressclaims.ipam.cluster.x-k8s.io", "default", true},
			{"delete", "ipaddressclaims.ipam.cluster.x-k8s.io", "default", true},
			{"watch", "ipaddresses.ipam.cluster.x-k8s.io", "", true},
			{"get", "secrets", "default", true},
			{"create", "secrets", "default", true},
			{"patch", "secrets", "default", true},
			{"create", "leases.coordination.k8s.io", "cluster-api-provider-packet-system", true},
			{"list", "secrets", "default", false},
			{"watch", "secrets", "", false},
			{"update", "secrets", "default", false},
			{"delete", "secrets", "default", false},
			{"create", "ipaddresses.ipam.cluster.x-k8s.io", "default", false},
			{"update", "machines.cluster.x-k8s.io", "default", false},
			{"create", "packetclusters.infrastructure.cluster.x-k8s.io", "default", false},
		},
	}
	for ns, list := range rights {
		user := "system:serviceaccount:" + ns + ":" + ours[ns]
		for _, r := range list {
			attrs := resourceAttributes(r.verb, r.resource, r.namespace)
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: attrs,
			}}
			if err := k8s.Create(ctx, review); err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != r.allowed {
				t.Errorf("%s: %s %s (namespace %q) allowed=%v (%s), want allowed=%v",
					user, r.verb, r.resource, r.namespace, review.Status.Allowed, review.Status.Reason, r.allowed)
			}
		}
	}
}

// resourceAttributes reads a resource as `kubectl auth can-i` takes it:
// resource.group, resource.group/subresource, or namespaces/<name>.
func resourceAttributes(verb, resource, namespace string) *authorizationv1.ResourceAttributes {
	attrs := &authorizationv1.ResourceAttributes{Verb: verb, Namespace: namespace}
	resource, after, _ := strings.Cut(resource, "/")
	if resource == "namespaces" {
		attrs.Name = after
	} else {
		attrs.Subresource = after
	}
	attrs.Resource, attrs.Group, _ = strings.Cut(resource, ".")
	return attrs
}
