package cloudinit

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/version"
)

// KubeVIPManifestPath is where kubelet finds kube-vip's static pod: kubeadm
// starts the pods of this directory before it waits for the API server
// behind the VIP.
const KubeVIPManifestPath = "/etc/kubernetes/manifests/kube-vip.yaml"

// DefaultKubeVIPImage is the kube-vip release the control-plane nodes run,
// pinned so a node's user-data does not change under it. It is an image
// reference only: the nodes pull it, nothing here or in the tests does.
const DefaultKubeVIPImage = "ghcr.io/kube-vip/kube-vip:v0.8.9"

// KubeVIP is what a control-plane node's kube-vip announces, and where.
type KubeVIP struct {
	// Address is the VIP.
	Address netip.Addr
	// Interface is the VLAN sub-interface kube-vip announces the VIP on
	// with ARP (NDP for IPv6): "<port>.<vlan>".
	Interface string
	// Port is the API server's port behind the VIP.
	Port int32
	// Image is kube-vip's container image.
	Image string
	// SuperAdmin gives kube-vip super-admin.conf instead of admin.conf, on
	// the node that runs kubeadm init of Kubernetes 1.29 or later: there
	// admin.conf gets its rights only at the end of kubeadm init, which
	// cannot end while the VIP it waits for is not announced. The user-data
	// then returns kube-vip to admin.conf once kubeadm init is done
	// (KubeVIPRestoreCommand).
	SuperAdmin bool
}

// superAdminSince is the first Kubernetes minor whose kubeadm init writes
// super-admin.conf and binds admin.conf's group only at its end.
var superAdminSince = version.MajorMinor(1, 29)

// KubeVIPRestoreCommand runs after the bootstrap's commands on a node whose
// kube-vip started with super-admin.conf: kubelet restarts the static pod
// with admin.conf, so the super-admin credentials are used only during
// kubeadm init.
var KubeVIPRestoreCommand = []string{"sed", "-i", "s#path: " + superAdminConf + "#path: " + adminConf + "#", KubeVIPManifestPath}

const (
	adminConf      = "/etc/kubernetes/admin.conf"
	superAdminConf = "/etc/kubernetes/super-admin.conf"
)

// NeedsSuperAdmin tells whether kube-vip on a node with this bootstrap data
// and Kubernetes version needs super-admin.conf: the node runs kubeadm init
// (the first control-plane node) of Kubernetes 1.29 or later. A version
// that does not parse is taken as a current one.
func NeedsSuperAdmin(bootstrap []byte, kubernetesVersion string) bool {
	if v, err := version.ParseGeneric(kubernetesVersion); err == nil && v.LessThan(superAdminSince) {
		return false
	}
	return InitsCluster(bootstrap)
}

// InitsCluster tells whether the node with this bootstrap data runs kubeadm
// init: the first control-plane node, whose API server the others join.
func InitsCluster(bootstrap []byte) bool {
	_, body := splitHeader(bootstrap)
	var cfg struct {
		RunCmd []any `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(body, &cfg); err != nil {
		return false
	}
	for _, c := range cfg.RunCmd {
		if line := fmt.Sprint(c); strings.Contains(line, "kubeadm init") {
			return true
		}
	}
	return false
}

// imagePattern keeps the image reference safe to write into the manifest
// unquoted: registry, path, tag and digest characters only.
var imagePattern = regexp.MustCompile(`^[a-z0-9][a-zA-Z0-9._/:@-]*$`)

// interfacePattern is a VLAN sub-interface of a port: "<port>.<vlan>".
var interfacePattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*\.[0-9]+$`)

func (v KubeVIP) validate() error {
	var errs []error
	if !v.Address.IsValid() || v.Address.Zone() != "" {
		errs = append(errs, fmt.Errorf("VIP %q is not an IP address", v.Address))
	}
	if !interfacePattern.MatchString(v.Interface) || len(v.Interface) > maxVLANInterfaceName {
		errs = append(errs, fmt.Errorf("interface %q is not a VLAN sub-interface name of at most %d characters", v.Interface, maxVLANInterfaceName))
	}
	if v.Port < 1 || v.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is not a TCP port", v.Port))
	}
	if !imagePattern.MatchString(v.Image) {
		errs = append(errs, fmt.Errorf("image %q is not an image reference", v.Image))
	}
	return errors.Join(errs...)
}

// kubeVIPManifest is kube-vip's static pod in ARP mode for the control
// plane only (no Services). Leader election picks the one node that
// answers for the VIP. kube-vip reaches the API server with admin.conf,
// which names the VIP itself; the hostAlias lets it reach the node's own
// API server as "kubernetes" (a name in its certificate) instead, while
// the VIP is not up yet.
var kubeVIPManifest = template.Must(template.New("kube-vip").Parse(`apiVersion: v1
kind: Pod
metadata:
  name: kube-vip
  namespace: kube-system
spec:
  containers:
    - name: kube-vip
      image: {{ .Image }}
      imagePullPolicy: IfNotPresent
      args:
        - manager
      env:
        - name: vip_arp
          value: "true"
        - name: cp_enable
          value: "true"
        - name: cp_namespace
          value: kube-system
        - name: vip_leaderelection
          value: "true"
        - name: vip_interface
          value: "{{ .Interface }}"
        - name: vip_address
          value: "{{ .Address }}"
        - name: vip_subnet
          value: "{{ .Address.BitLen }}"
        - name: port
          value: "{{ .Port }}"
      securityContext:
        capabilities:
          add:
            - NET_ADMIN
            - NET_RAW
      volumeMounts:
        - name: kubeconfig
          mountPath: /etc/kubernetes/admin.conf
  hostAliases:
    - hostnames:
        - kubernetes
      ip: 127.0.0.1
  hostNetwork: true
  volumes:
    - name: kubeconfig
      hostPath:
        path: {{ if .SuperAdmin }}/etc/kubernetes/super-admin.conf{{ else }}/etc/kubernetes/admin.conf{{ end }}
`))

// KubeVIPFile is the write_files entry of kube-vip's static pod announcing
// v.Address on v.Interface.
func KubeVIPFile(v KubeVIP) (File, error) {
	if err := v.validate(); err != nil {
		return File{}, fmt.Errorf("kube-vip: %w", err)
	}
	var out bytes.Buffer
	if err := kubeVIPManifest.Execute(&out, v); err != nil {
		return File{}, err
	}
	return File{Path: KubeVIPManifestPath, Permissions: "0600", Content: out.String()}, nil
}
