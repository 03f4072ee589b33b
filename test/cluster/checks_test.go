package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ours are our providers' namespaces and ServiceAccounts.
var ours = map[string]string{
	"ipam-metal-vrf-system":              "ipam-metal-vrf-manager",
	"cluster-api-provider-packet-system": "cluster-api-provider-packet-manager",
}

// checkMetrics reads each manager's metrics through its metrics Service
// (the API server's Service proxy) and looks for the provider's own series.
func checkMetrics(ctx context.Context, t *testing.T, k8s client.Client, cfg *rest.Config) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for ns, series := range map[string]string{
		"ipam-metal-vrf-system":              "metal_vrf_ipam_",
		"cluster-api-provider-packet-system": "controller_runtime_active_workers",
	} {
		services := &corev1.ServiceList{}
		if err := k8s.List(ctx, services, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		var metricsService string
		for _, s := range services.Items {
			if strings.HasSuffix(s.Name, "metrics-service") {
				metricsService = s.Name
			}
		}
		if metricsService == "" {
			t.Errorf("%s: no metrics Service", ns)
			continue
		}
		waitFor(ctx, t, 2*time.Minute, "metrics of "+ns, func() error {
			body, err := clientset.CoreV1().Services(ns).ProxyGet("http", metricsService, "metrics", "/metrics", nil).DoRaw(ctx)
			if err != nil {
				return err
			}
			if !strings.Contains(string(body), series) {
				return fmt.Errorf("no %s in %d bytes of metrics", series, len(body))
			}
			return nil
		})
	}
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
			pid := managerProcess(t, string(pod.UID))
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
			for _, line := range strings.Split(status, "\n") {
				if strings.HasPrefix(line, "VmRSS:") {
					t.Logf("BENCHMARK RSS of %s/%s: %s", ns, pod.Name, strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")))
				}
			}
			limit := cgroupFile(t, pid, "memory", "memory.limit_in_bytes")
			if limit != fmt.Sprint(512<<20) {
				t.Errorf("%s/%s: memory limit %s bytes, want 512Mi", ns, pod.Name, limit)
			}
		}
	}
}

// managerProcess is the pid of the /manager process whose cgroup is the
// Pod's (the kubelet names it after the Pod's UID).
func managerProcess(t *testing.T, podUID string) string {
	cgroups, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, path := range cgroups {
		data, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(data), "pod"+podUID) {
			continue
		}
		pid := filepath.Base(filepath.Dir(path))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		if strings.HasPrefix(string(cmdline), "/manager\x00") {
			return pid
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

// checkRights asks the API server, as each manager's ServiceAccount, for
// what docs/install.md ("What each manager may do") grants and what it
// says the manager may not do.
func checkRights(t *testing.T, kubeconfig string) {
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
			{"create", "metalvrfippools.ipam.cluster.x-k8s.io", "default", false},
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
			args := []string{"--kubeconfig", kubeconfig, "auth", "can-i", r.verb, r.resource, "--as", user}
			if r.namespace == "" {
				args = append(args, "--all-namespaces")
			} else {
				args = append(args, "-n", r.namespace)
			}
			out, err := exec.Command("kubectl", args...).CombinedOutput()
			got := err == nil
			if _, ok := err.(*exec.ExitError); err != nil && !ok {
				t.Fatalf("kubectl: %v", err)
			}
			if got != r.allowed {
				t.Errorf("%s: can-i %s %s (namespace %q) = %s, want allowed=%v", user, r.verb, r.resource, r.namespace, strings.TrimSpace(string(out)), r.allowed)
			}
		}
	}
}
