package manager

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// compactClaimsAndAddresses makes the cache keep the claims and IPAddresses
// it holds, one of each per address in use in the cluster (every
// provider's), in less memory (docs/benchmarks.md, "The manager's memory,
// out of process"):
//
//   - Another provider's claim or IPAddress keeps only its identity and its
//     pool reference: the controllers read no more of it than the reference
//     that tells them it is not theirs, and never write it. A reference is
//     immutable, and a transform sees every version of an object, so an
//     object that is ours is never stripped.
//   - Ours keep every field (the controllers patch them from the cache: a
//     patch is computed against the cached object, so a field dropped here
//     would be written away), but share the strings that repeat from object
//     to object (namespace, pool reference, owner kinds, condition reasons,
//     finalizers, label and annotation keys) instead of a copy per object.
//
// Both drop the managed fields, as the default transform does.
func compactClaimsAndAddresses(opts *cache.Options) {
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	opts.ByObject[&ipamv1.IPAddressClaim{}] = cache.ByObject{Transform: compactClaim}
	opts.ByObject[&ipamv1.IPAddress{}] = cache.ByObject{Transform: compactAddress}
}

func compactClaim(obj any) (any, error) {
	claim, ok := obj.(*ipamv1.IPAddressClaim)
	if !ok {
		return obj, nil // a tombstone: left as it comes
	}
	if _, ours := poolref.For(claim.Spec.PoolRef, claim.Namespace); !ours {
		return &ipamv1.IPAddressClaim{
			TypeMeta:   claim.TypeMeta,
			ObjectMeta: identity(claim.ObjectMeta),
			Spec:       ipamv1.IPAddressClaimSpec{PoolRef: internPoolRef(claim.Spec.PoolRef)},
		}, nil
	}
	internMeta(&claim.ObjectMeta)
	claim.Spec.PoolRef = internPoolRef(claim.Spec.PoolRef)
	for i := range claim.Status.Conditions {
		c := &claim.Status.Conditions[i]
		c.Type, c.Reason, c.Message = intern(c.Type), intern(c.Reason), intern(c.Message)
		c.Status = metav1.ConditionStatus(intern(string(c.Status)))
	}
	return claim, nil
}

func compactAddress(obj any) (any, error) {
	address, ok := obj.(*ipamv1.IPAddress)
	if !ok {
		return obj, nil
	}
	if _, ours := poolref.For(address.Spec.PoolRef, address.Namespace); !ours {
		return &ipamv1.IPAddress{
			TypeMeta:   address.TypeMeta,
			ObjectMeta: identity(address.ObjectMeta),
			Spec:       ipamv1.IPAddressSpec{PoolRef: internPoolRef(address.Spec.PoolRef)},
		}, nil
	}
	internMeta(&address.ObjectMeta)
	address.Spec.PoolRef = internPoolRef(address.Spec.PoolRef)
	address.Spec.Gateway = intern(address.Spec.Gateway)
	return address, nil
}

// identity is what the cache keeps of another provider's object's metadata:
// enough to find it, order its versions and see it go.
func identity(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}
}

// internMeta drops the managed fields and shares the strings of m that
// repeat across objects.
func internMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.Namespace = intern(m.Namespace)
	for i, f := range m.Finalizers {
		m.Finalizers[i] = intern(f)
	}
	m.Labels = internMap(m.Labels)
	m.Annotations = internKeys(m.Annotations)
	for i := range m.OwnerReferences {
		ref := &m.OwnerReferences[i]
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
	}
}

func internPoolRef(ref ipamv1.IPPoolReference) ipamv1.IPPoolReference {
	return ipamv1.IPPoolReference{APIGroup: intern(ref.APIGroup), Kind: intern(ref.Kind), Name: intern(ref.Name)}
}

// internMap shares keys and values: labels name a cluster, a pool, a
// shard, values that repeat.
func internMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = intern(v)
	}
	return out
}

// internKeys shares the keys alone: an annotation's value is as often
// unique to its object.
func internKeys(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = v
	}
	return out
}

// intern returns s in a copy shared with the objects decoded before it
// (unique forgets a string at a collection once no handle holds it, so a
// string keeps a copy per stretch between collections, not one per object).
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
