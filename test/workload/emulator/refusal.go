package emulator

import "fmt"

// Reason says why a device's user-data would not make it a node of a
// cluster.
type Reason int

const (
	// NotCloudConfig: the user-data is not a cloud-config cloud-init reads.
	NotCloudConfig Reason = iota + 1
	// NoKubeadm: no runcmd entry runs kubeadm init or kubeadm join.
	NoKubeadm
	// KubeadmConfigMissing: kubeadm's --config names no file the
	// user-data writes.
	KubeadmConfigMissing
	// KubeadmConfigInvalid: the kubeadm configuration cannot be read, or
	// lacks what kubeadm needs (an endpoint to init for or join).
	KubeadmConfigInvalid
	// UnrenderedTemplate: a Jinja expression cloud-init would leave as it
	// is (no "## template: jinja" header) or cannot fill in.
	UnrenderedTemplate
	// ProviderIDMismatch: the kubelet's provider ID, once rendered, is not
	// the device's.
	ProviderIDMismatch
	// BindingIncomplete: the endpoint binding is written for ifupdown but
	// not applied now, or the other way round, or the two disagree.
	BindingIncomplete
	// BindsBeforeJoin: a joining control plane binds the endpoint before
	// kubeadm join runs, so it would try to join its own, not yet running,
	// API server.
	BindsBeforeJoin
	// EndpointNotBound: a control plane of a cluster whose endpoint is a
	// public address the platform routes (vipManager CPEM) does not bind
	// that address, so its API server never answers there.
	EndpointNotBound
	// EndpointUnreachable: a joining node's discovery endpoint is not routed
	// to a control-plane device that binds it.
	EndpointUnreachable
	// CAMismatch: the joining node pins a cluster CA that is not the CA of
	// the cluster answering at its endpoint.
	CAMismatch
)

var reasonNames = map[Reason]string{
	NotCloudConfig:       "not a cloud-config",
	NoKubeadm:            "no kubeadm command",
	KubeadmConfigMissing: "kubeadm configuration missing",
	KubeadmConfigInvalid: "kubeadm configuration invalid",
	UnrenderedTemplate:   "unrendered template",
	ProviderIDMismatch:   "provider ID mismatch",
	BindingIncomplete:    "endpoint binding incomplete",
	BindsBeforeJoin:      "binds the endpoint before joining",
	EndpointNotBound:     "endpoint not bound",
	EndpointUnreachable:  "endpoint unreachable",
	CAMismatch:           "cluster CA mismatch",
}

func (r Reason) String() string {
	if name, ok := reasonNames[r]; ok {
		return name
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Refusal is the error for a device that would not become a node: which
// device, why (Reason, for callers to tell refusals apart), and the detail
// for the person reading it.
type Refusal struct {
	DeviceID string
	Reason   Reason
	Detail   string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("device %s would not join a cluster: %s: %s", r.DeviceID, r.Reason, r.Detail)
}

func refuse(deviceID string, reason Reason, format string, args ...any) *Refusal {
	return &Refusal{DeviceID: deviceID, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
