package testenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1alpha1 "github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

const (
	// fencePolicy is the allocation fence's ValidatingAdmissionPolicy, as
	// config/ipam/fence names it.
	fencePolicy = "allocation-fence"
	// fenceProbeLease is the leader election Lease the fence's probe names.
	fenceProbeLease = "allocation-fence-probe"
)

// installFence creates the allocation fence (config/ipam/fence, as the
// components install it) and waits until the API server applies it: a
// record naming a Lease another process holds is refused, one naming a
// Lease its writer holds is admitted (both dry runs, in the default
// namespace, against a Lease made for the probe and deleted after it).
func (e *Environment) installFence(ctx context.Context) error {
	objects, err := ReadObjects(filepath.Join(e.Root, "config", "ipam", "fence", "allocation-fence.yaml"))
	if err != nil {
		return err
	}
	for _, obj := range objects {
		if err := e.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: fenceProbeLease,
			Labels: map[string]string{ipamv1alpha1.LeaderElectionLabel: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("leader")},
	}
	if err := e.Client.Create(ctx, lease); err != nil {
		return err
	}
	defer func() { _ = e.Client.Delete(context.Background(), lease) }()

	var lastErr error
	refused := func(ctx context.Context) (bool, error) {
		lastErr = e.Client.Create(ctx, FencedRecord(metav1.NamespaceDefault, fenceProbeLease, "deposed"), client.DryRunAll)
		return apierrors.IsForbidden(lastErr), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, refused); err != nil {
		return fmt.Errorf("the allocation fence did not take effect: %w", errors.Join(err, lastErr))
	}
	if err := e.Client.Create(ctx, FencedRecord(metav1.NamespaceDefault, fenceProbeLease, "leader"), client.DryRunAll); err != nil {
		return fmt.Errorf("the allocation fence refuses the record of the Lease's holder: %w", err)
	}
	return nil
}

// FencedRecord is an allocation record, as a leader's controllers write
// it, by writer under the leader election Lease named lease.
func FencedRecord(namespace, lease, writer string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, GenerateName: "fence-probe-",
		Labels: map[string]string{ipamv1alpha1.AllocationFencedLabel: "true"},
		Annotations: map[string]string{
			ipamv1alpha1.AllocationFenceAnnotation:      lease,
			ipamv1alpha1.AllocationRecordedByAnnotation: writer,
			ipamv1alpha1.AllocationAddressAnnotation:    "192.0.2.1",
		},
	}}
}
