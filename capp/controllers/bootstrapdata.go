package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// UserDataSecretName is the name of the Secret holding a machine's user-data.
func UserDataSecretName(machine string) string { return machine + "-user-data" }

// UserDataKey is the key of the user-data in its Secret, as in CAPI's
// bootstrap data Secrets.
const UserDataKey = "value"

// reconcileBootstrapData merges the Machine's bootstrap data with the node's
// network configuration (and, on a control-plane machine, the binding of
// the endpoint the cluster reserved or kube-vip's static pod for its VIP,
// and with spec.nodeSoftware Install, the node software's install) into the
// user-data Secret, owned by the
// PacketMachine and named in its status. It needs the addresses, so it runs
// after reconcileIPAddresses; it waits for the bootstrap provider through
// the watch on the Machine.
func (r *PacketMachineReconciler) reconcileBootstrapData(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	dataSecretName := s.Machine.Spec.Bootstrap.DataSecretName
	if dataSecretName == nil {
		s.facts.bootstrap = waitingForBootstrap{}
		return ctrl.Result{}, false, nil
	}

	bootstrap := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pm.Namespace, Name: *dataSecretName}, bootstrap); err != nil {
		return ctrl.Result{}, false, fmt.Errorf("reading the bootstrap data Secret %s: %w", *dataSecretName, err)
	}
	if format := string(bootstrap.Data["format"]); format != "" && format != "cloud-config" {
		return r.bootstrapDataInvalid(s, fmt.Errorf("bootstrap data Secret %s has format %q; only cloud-config can carry the network configuration", *dataSecretName, format))
	}
	binding, wait, err := r.endpointBinding(ctx, s, bootstrap.Data[UserDataKey])
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if wait != nil {
		s.facts.bootstrap = wait
		return ctrl.Result{}, false, nil
	}
	software, err := nodeSoftware(s)
	if err != nil {
		return r.bootstrapDataInvalid(s, err)
	}
	kubeVIP, wait, err := r.kubeVIP(ctx, s, bootstrap.Data[UserDataKey])
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if wait != nil {
		r.kubeVIPWaitEvent(s, wait)
		s.facts.bootstrap = wait
		return ctrl.Result{}, false, nil
	}
	data, err := r.expandUpstream(ctx, s, bootstrap.Data[UserDataKey])
	if terr, ok := errors.AsType[*cloudinit.UpstreamTemplateError](err); ok {
		return r.bootstrapDataInvalid(s, fmt.Errorf("bootstrap data Secret %s: %w", *dataSecretName, terr))
	}
	if err != nil {
		return setupFailed(func(f *setupError) { s.facts.bootstrap = f }, err)
	}
	// The endpoint is bound before the software install, which may take
	// minutes, and both before the bootstrap's kubeadm.
	userData, err := cloudinit.UserData(data, s.Networks, r.Render, binding.Join(software, kubeVIP))
	if err != nil {
		return r.bootstrapDataInvalid(s, fmt.Errorf("bootstrap data Secret %s: %w", *dataSecretName, err))
	}

	return r.writeUserData(ctx, s, userData)
}

// writeUserData keeps the user-data in the Secret the machine controls.
func (r *PacketMachineReconciler) writeUserData(ctx context.Context, s *machineScope, userData []byte) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: pm.Namespace, Name: UserDataSecretName(pm.Name)}}
	result, err := controllerutil.CreateOrPatch(ctx, r.Client, secret, func() error {
		// RBAC lets the manager patch any Secret; only this check keeps it
		// to the ones it made.
		if secret.ResourceVersion != "" && !metav1.IsControlledBy(secret, pm) {
			return &foreignSecretError{secret: secret.Name}
		}
		addLabels(secret, createdLabels(pm, s.Cluster.Name))
		secret.Type = clusterv1.ClusterSecretType
		secret.Data = map[string][]byte{UserDataKey: userData}
		return controllerutil.SetControllerReference(pm, secret, r.Client.Scheme())
	})
	if foreign, ok := errors.AsType[*foreignSecretError](err); ok {
		s.facts.bootstrap = foreign
		warnOnChange(r.Recorder, pm, bootstrapDataRendered(foreign), "RenderUserData")
		return ctrl.Result{RequeueAfter: foreignSecretRetry}, false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, fmt.Errorf("writing the user-data Secret %s: %w", secret.Name, err)
	}
	if result != controllerutil.OperationResultNone {
		ctrl.LoggerFrom(ctx).Info("Wrote the user-data", "Secret", secret.Name, "operation", result)
		r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "UserDataRendered", "RenderUserData", "User-data Secret %s %s", secret.Name, result)
	}
	s.UserData = userData
	s.facts.bootstrap = bootstrapRendered{secret: secret.Name}
	return ctrl.Result{}, true, nil
}

// expandUpstream fills in the values of bootstrap data written for upstream
// CAPP (see cloudinit.ExpandUpstream): the Machine's Kubernetes version, and
// on a control-plane machine the PacketCluster's endpoint host and, only when the data
// asks for it, the Metal API token of the cluster's credentials Secret (see
// bootstrapAPIKey), as upstream gave them.
func (r *PacketMachineReconciler) expandUpstream(ctx context.Context, s *machineScope, data []byte) ([]byte, error) {
	values := cloudinit.UpstreamValues{KubernetesVersion: s.Machine.Spec.Version}
	if util.IsControlPlaneMachine(s.Machine) && bytes.Contains(data, []byte("{{")) {
		pc, err := r.packetCluster(ctx, s)
		if err != nil {
			return nil, err
		}
		values.ControlPlaneEndpoint = pc.Spec.ControlPlaneEndpoint.Host
		if bytes.Contains(data, []byte(".apiKey")) {
			creds := credentials{reader: r.APIReader, cache: r.Credentials, getenv: r.Getenv}
			if values.APIKey, err = creds.bootstrapAPIKey(ctx, s.PacketMachine.Namespace, pc, r.ManagerTokenInBootstrapData); err != nil {
				return nil, err
			}
		}
	}
	out, _, err := cloudinit.ExpandUpstream(data, values)
	return out, err
}

// foreignSecretRetry is how often a machine whose user-data Secret name is
// taken looks again: Secrets are not watched, so nothing tells it when the
// Secret is gone.
const foreignSecretRetry = time.Minute

// foreignSecretError: the user-data Secret's name is taken by a Secret the
// PacketMachine does not control.
type foreignSecretError struct{ secret string }

func (e *foreignSecretError) Error() string {
	return fmt.Sprintf("Secret %s exists and is not controlled by this PacketMachine; it is left as it is: delete or rename it", e.secret)
}

// bootstrapDataInvalid reports bootstrap data that cannot be merged; only a
// new bootstrap data Secret (a Machine update, which the watch sees) can fix
// it, so there is nothing to retry.
func (r *PacketMachineReconciler) bootstrapDataInvalid(s *machineScope, err error) (ctrl.Result, bool, error) {
	s.facts.bootstrap = bootstrapInvalid{err: err}
	warnOnChange(r.Recorder, s.PacketMachine, bootstrapDataRendered(s.facts.bootstrap), "RenderUserData")
	return ctrl.Result{}, false, nil
}
