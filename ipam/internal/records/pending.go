package records

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// ClaimRecords lists the records of a claim in a domain.
func (s *Store) ClaimRecords(ctx context.Context, domain string, claim registry.Claim) ([]registry.Record, error) {
	records, err := s.listed(ctx, domain, client.MatchingLabels{v1alpha1.AllocationClaimUIDLabel: uidLabel(claim.UID)})
	return slices.DeleteFunc(records, func(rec registry.Record) bool { return !rec.Holder.Claim.Same(claim) }), err
}

// LiveRecords lists the records of a domain as the API server has them now:
// one List by the domain's label, read live, past the snapshot.
func (s *Store) LiveRecords(ctx context.Context, domain string) ([]registry.Record, error) {
	return s.listed(ctx, domain, client.MatchingLabels{})
}

// listed lists the records of the domain that carry labels, read live.
func (s *Store) listed(ctx context.Context, domain string, labels client.MatchingLabels) ([]registry.Record, error) {
	labels[v1alpha1.AllocationDomainLabel] = domainHash(domain)
	var list coordinationv1.LeaseList
	if err := s.reader.List(ctx, &list, client.InNamespace(s.namespace), labels); err != nil {
		return nil, err
	}
	records := make([]registry.Record, 0, len(list.Items))
	for i := range list.Items {
		if rec, err := recordOf(&list.Items[i]); err == nil && list.Items[i].Annotations[v1alpha1.AllocationDomainAnnotation] == domain {
			records = append(records, rec)
		}
	}
	return records, nil
}

// ClaimAddresses lists the addresses of the IPAddresses of the claim's
// namespace whose spec.claimRef names it.
func (s *Store) ClaimAddresses(ctx context.Context, claim registry.Claim) ([]netip.Addr, error) {
	var addresses []netip.Addr
	err := pages(ctx, s.reader, func() *ipamv1.IPAddressList { return &ipamv1.IPAddressList{} }, func(l *ipamv1.IPAddressList) {
		for _, address := range l.Items {
			if ip, err := netip.ParseAddr(address.Spec.Address); err == nil && address.Spec.ClaimRef.Name == claim.Name {
				addresses = append(addresses, ip)
			}
		}
	}, client.InNamespace(claim.Namespace))
	return addresses, err
}

// Confirm creates the record of r's address, or, when r's claim holds it
// already, marks it recorded now (its renewTime).
func (s *Store) Confirm(ctx context.Context, domain string, r registry.Record) error {
	for {
		err := s.Reserve(ctx, domain, r)
		var taken *registry.TakenError
		if !errors.As(err, &taken) || !taken.Holder.Claim.Same(r.Holder.Claim) || taken.Holder.Retired {
			return err
		}
		existing := &coordinationv1.Lease{}
		err = s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name(domain, r.Address)}, existing)
		switch {
		case apierrors.IsNotFound(err):
			continue // expired meanwhile: record it again
		case err != nil:
			return err
		}
		patch := client.MergeFromWithOptions(existing.DeepCopy(), client.MergeFromWithOptimisticLock{})
		existing.Spec.RenewTime = &metav1.MicroTime{Time: s.now()}
		err = s.client.Patch(ctx, existing, patch)
		if err == nil {
			s.written.set(existing.Name, existing.ResourceVersion, r.Holder.Claim)
		}
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		// Expired or changed meanwhile: look again.
	}
}

// recordedAt is when a record was created or last confirmed.
func recordedAt(obj *coordinationv1.Lease) time.Time {
	at := obj.CreationTimestamp.Time
	if renewed := obj.Spec.RenewTime; renewed != nil && renewed.After(at) {
		at = renewed.Time
	}
	return at
}
