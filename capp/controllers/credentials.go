package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// setupError is a problem of the machine's set-up (no PacketCluster, no
// credentials) that only a change by the user fixes; it becomes the
// condition of the phase that met it.
type setupError struct {
	reason, message string
}

func (e *setupError) Error() string { return e.message }

// metalAccess is how a machine reaches the Metal API.
type metalAccess struct {
	executor *device.Executor
	cluster  *infrav1.PacketCluster
	// source names where the credentials came from, for messages; never
	// the credentials themselves.
	source string
	// project is the project the machine's device lives in.
	project string
}

// credentials gives the Metal client of a cluster, the same way to the
// PacketMachine and PacketCluster reconcilers: the credentials Secret the
// PacketCluster names, or the manager's environment.
type credentials struct {
	// reader reads the Secret uncached.
	reader client.Reader
	cache  *metal.ClientCache
	getenv func(string) string
}

// client returns the Metal client of pc's spec.credentialsRef (a Secret in
// namespace), or of the manager's environment when pc names none or is nil,
// and names where the credentials came from, for messages. A problem only
// the user can fix is a *setupError.
func (c credentials) client(ctx context.Context, namespace string, pc *infrav1.PacketCluster) (*metal.Client, string, error) {
	if pc == nil || pc.Spec.CredentialsRef == nil {
		source := "the manager's environment (" + metal.EnvAPIKey + ")"
		mc, err := c.cache.FromEnv(c.getenv)
		if err != nil {
			return nil, source, &setupError{infrav1.NoCredentialsReason, fmt.Sprintf(
				"no Metal API credentials: set spec.credentialsRef on the PacketCluster, or %s in the manager's environment", metal.EnvAPIKey)}
		}
		return mc, source, nil
	}
	key := client.ObjectKey{Namespace: namespace, Name: pc.Spec.CredentialsRef.Name}
	source := fmt.Sprintf("Secret %s (PacketCluster %s spec.credentialsRef)", key.Name, pc.Name)
	secret := &corev1.Secret{}
	if err := c.reader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			// The cache keeps no token of a deleted Secret.
			c.cache.Forget(key)
			return nil, source, &setupError{infrav1.CredentialsSecretNotFoundReason, source + " not found"}
		}
		return nil, source, fmt.Errorf("reading %s: %w", source, err)
	}
	mc, err := c.cache.ForSecret(secret)
	if endpoint, ok := errors.AsType[*metal.EndpointNotAllowedError](err); ok {
		return nil, source, &setupError{infrav1.EndpointNotAllowedReason, fmt.Sprintf("%s: %v", source, endpoint)}
	}
	if err != nil {
		return nil, source, &setupError{infrav1.InvalidCredentialsReason, fmt.Sprintf("%s: %v", source, err)}
	}
	return mc, source, nil
}

// bootstrapAPIKey is the token bootstrap data written for upstream CAPP
// gets for {{ .apiKey }}: the one of pc's own credentials Secret, which its
// namespace already holds. The manager's token is handed out only when the
// operator allows it (managerToken): the user-data Secret lands in the
// machine's namespace, where anyone who may read Secrets there reads it.
func (c credentials) bootstrapAPIKey(ctx context.Context, namespace string, pc *infrav1.PacketCluster, managerToken bool) (string, error) {
	if pc.Spec.CredentialsRef == nil && !managerToken {
		return "", &setupError{infrav1.APIKeyNotAvailableReason, fmt.Sprintf(
			"the bootstrap data asks for {{ .apiKey }} and PacketCluster %s has no spec.credentialsRef: the manager's own token is never written into a namespace's user-data (set spec.credentialsRef to a Secret holding this cluster's token)", pc.Name)}
	}
	mc, _, err := c.client(ctx, namespace, pc)
	if err != nil {
		return "", err
	}
	return mc.APIKey(), nil
}

// metalFor returns the Metal API access of the machine: its cluster's
// credentials, scoped to the machine's project (spec.project, else the
// PacketCluster's).
func (r *PacketMachineReconciler) metalFor(ctx context.Context, s *machineScope) (*metalAccess, error) {
	pm := s.PacketMachine
	pc, err := r.packetCluster(ctx, s)
	if err != nil {
		return nil, err
	}
	creds := credentials{reader: r.APIReader, cache: r.Credentials, getenv: r.Getenv}
	c, source, err := creds.client(ctx, pm.Namespace, pc)
	if err != nil {
		return nil, err
	}
	access := &metalAccess{cluster: pc, source: source}
	project := pm.Spec.Project
	if project == "" && pc != nil {
		project = pc.Spec.ProjectID
	}
	if project == "" {
		return nil, &setupError{infrav1.InfrastructureNotFoundReason, "no project: set spec.project, or the PacketCluster's spec.projectID"}
	}
	access.project = project
	access.executor = &device.Executor{API: c.InProject(project), VLANs: r.vlans, VLANKey: vlanKey{c, project}}
	return access, nil
}

// vlanKey is whose VLAN list a machine may share: the same credentials'
// client in the same project.
type vlanKey struct {
	client  *metal.Client
	project string
}

// packetCluster is the PacketCluster the machine's Cluster names; nil when
// there is no Cluster any more (a machine deleted after its Cluster), which
// leaves the manager's environment as the only credentials.
func (r *PacketMachineReconciler) packetCluster(ctx context.Context, s *machineScope) (*infrav1.PacketCluster, error) {
	if s.Cluster == nil {
		return nil, nil
	}
	ref := s.Cluster.Spec.InfrastructureRef
	if ref.Kind != "PacketCluster" || ref.APIGroup != infrav1.GroupVersion.Group || ref.Name == "" {
		return nil, &setupError{infrav1.InfrastructureNotFoundReason, fmt.Sprintf(
			"Cluster %s has no spec.infrastructureRef to a PacketCluster", s.Cluster.Name)}
	}
	pc := &infrav1.PacketCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Cluster.Namespace, Name: ref.Name}, pc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &setupError{infrav1.InfrastructureNotFoundReason, fmt.Sprintf(
				"PacketCluster %s (Cluster %s spec.infrastructureRef) not found", ref.Name, s.Cluster.Name)}
		}
		return nil, err
	}
	return pc, nil
}
