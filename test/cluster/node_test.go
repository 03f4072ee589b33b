package cluster_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The node's addresses, all inside the network namespace the test made: the
// node's own address (on the loopback device, where the API server and the
// kubelet listen), the Pods' subnet on the CNI bridge and the Services'
// range, which kube-proxy turns into the Pods' addresses.
const (
	nodeIP      = "10.200.0.1"
	podCIDR     = "10.244.0.0/24"
	serviceCIDR = "10.96.0.0/16"
	apiServerIP = "10.96.0.1" // the kubernetes Service, first of serviceCIDR
	registry    = "127.0.0.1:5000"
	// cgroupRoot holds every Pod's cgroup, so the test removes one folder
	// per hierarchy when it ends.
	cgroupRoot = "/metalvrf-test-cluster"
)

// node is the one-node cluster: its folder, its processes and its PKI.
type node struct {
	t   *testing.T
	dir string
	bin string // CLUSTER_BIN: kubelet, kube-controller-manager, ...
	ca  *authority
	// exits holds, for each process started, a channel closed when it ends.
	exits map[string]chan struct{}
}

// start runs cmd with its output in dir/logs/<name>.log and stops it, with
// SIGTERM, when the test ends (the pid namespace kills what remains).
func (n *node) start(name string, args ...string) {
	n.t.Helper()
	logs := filepath.Join(n.dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		n.t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(logs, filepath.Base(name)+".log"))
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if n.exits == nil {
		n.exits = map[string]chan struct{}{}
	}
	n.exits[filepath.Base(name)] = done
	n.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = log.Close()
	})
}

// exited names a process that ended while the cluster should be running,
// with the end of its log.
func (n *node) exited() error {
	for name, done := range n.exits {
		select {
		case <-done:
			return fmt.Errorf("%s exited:\n%s", name, n.logTail(name))
		default:
		}
	}
	return nil
}

// logTail is the end of a process's log, for a failure message.
func (n *node) logTail(name string) string {
	data, _ := os.ReadFile(filepath.Join(n.dir, "logs", name+".log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

func (n *node) write(rel, content string) string {
	n.t.Helper()
	path := filepath.Join(n.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		n.t.Fatal(err)
	}
	return path
}

func run(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
}

// isolate gives the namespaces the test made their own /run/containerd,
// CNI state, network namespace folder and Pod logs (paths containerd and the
// kubelet do not let one move), and the network its node address.
func isolate(t *testing.T) {
	for _, dir := range []string{"/run/containerd", "/var/lib/cni", "/run/netns", "/var/log/pods", "/var/log/containers"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
		}
	}
	run(t, nil, "ip", "link", "set", "lo", "up")
	// The kernel here has no dummy devices: the node's address sits on the
	// namespace's loopback device, still reached from the Pods' bridge.
	run(t, nil, "ip", "addr", "add", nodeIP+"/32", "dev", "lo")
	// The namespace has no default route: the API server's connections to
	// a Service need a route for the kernel to try them, before kube-proxy's
	// rules send them to a Pod.
	run(t, nil, "ip", "route", "add", serviceCIDR, "dev", "lo", "src", nodeIP)
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Every v1 hierarchy and the unified one get the Pods' cgroup root.
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() {
			continue // symlinks such as cpu -> cpu,cpuacct
		}
		_ = os.Mkdir(filepath.Join(h, cgroupRoot), 0o755)
	}
	// A new cpuset cgroup starts with no CPUs and no memory nodes.
	for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
		if data, err := os.ReadFile("/sys/fs/cgroup/cpuset/" + file); err == nil {
			_ = os.WriteFile("/sys/fs/cgroup/cpuset"+cgroupRoot+"/"+file, data, 0o644)
		}
	}
}

// startControlPlane starts etcd and kube-apiserver, with certificates the
// test makes, and returns the admin kubeconfig.
func (n *node) startControlPlane(envtestDir string) string {
	t := n.t
	n.ca = newAuthority(t, "metalvrf-test-cluster-ca")
	pki := filepath.Join(n.dir, "pki")
	n.write("pki/ca.crt", n.ca.certPEM)
	n.write("pki/ca.key", n.ca.keyPEM)
	crt, key := n.ca.issue(t, "kube-apiserver", nil,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP(nodeIP), net.ParseIP(apiServerIP), net.ParseIP("127.0.0.1")})
	n.write("pki/apiserver.crt", crt)
	n.write("pki/apiserver.key", key)
	crt, key = n.ca.issue(t, "admin", []string{"system:masters"}, nil, nil)
	n.write("pki/admin.crt", crt)
	n.write("pki/admin.key", key)
	// The API server reads the public half from this file too, which it
	// finds only in the SEC 1 form ("EC PRIVATE KEY").
	saDER, err := x509.MarshalECPrivateKey(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	n.write("pki/sa.key", string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})))

	kubeconfig := n.write("admin.kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://%s:6443
    certificate-authority: %[2]s/ca.crt
users:
- name: admin
  user:
    client-certificate: %[2]s/admin.crt
    client-key: %[2]s/admin.key
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, nodeIP, pki))

	n.start(filepath.Join(envtestDir, "etcd"), "--data-dir", filepath.Join(n.dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380", "--unsafe-no-fsync")
	n.start(filepath.Join(envtestDir, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--secure-port", "6443", "--advertise-address", nodeIP,
		"--service-cluster-ip-range", serviceCIDR,
		"--tls-cert-file", pki+"/apiserver.crt", "--tls-private-key-file", pki+"/apiserver.key",
		"--client-ca-file", pki+"/ca.crt",
		"--kubelet-client-certificate", pki+"/admin.crt", "--kubelet-client-key", pki+"/admin.key",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pki+"/sa.key", "--service-account-signing-key-file", pki+"/sa.key",
		"--authorization-mode", "Node,RBAC", "--allow-privileged=false")
	return kubeconfig
}

// startControllers starts kube-controller-manager and kube-scheduler, once
// the API server is ready: each gives up when the API server's health
// check fails for long, which a loaded machine's first start may do.
func (n *node) startControllers(kubeconfig string) {
	pki := filepath.Join(n.dir, "pki")
	n.start(filepath.Join(n.bin, "kube-controller-manager"),
		"--kubeconfig", kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1",
		"--service-account-private-key-file", pki+"/sa.key", "--root-ca-file", pki+"/ca.crt",
		"--use-service-account-credentials")
	n.start(filepath.Join(n.bin, "kube-scheduler"), "--kubeconfig", kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1")
}

// startNode starts the registry, containerd, the kubelet and kube-proxy.
func (n *node) startNode(ctx context.Context, kubeconfig string) {
	n.write("registry.yml", fmt.Sprintf(`version: 0.1
storage:
  filesystem:
    rootdirectory: %s/registry
http:
  addr: %s
`, n.dir, registry))
	n.start("docker-registry", "serve", filepath.Join(n.dir, "registry.yml"))

	// Only what differs from containerd's defaults. restrict_oom_score_adj:
	// this machine lacks CAP_SYS_RESOURCE, so runc cannot give a container a
	// lower oom_score_adj than containerd's own.
	n.write("containerd.toml", fmt.Sprintf(`version = 2
root = "%[1]s/containerd/root"
state = "%[1]s/containerd/state"
[grpc]
  address = "%[1]s/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%[2]s/pause:test"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "%[1]s/cni"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."%[2]s"]
    endpoint = ["http://%[2]s"]
`, n.dir, registry))
	n.write("cni/10-bridge.conflist", fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, podCIDR))
	n.start("containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
	// The kubelet exits at once if the runtime's socket is not there yet,
	// which on a loaded machine it was not.
	socket := filepath.Join(n.dir, "containerd.sock")
	waitFor(ctx, n.t, 2*time.Minute, "containerd serves "+socket, func() error {
		if err := n.exited(); err != nil {
			n.t.Fatal(err)
		}
		conn, err := net.Dial("unix", socket)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, n.logTail("containerd"))
		}
		return conn.Close()
	})

	n.write("kubelet.yaml", fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]s/pki/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
address: %[3]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
protectKernelDefaults: false
serializeImagePulls: false
`, cgroupRoot, n.dir, nodeIP))
	n.start(filepath.Join(n.bin, "kubelet"), "--config", filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig", kubeconfig, "--root-dir", filepath.Join(n.dir, "kubelet"),
		"--hostname-override", "node", "--node-ip", nodeIP)

	// Service traffic is masqueraded, so a Pod's reply to another Pod
	// through a Service goes back through the node (no br_netfilter).
	n.write("kube-proxy.yaml", fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: node
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables: {masqueradeAll: true}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, kubeconfig, nodeIP))
	n.start(filepath.Join(n.bin, "kube-proxy"), "--config", filepath.Join(n.dir, "kube-proxy.yaml"))
}

// authority is a CA the test makes for the control plane.
type authority struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM string
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func keyPEM(t *testing.T, key *ecdsa.PrivateKey) string {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func newAuthority(t *testing.T, name string) *authority {
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &authority{cert: cert, key: key,
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), keyPEM: keyPEM(t, key)}
}

// issue signs a certificate for both server and client use.
func (a *authority) issue(t *testing.T, cn string, orgs, dnsNames []string, ips []net.IP) (certPEM, keyPEMs string) {
	key := newKey(t)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), keyPEM(t, key)
}

// waitFor polls check until it returns nil or the timeout passes.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(2 * time.Second)
	}
}
